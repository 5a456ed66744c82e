"""Figures that describe a job trace at a glance (used by the ``trace`` command)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from parsl_malleable.traces.schema import JobTrace


@dataclass(frozen=True)
class TraceSummary:
    """Size, time span and offered load of a trace."""

    jobs: int
    first_submit: float  # trace seconds (add machine.start_epoch for Unix time)
    last_submit: float
    last_end: float  # NaN when no job has a known end
    node_hours: float  # sum of nodes * runtime over jobs with known start and end
    offered_load: float  # node_hours / (machine nodes * submit span); NaN for a zero span
    jobs_with_runtime: int


def offered_load(trace: JobTrace) -> float:
    """Node-seconds of work divided by the node-seconds the machine offers while jobs arrive."""
    return summarize(trace).offered_load


def summarize(trace: JobTrace) -> TraceSummary:
    """Compute the :class:`TraceSummary` of ``trace``."""
    jobs = trace.jobs
    if not len(jobs):
        nan = float("nan")
        return TraceSummary(0, nan, nan, nan, 0.0, nan, 0)
    runtime = (jobs["end"] - jobs["start"]).to_numpy()
    known = np.isfinite(runtime)
    work = float(np.sum(jobs["nodes"].to_numpy()[known] * runtime[known]))
    submit = jobs["submit"].to_numpy()
    span = float(submit[-1] - submit[0])
    ends = jobs["end"].to_numpy()
    return TraceSummary(
        jobs=len(jobs),
        first_submit=float(submit[0]),
        last_submit=float(submit[-1]),
        last_end=float(np.nanmax(ends)) if np.isfinite(ends).any() else float("nan"),
        node_hours=work / 3600.0,
        offered_load=work / (trace.machine.nodes * span) if span > 0 else float("nan"),
        jobs_with_runtime=int(known.sum()),
    )
