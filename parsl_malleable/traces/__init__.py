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
from parsl_malleable.traces.swf import read_swf

__all__ = ["IDLE_COLUMNS", "JOB_COLUMNS", "JobTrace", "MachineInfo", "ReadReport", "read_swf"]
