"""What every batch system offers the provider: :class:`BlockScheduler`.

It is the interface :class:`~parsl_malleable.provider.BackfillProvider` talks to: snapshot,
start test, submit, status, cancel and a signal to the batch shell, for whole-node blocks.
The schedulers driven by commands (Slurm, PBS) share their flow in
:class:`~parsl_malleable.schedulers.command_scheduler.CommandScheduler`; the emulated site
implements this interface directly (it runs no commands). Each is built from a site profile
by its ``from_profile``, so the provider never asks which one it has.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Protocol, Self

from parsl_malleable.schedulers.records import JobStatus
from parsl_malleable.snapshot import Snapshot

OURS_PREFIX = "pm-block"
Script = str | os.PathLike[str] | Sequence[str]


class SiteDestination(Protocol):
    """The settings of a site profile a scheduler is built from (structural, so this layer
    does not import :class:`~parsl_malleable.harvest.site_profile.SiteProfile`)."""

    # Read-only properties: a frozen pydantic profile has no settable attributes.
    @property
    def name(self) -> str: ...
    @property
    def partition(self) -> str | None: ...
    @property
    def qos(self) -> str | None: ...
    @property
    def queue(self) -> str | None: ...
    @property
    def account(self) -> str | None: ...
    @property
    def pin_nodes(self) -> bool: ...
    @property
    def signal_margin_s(self) -> float: ...
    @property
    def reservations(self) -> bool: ...
    @property
    def command_timeout_s(self) -> float: ...
    @property
    def command_retries(self) -> int: ...
    @property
    def submit_options(self) -> Sequence[str]: ...
    @property
    def emulated(self) -> Any: ...


class BlockScheduler(ABC):
    """Snapshot, start test, submit, status, cancel and signal for whole-node blocks.

    ``queries`` counts what each call cost the scheduler (for a command scheduler: the
    commands really run, retries included), so the overhead per poll can be reported.
    """

    queries: Counter[str]
    #: Whether the scheduler itself signals a block's batch shell before its walltime
    #: (Slurm's ``--signal=B:USR1@margin``); when not (PBS), the block watches its own clock.
    signals_before_walltime: ClassVar[bool] = True
    #: Whether :meth:`submit` reads the job id from a command's output, which can be cut off,
    #: garbled or another job's: the provider then checks every id against the block's unique
    #: name (:meth:`jobs_named`) before it tracks it. An in-process site returns its own ids.
    submit_ids_printed: ClassVar[bool] = False

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

    def cancel_hint(self, job_ids: Sequence[str]) -> list[str]:
        """The command a person would run to end these jobs (for messages; never run)."""
        return ["cancel", *job_ids]

    def jobs_named(self, name: str) -> list[str]:
        """Ids of the jobs named ``name`` that have not ended: how the provider finds a block
        whose submit failed, timed out or printed no id it could read. The default reads a
        snapshot; a command scheduler asks one small query."""
        snap = self.snapshot()
        named = [j.job_id for j in snap.running if j.name == name]
        return named + [j.job_id for j in snap.pending if j.name == name]

    def confirm_gone(self, job_ids: Sequence[str]) -> dict[str, JobStatus]:
        """State of jobs that the snapshot and :meth:`status` no longer show, asked another
        way where the scheduler has one (Slurm: ``scontrol``), so that one command answering
        nothing cannot make a running block look gone. Default: :meth:`status` again."""
        return self.status(job_ids)

    def preempted(self, job_ids: Sequence[str]) -> set[str]:
        """Which of these ended jobs the scheduler preempted (default: it cannot say)."""
        return set()

    def queue_signature(self) -> frozenset[tuple[str, str]] | None:
        """Native jobs pending or running now as (id, PD|R), from one small query, so the
        provider sees an arrival or an end between polls; None: no such query."""
        return None


__all__ = ["OURS_PREFIX", "BlockScheduler", "Script", "SiteDestination"]
