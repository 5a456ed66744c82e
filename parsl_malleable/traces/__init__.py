"""Trace readers: SWF, Cobalt, Slurm sacct, PBS Pro accounting and idle-interval files.

All of them return the schema documented in :mod:`parsl_malleable.traces.schema`.
"""

from parsl_malleable.traces.schema import (
    IDLE_COLUMNS,
    JOB_COLUMNS,
    JobTrace,
    MachineInfo,
    ReadReport,
)

__all__ = ["IDLE_COLUMNS", "JOB_COLUMNS", "JobTrace", "MachineInfo", "ReadReport"]
