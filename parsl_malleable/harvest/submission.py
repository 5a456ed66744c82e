"""Submitting one block so that a scheduler fault never leaves a job nobody tracks.

A submit command can fail after the scheduler created the job (Slurm's "Socket timed out on
send/recv operation" on the reply), hang past its timeout after submitting, exit 0 with a reply
that holds no id, or print a wrong id: cut off (``1`` for ``101``), another job's, garbage.
Each block therefore carries a name no other job has (:func:`block_name`), the submit is never
retried blindly, and the name is looked up after any failure and, where the id was printed by a
command (:attr:`~parsl_malleable.schedulers.base.BlockScheduler.submit_ids_printed`), after
every submit: the id is tracked only when the job of that name has it; another id found by the
name is tracked instead (a repair), any further ones are cancelled, none found means no block of
ours is queued. What the lookup cannot settle (it failed too) the provider settles at its next
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
    found: ``unsettled``). ``error``: the scheduler's words when the submit command failed, or
    what was wrong with the id it printed (``job_id`` then holds the id found by name).
    ``unchecked``: ``job_id`` is the printed id, which the lookup by name could not confirm."""

    job_id: str | None
    adopted: bool = False
    error: str = ""
    unsettled: bool = False
    unchecked: bool = False
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
    """Submit ``script`` as job ``name``; check the id by the name, adopt or cancel what it finds.

    ``taken``: job ids the provider already tracks; a submit that prints one of them printed a
    wrong id (two slots would share one record), which is treated as an unreadable reply.
    ``faults`` counts what happened (``submit_failed``, ``submit_adopted``, ``id_repaired``...).
    """
    try:
        job_id = scheduler.submit(
            script, nodes=nodes, walltime_s=walltime_s, node_ids=node_ids, name=name
        )
    except MalleableError as exc:
        return _settle_by_name(scheduler, name, str(exc), faults)
    if job_id in taken:
        faults["id_invalid"] += 1
        error = f"the submit printed job id {job_id}, which another block of ours holds"
        return _settle_by_name(scheduler, name, error, faults)
    if not scheduler.submit_ids_printed:
        return Submitted(job_id)
    # One query per block: without it a cut-off or foreign id is tracked until the next
    # snapshot, and a cancel meanwhile (close(), a yield) hits that id, not the block.
    return _settle_by_name(scheduler, name, "", faults, printed=job_id)


def _settle_by_name(
    scheduler: BlockScheduler,
    name: str,
    error: str,
    faults: Counter[str],
    printed: str | None = None,
) -> Submitted:
    """The job named ``name``, found by that name: after a failed submit (``error``), or to
    check the id the submit ``printed``."""
    try:
        found = scheduler.jobs_named(name)
    except MalleableError as exc:
        if printed is not None:
            # Dropping the block would resubmit and drop it again at every poll while the
            # lookup fails; its next snapshot finds it by name and checks the id there.
            faults["id_unchecked"] += 1
            logger.warning(
                "block %s: the check of printed job id %s by name failed (%s); tracked as "
                "unchecked until a snapshot shows the name",
                name,
                printed,
                exc,
            )
            return Submitted(printed, unchecked=True)
        # The snapshot of the next poll lists the job if it exists: it is cancelled there.
        faults["submit_unsettled"] += 1
        logger.warning(
            "block %s: submit failed (%s) and looking it up by name failed too (%s); the next "
            "poll cancels it if it exists",
            name,
            error,
            exc,
        )
        return Submitted(None, error=error, unsettled=True)
    if not found:
        faults["submit_failed"] += 1
        if printed is not None:
            error = (
                f"the submit printed job id {printed}, but no queued or running job is named {name}"
            )
            logger.warning("block %s: %s; nothing is tracked", name, error)
        return Submitted(None, error=error)
    keep = printed if printed in found else found[0]
    extra = [j for j in found if j != keep]
    if printed is None:
        faults["submit_adopted"] += 1
        logger.warning(
            "block %s: the submit failed (%s) but the scheduler holds it as job %s: adopted",
            name,
            error,
            keep,
        )
    elif keep != printed:
        faults["id_repaired"] += 1
        error = f"the submit printed job id {printed}, but the scheduler holds the block as {keep}"
        logger.warning("block %s: %s: tracking %s", name, error, keep)
    if extra:
        faults["duplicates_cancelled"] += len(extra)
        logger.warning("block %s: cancelling duplicate jobs %s", name, ", ".join(extra))
        try:
            scheduler.cancel(extra)
        except MalleableError as exc:  # they carry our tag: the next snapshot retries
            logger.warning("cancel of duplicates %s failed: %s", extra, exc)
    return Submitted(keep, adopted=printed is None, error=error, duplicates=extra)


__all__ = ["Submitted", "block_name", "provider_tag", "submit_block"]
