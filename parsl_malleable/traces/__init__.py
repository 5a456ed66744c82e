"""Trace readers: SWF, Cobalt, Slurm sacct, PBS Pro accounting and idle-interval files.

All of them return the schema documented in :mod:`parsl_malleable.traces.schema`. The names
below are imported on first use, so that a light submodule (``traces.command`` for
``parsl-malleable trace --help``) does not load pandas.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from parsl_malleable._lazy import lazy_exports

if TYPE_CHECKING:
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

_LAZY = {
    "read_cobalt": "parsl_malleable.traces.cobalt",
    "read_idle_intervals": "parsl_malleable.traces.idle",
    "read_pbs_accounting": "parsl_malleable.traces.pbs",
    "detect_format": "parsl_malleable.traces.read",
    "read_trace": "parsl_malleable.traces.read",
    "IDLE_COLUMNS": "parsl_malleable.traces.schema",
    "JOB_COLUMNS": "parsl_malleable.traces.schema",
    "JobTrace": "parsl_malleable.traces.schema",
    "MachineInfo": "parsl_malleable.traces.schema",
    "ReadReport": "parsl_malleable.traces.schema",
    "read_sacct": "parsl_malleable.traces.slurm",
    "TraceSummary": "parsl_malleable.traces.summary",
    "offered_load": "parsl_malleable.traces.summary",
    "summarize": "parsl_malleable.traces.summary",
    "read_swf": "parsl_malleable.traces.swf",
    "write_swf": "parsl_malleable.traces.swf_writer",
    "synthetic_trace": "parsl_malleable.traces.synthetic",
}

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

__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
