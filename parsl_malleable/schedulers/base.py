"""What every batch system offers the provider, and the flow the command-line ones share.

:class:`BlockScheduler` is the interface :class:`~parsl_malleable.provider.BackfillProvider`
talks to: snapshot, start test, submit, status, cancel and a signal to the batch shell, for
whole-node blocks. :class:`CommandScheduler` holds the common flow of the schedulers driven
by commands (run and count each command, name our blocks, read statuses, cancel jobs that may
be gone already); ``slurm.py`` and ``pbs.py`` state only what differs: their commands, their
output parsers and the error words that mean "already gone". The emulated site implements
:class:`BlockScheduler` directly (it runs no commands). Each is built from a site profile by
its ``from_profile``, so the provider never asks which one it has.
"""

from __future__ import annotations

import os
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Protocol, Self

from parsl_malleable.errors import SchedulerCommandError
from parsl_malleable.schedulers.commands import CommandResult, describe_failure, run_command
from parsl_malleable.schedulers.records import JobState, JobStatus
from parsl_malleable.windows.snapshot import Snapshot

OURS_PREFIX = "pm-block"
Script = str | os.PathLike[str] | Sequence[str]


class SiteDestination(Protocol):
    """The settings of a site profile a scheduler is built from (structural, so this layer
    does not import :class:`~parsl_malleable.harvest.profile.SiteProfile`)."""

    name: str
    partition: str | None
    qos: str | None
    queue: str | None
    account: str | None
    pin_nodes: bool
    signal_margin_s: float
    reservations: bool
    command_timeout_s: float
    command_retries: int
    emulated: Any


class BlockScheduler(ABC):
    """Snapshot, start test, submit, status, cancel and signal for whole-node blocks.

    ``queries`` counts what each call cost the scheduler (for a command scheduler: the
    commands really run, retries included), so the overhead per poll can be reported.
    """

    queries: Counter[str]
    #: Whether the scheduler itself signals a block's batch shell before its walltime
    #: (Slurm's ``--signal=B:USR1@margin``); when not (PBS), the block watches its own clock.
    signals_before_walltime: ClassVar[bool] = True

    @classmethod
    @abstractmethod
    def from_profile(cls, profile: SiteDestination, env: Mapping[str, str] | None = None) -> Self:
        """The scheduler of a site profile; ``env`` is added to every command or block."""

    @abstractmethod
    def snapshot(self) -> Snapshot:
        """Nodes, running and pending jobs (and reservations) now."""

    def test_start(
        self, nodes: int, walltime_s: float, node_ids: Sequence[str] = ()
    ) -> float | None:
        """When a block would start, or None when the scheduler cannot say (the default);
        raises :class:`~parsl_malleable.errors.StartRefused` with the scheduler's words when
        it refuses the block outright."""
        return None

    @abstractmethod
    def submit(
        self,
        script: Script,
        *,
        nodes: int,
        walltime_s: float,
        node_ids: Sequence[str] = (),
        name: str | None = None,
    ) -> str:
        """Submit a block running ``script``; its job id."""

    @abstractmethod
    def status(self, job_ids: Sequence[str]) -> dict[str, JobStatus]:
        """State of each job; an id the scheduler does not know is UNKNOWN."""

    @abstractmethod
    def cancel(self, job_ids: Sequence[str]) -> None:
        """End the jobs; a job that ended already is not an error."""

    @abstractmethod
    def signal_batch(self, job_ids: Sequence[str], signal: str) -> None:
        """Send ``signal`` (``"USR1"``) to the batch shell of each job (not to its steps)."""

    def preempted(self, job_ids: Sequence[str]) -> set[str]:
        """Which of these ended jobs the scheduler preempted (default: it cannot say)."""
        return set()

    def queue_signature(self) -> frozenset[tuple[str, str]] | None:
        """Native jobs pending or running now as (id, PD|R), from one small query, so the
        provider sees an arrival or an end between polls; None: no such query."""
        return None


class CommandScheduler(BlockScheduler):
    """The flow shared by the schedulers driven by commands (Slurm, PBS).

    A subclass states its commands (:meth:`status_argv`, :meth:`cancel_argv`,
    :meth:`signal_argv`), its parsers (:meth:`read_statuses`) and :attr:`GONE`, the error
    words meaning a job has ended already. Every command goes through :meth:`run`, which
    counts it in :attr:`queries`. Jobs whose name starts with ``ours_prefix`` are ``ours``.
    """

    #: stderr words (lower case) saying a job is finished or unknown: not an error to cancel.
    GONE: ClassVar[tuple[str, ...]] = ()
    #: stderr words (lower case) saying a status request named an id the scheduler forgot.
    UNKNOWN_JOB: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        *,
        ours_prefix: str = OURS_PREFIX,
        reservations: bool = True,
        backfill: str = "conservative",
        account: str | None = None,
        timeout_s: float = 30.0,
        retries: int = 2,
        backoff_s: float = 0.5,
        env: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.ours_prefix = ours_prefix
        self.reservations = reservations
        self.backfill = backfill
        self.account = account
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.env = dict(env or {})
        self.clock = clock
        self.queries: Counter[str] = Counter()

    def run(self, argv: list[str], check: bool = True, label: str | None = None) -> CommandResult:
        """Run one command of this scheduler, counted in :attr:`queries` under ``label``."""
        return run_command(
            argv,
            timeout_s=self.timeout_s,
            retries=self.retries,
            backoff_s=self.backoff_s,
            env=self.env,
            check=check,
            counter=self.queries,
            label=label,
        )

    def block_name(self, job_name: str | None) -> str:
        """``job_name`` with :attr:`ours_prefix` in front (the prefix alone when None)."""
        name = job_name or self.ours_prefix
        if self.ours_prefix and not name.startswith(self.ours_prefix):
            name = f"{self.ours_prefix}-{name}"
        return name

    # ------------------------------------------------------------------ what differs

    @abstractmethod
    def status_argv(self, job_ids: list[str]) -> list[str]:
        """The command that prints the state of these jobs."""

    @abstractmethod
    def read_statuses(self, argv: list[str], stdout: str) -> list[JobStatus]:
        """The statuses in the output of :meth:`status_argv`."""

    @abstractmethod
    def cancel_argv(self, job_ids: list[str]) -> list[str]:
        """The command that ends these jobs."""

    @abstractmethod
    def signal_argv(self, job_ids: list[str], signal: str) -> list[str]:
        """The command that signals the batch shell of these jobs."""

    def short_id(self, job_id: str) -> str:
        """The part of an id the scheduler may print alone (PBS: the number)."""
        return job_id

    # ------------------------------------------------------------------ the common flow

    def status(self, job_ids: Sequence[str]) -> dict[str, JobStatus]:
        """State of each job; a job the scheduler has forgotten is UNKNOWN."""
        ids = [str(j) for j in job_ids]
        if not ids:
            return {}
        argv = self.status_argv(ids)
        result = self.run(argv, check=False)
        if result.returncode != 0 and not _every_line_says(result.stderr, self.UNKNOWN_JOB):
            raise SchedulerCommandError(argv, describe_failure(result.returncode, result.stderr))
        found = {}
        if result.stdout.strip():
            found = {s.job_id: s for s in self.read_statuses(argv, result.stdout)}
        by_short = {self.short_id(j): s for j, s in found.items()}
        return {
            j: found.get(j) or by_short.get(self.short_id(j)) or JobStatus(j, JobState.UNKNOWN)
            for j in ids
        }

    def cancel(self, job_ids: Sequence[str]) -> None:
        """End the jobs; cancelling a job that already ended is not an error."""
        ids = [str(j) for j in job_ids]
        if ids:
            self._run_tolerating_gone(self.cancel_argv(ids))

    def signal_batch(self, job_ids: Sequence[str], signal: str) -> None:
        """Send ``signal`` to the batch shell of each job; a job gone already is fine."""
        ids = [str(j) for j in job_ids]
        if ids:
            self._run_tolerating_gone(self.signal_argv(ids, signal))

    def _run_tolerating_gone(self, argv: list[str]) -> None:
        result = self.run(argv, check=False)
        if result.returncode != 0 and not _every_line_says(result.stderr, self.GONE):
            raise SchedulerCommandError(argv, describe_failure(result.returncode, result.stderr))


def output_beside(script: Script, pattern: str, name: str) -> str | None:
    """The block's output file next to its script (``pattern`` formatted with ``name``), or
    None when ``script`` is an argument vector (the scheduler's default then)."""
    if isinstance(script, str | os.PathLike):
        return str(Path(script).parent / pattern.format(name=name))
    return None


def _every_line_says(stderr: str, words: tuple[str, ...]) -> bool:
    """True when stderr has lines and each contains one of ``words``."""
    lines = [ln.lower() for ln in stderr.splitlines() if ln.strip()]
    return bool(lines) and all(any(w in ln for w in words) for ln in lines)


__all__ = [
    "OURS_PREFIX",
    "BlockScheduler",
    "CommandScheduler",
    "Script",
    "SiteDestination",
    "output_beside",
]
