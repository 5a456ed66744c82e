"""Scheduler adapters (Slurm, PBS Pro): commands, parsers, snapshots.

``SlurmScheduler`` and ``PBSScheduler`` read live scheduler state into a
:class:`~parsl_malleable.windows.snapshot.Snapshot` and submit, test, poll and cancel
whole-node blocks. Every command goes through :func:`~.commands.run_command`, so failures
arrive as :class:`~parsl_malleable.errors.SchedulerCommandError`. See docs/schedulers.md.
"""

from parsl_malleable.schedulers.commands import CommandResult, run_command
from parsl_malleable.schedulers.hostlist import expand_hostlist
from parsl_malleable.schedulers.pbs import PBSScheduler
from parsl_malleable.schedulers.records import JobState, JobStatus, OutputParseError
from parsl_malleable.schedulers.slurm import SlurmScheduler

__all__ = [
    "CommandResult",
    "JobState",
    "JobStatus",
    "OutputParseError",
    "PBSScheduler",
    "SlurmScheduler",
    "expand_hostlist",
    "run_command",
]
