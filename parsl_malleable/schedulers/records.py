"""What the adapters report about one job, shared by the Slurm and PBS adapters."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

from parsl_malleable.errors import SchedulerCommandError, SnapshotError

T = TypeVar("T")


class JobState(StrEnum):
    """A job's state in one vocabulary for every scheduler (Slurm names, PBS mapped onto them).

    ``UNKNOWN`` means the scheduler no longer knows the job (its record was purged), which is
    not the same as COMPLETED: callers decide what a vanished job means.
    """

    PENDING = "PENDING"
    HELD = "HELD"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    COMPLETING = "COMPLETING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    PREEMPTED = "PREEMPTED"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    UNKNOWN = "UNKNOWN"

    @property
    def finished(self) -> bool:
        """True for states a job never leaves."""
        return self in _FINISHED

    @property
    def holds_nodes(self) -> bool:
        """True for states in which a job has its nodes: running, suspended (its nodes stay
        allocated to it) and completing (its processes are still being ended)."""
        return self in _HOLDS_NODES


_FINISHED = frozenset(
    {
        JobState.COMPLETED,
        JobState.FAILED,
        JobState.CANCELLED,
        JobState.TIMEOUT,
        JobState.NODE_FAIL,
        JobState.PREEMPTED,
        JobState.OUT_OF_MEMORY,
    }
)

_HOLDS_NODES = frozenset({JobState.RUNNING, JobState.SUSPENDED, JobState.COMPLETING})


@dataclass(frozen=True)
class JobStatus:
    """One job as the scheduler sees it now.

    ``start`` is the actual start (running or finished) or the scheduler's expected start
    (pending), None when it has none. ``end_limit`` is the end the time limit allows while the
    job is pending or running (None when unlimited or unknown) and the actual end once it
    finished. ``raw_state`` is the scheduler's own word for the state.
    """

    job_id: str
    state: JobState
    raw_state: str = ""
    reason: str = ""
    nodes: tuple[str, ...] = ()
    start: float | None = None
    end_limit: float | None = None


class OutputParseError(SnapshotError):
    """A scheduler command printed something the parser cannot read; ``field`` names what."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.reason = message
        super().__init__(f"{field}: {message}")


def parse_output(argv: Sequence[str], parser: Callable[[str], T], text: str) -> T:
    """``parser(text)``; output it cannot read becomes a :class:`SchedulerCommandError` naming
    the command, which the provider survives like any other failed query."""
    try:
        return parser(text)
    except OutputParseError as exc:
        raise SchedulerCommandError(list(argv), f"unparseable output: {exc}") from exc
