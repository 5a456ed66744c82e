"""Matching the provider's book against one snapshot, by job id and by block name.

Pure: the provider acts on what :func:`match_blocks` finds. A record is matched by its job id,
else by its block's unique name (a submit that printed a cut-off id recorded the wrong id: the
scheduler shows the block under its name with the right one). A job that carries this
provider's tag but that no active record holds is a *stray* (a submit that failed after
creating the job, a duplicate, a block dropped from the book that reappeared): the provider
cancels it. Records in neither list are *missing*: the provider asks again before it drops
them (:data:`CONFIRM_POLLS`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from parsl_malleable.harvest.ledger import JobRecord
from parsl_malleable.snapshot import RunningJob, Snapshot

#: Cancels of one job that fail are retried after 1, 2, 4 ... s (at most
#: :data:`CANCEL_BACKOFF_MAX_S`), and given up loudly after :data:`CANCEL_ATTEMPTS`.
CANCEL_ATTEMPTS = 8
CANCEL_BACKOFF_MAX_S = 60.0

#: Consecutive polls a record must be missing, with both confirming queries saying the
#: scheduler does not know it, before the provider drops it (one empty squeue is not enough).
CONFIRM_POLLS = 2


@dataclass
class Matches:
    """What one snapshot says of the book.

    ``running``: recorded id -> the job as the snapshot shows it; ``pending``: recorded ids
    still queued; ``renamed``: (recorded id, the id the scheduler shows under the record's
    name); ``missing``: recorded ids found in neither; ``strays``: ids of jobs named with the
    provider's tag that no active record holds; ``named``: recorded ids whose job the snapshot
    shows under the record's name (the id is confirmed).
    """

    running: dict[str, RunningJob] = field(default_factory=dict)
    pending: set[str] = field(default_factory=set)
    renamed: list[tuple[str, str]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    strays: list[str] = field(default_factory=list)
    named: set[str] = field(default_factory=set)


def cancel_retry_in(failures: int) -> float | None:
    """Seconds until the next cancel after ``failures`` failed ones; None: give up."""
    if failures >= CANCEL_ATTEMPTS:
        return None
    return min(CANCEL_BACKOFF_MAX_S, 2.0 ** (failures - 1))


def is_tagged(name: str, tag: str) -> bool:
    """Whether job ``name`` is a block of the provider whose tag is ``tag``."""
    return bool(tag) and name.startswith(tag + "-")


def match_blocks(active: Sequence[JobRecord], snap: Snapshot, tag: str) -> Matches:
    """Match the ``active`` records against ``snap``; see :class:`Matches`."""
    out = Matches()
    running = {j.job_id: j for j in snap.running if j.ours}
    pending = {j.job_id for j in snap.pending if j.ours}
    tagged = {j.name: j.job_id for j in snap.running if is_tagged(j.name, tag)}
    tagged.update({j.name: j.job_id for j in snap.pending if is_tagged(j.name, tag)})
    names = {j.job_id: j.name for j in snap.running}
    names.update({j.job_id: j.name for j in snap.pending})
    held: set[str] = set()
    for rec in active:
        job_id = rec.job_id
        listed = job_id in running or job_id in pending
        if listed and rec.name and names[job_id] not in (rec.name, ""):
            listed = False  # the id is another job's: the submit printed a wrong one
        if not listed:
            shown = tagged.get(rec.name) if rec.name else None
            if shown is None or shown == job_id:
                out.missing.append(job_id)
                continue
            out.renamed.append((job_id, shown))
            job_id = shown
        held.add(job_id)
        if rec.name and names[job_id] == rec.name:
            out.named.add(rec.job_id)
        if job_id in running:
            out.running[rec.job_id] = running[job_id]
        else:
            out.pending.add(rec.job_id)
    out.strays = sorted(set(tagged.values()) - held)
    return out


__all__ = [
    "CANCEL_ATTEMPTS",
    "CANCEL_BACKOFF_MAX_S",
    "CONFIRM_POLLS",
    "Matches",
    "cancel_retry_in",
    "is_tagged",
    "match_blocks",
]
