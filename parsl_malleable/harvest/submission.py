"""Submitting one block so that a scheduler fault never leaves a job nobody tracks.

A submit command can fail after the scheduler created the job (Slurm's "Socket timed out on
send/recv operation" on the reply), hang past its timeout after submitting, exit 0 with a reply
that holds no id, or print a cut-off id. Each block therefore carries a name no other job has
(:func:`block_name`), the submit is never retried blindly, and after any failure the name is
looked up: one job found is adopted, any others are cancelled, none found means nothing was
submitted. What the lookup cannot settle (it failed too) the provider settles at its next
snapshot, which lists every job carrying its tag (:mod:`parsl_malleable.harvest.reconcile`).
"""

from __future__ import annotations

import logging
import secrets
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from parsl_malleable.errors import MalleableError
from parsl_malleable.schedulers.base import OURS_PREFIX, BlockScheduler

logger = logging.getLogger(__name__)


def provider_tag(label: str) -> str:
    """The name prefix of one provider's blocks: ``pm-block-<label>-<8 hex>``. The random part
    tells this provider's blocks from those of another driver with the same label."""
    return f"{OURS_PREFIX}-{label}-{secrets.token_hex(4)}"


def block_name(tag: str, block_id: str, seq: int) -> str:
    """The name of the ``seq``-th job this provider submits, for Parsl block ``block_id``."""
    return f"{tag}-{block_id}-{seq}"


@dataclass
class Submitted:
    """How one submit ended. ``job_id`` None: no job of that name exists (or none could be
    found: ``unsettled``). ``error``: the scheduler's words when the submit command failed."""

    job_id: str | None
    adopted: bool = False
    error: str = ""
    unsettled: bool = False
    duplicates: list[str] = field(default_factory=list)


def submit_block(
    scheduler: BlockScheduler,
    script: Path,
    *,
    name: str,
    nodes: int,
    walltime_s: float,
    node_ids: Sequence[str],
    taken: set[str],
    faults: Counter[str],
) -> Submitted:
    """Submit ``script`` as job ``name``; on any failure find it by name and adopt or cancel.

    ``taken``: job ids the provider already tracks; a submit that prints one of them printed a
    wrong id (two slots would share one record), which is treated as an unreadable reply.
    ``faults`` counts what happened (``submit_failed``, ``submit_adopted``, ...).
    """
    try:
        job_id = scheduler.submit(
            script, nodes=nodes, walltime_s=walltime_s, node_ids=node_ids, name=name
        )
    except MalleableError as exc:
        error = str(exc)
    else:
        if job_id not in taken:
            return Submitted(job_id)
        error = f"the submit printed job id {job_id}, which another block of ours holds"
        faults["id_invalid"] += 1
    return _settle_by_name(scheduler, name, error, faults)


def _settle_by_name(
    scheduler: BlockScheduler, name: str, error: str, faults: Counter[str]
) -> Submitted:
    try:
        found = scheduler.jobs_named(name)
    except MalleableError as exc:
        # The snapshot of the next poll lists the job if it exists: it is cancelled there.
        faults["submit_unsettled"] += 1
        logger.warning(
            "block %s: submit failed (%s) and looking it up failed too (%s); the next poll "
            "cancels it if it exists",
            name,
            error,
            exc,
        )
        return Submitted(None, error=error, unsettled=True)
    if not found:
        faults["submit_failed"] += 1
        return Submitted(None, error=error)
    keep, *extra = found
    faults["submit_adopted"] += 1
    logger.warning(
        "block %s: the submit failed (%s) but the scheduler holds it as job %s: adopted",
        name,
        error,
        keep,
    )
    if extra:
        faults["duplicates_cancelled"] += len(extra)
        logger.warning("block %s: cancelling duplicate jobs %s", name, ", ".join(extra))
        try:
            scheduler.cancel(extra)
        except MalleableError as exc:  # they carry our tag: the next snapshot retries
            logger.warning("cancel of duplicates %s failed: %s", extra, exc)
    return Submitted(keep, adopted=True, error=error, duplicates=extra)


__all__ = ["Submitted", "block_name", "provider_tag", "submit_block"]
