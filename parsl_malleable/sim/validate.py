"""Compare simulated waits with the waits a real trace recorded."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from parsl_malleable.sim.trace_replay import SimResult
from parsl_malleable.traces.schema import JobTrace


@dataclass(frozen=True)
class WaitAgreement:
    """Recorded vs simulated waits (seconds) of the jobs that have both.

    ``pearson`` correlates the waits, ``spearman`` their ranks (robust to the heavy tail).
    """

    jobs: int
    recorded_mean: float
    simulated_mean: float
    recorded_median: float
    simulated_median: float
    pearson: float
    spearman: float

    def as_dict(self) -> dict:
        """Plain-python copy."""
        return asdict(self)


def wait_agreement(trace: JobTrace, result: SimResult) -> WaitAgreement:
    """Agreement of ``result`` (a simulation of ``trace``) with the trace's recorded waits."""
    recorded = (trace.jobs["start"] - trace.jobs["submit"]).to_numpy(dtype=np.float64)
    simulated = result.jobs["sim_wait"].to_numpy(dtype=np.float64)
    both = np.isfinite(recorded) & np.isfinite(simulated) & (recorded >= 0)
    rec, sim = recorded[both], simulated[both]
    if len(rec) < 2:
        nan = float("nan")
        return WaitAgreement(len(rec), nan, nan, nan, nan, nan, nan)
    return WaitAgreement(
        jobs=len(rec),
        recorded_mean=float(rec.mean()),
        simulated_mean=float(sim.mean()),
        recorded_median=float(np.median(rec)),
        simulated_median=float(np.median(sim)),
        pearson=_corr(rec, sim),
        spearman=_corr(_ranks(rec), _ranks(sim)),
    )


def _ranks(x: np.ndarray) -> np.ndarray:
    """Average ranks (ties share their mean rank)."""
    order = np.argsort(x, kind="stable")
    xs = x[order]
    first = np.r_[True, xs[1:] != xs[:-1]]
    group = np.cumsum(first) - 1
    starts = np.flatnonzero(first)
    ends = np.r_[starts[1:], len(xs)]
    mean_rank = (starts + ends - 1) / 2.0
    ranks = np.empty(len(x))
    ranks[order] = mean_rank[group]
    return ranks


def _corr(a: np.ndarray, b: np.ndarray) -> float:
    if a.std() == 0 or b.std() == 0:
        return float("nan")
    return float(np.corrcoef(a, b)[0, 1])
