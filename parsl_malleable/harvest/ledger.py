"""The provider's book of Parsl blocks (slots) and the scheduler jobs that fill them.

A *slot* is one Parsl block: what :meth:`BackfillProvider.submit` returns and Parsl polls. The
provider fills a slot with a scheduler *job* (a block of k nodes) when a window opens, and with
the next job when that one ends, so Parsl's block count stays constant while harvested nodes
come and go. The ledger is plain data; the provider holds its lock while changing it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from parsl.jobs.states import JobState as ParslState

from parsl_malleable.harvest.states import CancelReason


class Phase(StrEnum):
    """Where one scheduler job of ours is."""

    PENDING = "pending"  # submitted, not running yet
    RUNNING = "running"
    YIELDING = "yielding"  # ranks asked to leave; cancelled at ``cancel_at``
    ENDED = "ended"


@dataclass
class JobRecord:
    """One scheduler job submitted for a slot."""

    job_id: str
    slot_id: str
    block_id: str
    nodes_requested: int
    walltime_s: float
    planned_nodes: tuple[str, ...]
    window_end: float
    submitted_at: float
    phase: Phase = Phase.PENDING
    nodes: tuple[str, ...] = ()
    start: float | None = None
    deadline: float | None = None
    cancel_reason: CancelReason | None = None
    cancel_at: float | None = None
    yield_poll: int | None = None  # the poll that decided to yield
    cancel_poll: int | None = None  # polls done when the cancel was sent
    yield_reason: str = ""  # why it yields, in the words of the log
    cancel_sent_at: float | None = None
    end_state: ParslState | None = None
    message: str = ""
    ended_at: float | None = None
    name: str = ""  # the job's name: unique, so a lost or wrong id can be found again
    # False while ``job_id`` is a printed id no lookup by ``name`` has confirmed: it may be
    # another job's, so nothing is sent to it (see harvest/submission.py).
    checked: bool = True
    missing_polls: int = 0  # consecutive snapshots that did not list it
    cancel_attempts: int = 0  # failed cancels so far (they back off, then give up)
    cancel_given_up: bool = False
    seen_running_at: float | None = None  # the first snapshot that showed it running
    # The start the scheduler reported for a job no poll saw running (it started and ended
    # between two): its start-up phases only; ``start`` stays None (never seen running).
    start_reported: float | None = None
    # When its walltime runs out by the provider's count: the start the scheduler reports
    # (else ``seen_running_at``) plus ``walltime_s``; harvest/walltime.py ends it soon after.
    walltime_end: float | None = None
    # The last poll's plan for its nodes (harvest/yield_step.py): when the queue, without our
    # blocks, first used one (inf: never), at which poll and snapshot time. A block a native
    # takes anyway is judged against it: a missed yield, or one no poll could foresee.
    planned_use: float | None = None
    planned_poll: int | None = None
    planned_at: float | None = None

    @property
    def active(self) -> bool:
        """True while the job may still hold or get nodes."""
        return self.phase is not Phase.ENDED


@dataclass
class Slot:
    """One Parsl block. ``command`` is Parsl's worker command, rerun in every job of the slot."""

    slot_id: str
    block_id: str
    command: str
    job_name: str
    created: float
    job: JobRecord | None = None
    jobs: list[str] = field(default_factory=list)
    closed: bool = False
    final: ParslState | None = None
    final_message: str = ""

    @property
    def waiting(self) -> bool:
        """True when the slot is open and has no job: it wants nodes."""
        return not self.closed and self.final is None and (self.job is None or not self.job.active)


@dataclass(frozen=True)
class BlockInfo:
    """What the controller needs to know about one live block.

    ``block_id`` is Parsl's block id (the ``PARSL_WORKER_BLOCK_ID`` its workers see), ``job_id``
    the scheduler's, ``deadline`` the Unix time its walltime ends (None while pending);
    ``id_checked`` is False while ``job_id`` is a printed id no lookup has confirmed (it may be
    another job's: nothing may cancel it).
    """

    block_id: str
    job_id: str
    slot_id: str
    nodes: tuple[str, ...]
    start: float | None
    deadline: float | None
    phase: Phase
    submitted_at: float | None = None
    id_checked: bool = True

    @classmethod
    def of(cls, job: JobRecord) -> BlockInfo:
        """The controller's view of ``job``."""
        return cls(
            block_id=job.block_id,
            job_id=job.job_id,
            slot_id=job.slot_id,
            nodes=job.nodes or job.planned_nodes,
            start=job.start,
            deadline=job.deadline,
            phase=job.phase,
            submitted_at=job.submitted_at,
            id_checked=job.checked,
        )


@dataclass
class PollReport:
    """What one poll did (for logs, tests and the overhead benchmark)."""

    started: float
    error: str = ""
    ended: list[str] = field(default_factory=list)
    yielded: list[str] = field(default_factory=list)
    overdue: list[str] = field(default_factory=list)  # cancelled: running past the walltime
    submitted: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    queries: int = 0


__all__ = ["BlockInfo", "JobRecord", "Phase", "PollReport", "Slot"]
