"""Trace readers: SWF, Cobalt, Slurm sacct, PBS Pro accounting and idle-interval files.

All of them return the schema documented in :mod:`parsl_malleable.traces.schema`.
"""

from parsl_malleable.traces.cobalt import read_cobalt
from parsl_malleable.traces.idle import read_idle_intervals
from parsl_malleable.traces.pbs import read_pbs_accounting
from parsl_malleable.traces.read import detect_format, read_trace
from parsl_malleable.traces.schema import (
    IDLE_COLUMNS,
    JOB_COLUMNS,
    JobTrace,
    MachineInfo,
    ReadReport,
)
from parsl_malleable.traces.slurm import read_sacct
from parsl_malleable.traces.summary import TraceSummary, offered_load, summarize
from parsl_malleable.traces.swf import read_swf
from parsl_malleable.traces.swf_writer import write_swf
from parsl_malleable.traces.synthetic import synthetic_trace

__all__ = [
    "IDLE_COLUMNS",
    "JOB_COLUMNS",
    "JobTrace",
    "MachineInfo",
    "ReadReport",
    "TraceSummary",
    "detect_format",
    "offered_load",
    "read_cobalt",
    "read_idle_intervals",
    "read_pbs_accounting",
    "read_sacct",
    "read_swf",
    "read_trace",
    "summarize",
    "synthetic_trace",
    "write_swf",
]
