"""Schedulers (Slurm, PBS Pro, the emulated site): commands, parsers, snapshots, blocks.

Each is a :class:`~.base.BlockScheduler`: it reads the site into a
:class:`~parsl_malleable.snapshot.Snapshot` and tests, submits, polls, signals and
cancels whole-node blocks. ``SlurmScheduler`` and ``PBSScheduler`` share their flow in
:class:`~.command_scheduler.CommandScheduler` and state only what differs; every command
goes through :func:`~.commands.run_command`, so failures arrive as
:class:`~parsl_malleable.errors.SchedulerCommandError`. See docs/schedulers.md.
"""

from parsl_malleable.schedulers.base import BlockScheduler
from parsl_malleable.schedulers.command_scheduler import CommandScheduler
from parsl_malleable.schedulers.commands import CommandResult, run_command
from parsl_malleable.schedulers.hostlist import expand_hostlist
from parsl_malleable.schedulers.pbs import PBSScheduler
from parsl_malleable.schedulers.records import JobState, JobStatus, OutputParseError
from parsl_malleable.schedulers.slurm import SlurmScheduler

__all__ = [
    "BlockScheduler",
    "CommandResult",
    "CommandScheduler",
    "EmulatedSite",
    "JobState",
    "JobStatus",
    "OutputParseError",
    "PBSScheduler",
    "SlurmScheduler",
    "expand_hostlist",
    "run_command",
]


def __getattr__(name: str) -> object:
    # The emulated site pulls in the simulator (numba): import it only when asked for.
    if name == "EmulatedSite":
        from parsl_malleable.schedulers.emulated import EmulatedSite

        return EmulatedSite
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
