"""Jobs that have not been submitted yet: sampled from the site's own recent history.

The queue explains only part of a hole's future. On a machine that is not saturated most idle
nodes have no pending job waiting for them; they are taken by jobs submitted later. The
planner cannot know those jobs, but it can replay plausible ones: a draw takes the jobs that
were submitted in a past window as long as the horizon, a whole number of days back (so the
daily cycle lines up), and shifts them to now. Their recorded runtimes and limits come with
them; the simulator then decides which idle nodes they would take (lowest ids first).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

DAY = 86400.0


@dataclass(frozen=True)
class Arrivals:
    """Future jobs of one draw, sorted by submit time."""

    submit: np.ndarray
    nodes: np.ndarray
    walltime: np.ndarray
    runtime: np.ndarray

    def __len__(self) -> int:
        return len(self.submit)

    @classmethod
    def none(cls) -> Arrivals:
        """No future jobs."""
        empty = np.empty(0)
        return cls(empty, np.empty(0, dtype=np.int64), empty, empty)


@dataclass
class ArrivalModel:
    """Past submissions to resample, known up to ``fitted_at``.

    ``period``: shifts are whole multiples of it (a day keeps the daily cycle); ``lookback``:
    the largest multiple used.
    """

    submit: np.ndarray
    nodes: np.ndarray
    walltime: np.ndarray
    runtime: np.ndarray
    fitted_at: float
    period: float = DAY
    lookback: int = 7

    @classmethod
    def fit(
        cls,
        jobs: pd.DataFrame,
        now: float,
        *,
        period: float = DAY,
        lookback: int = 7,
    ) -> ArrivalModel:
        """Learn from the jobs submitted before ``now`` (trace schema: ``submit``, ``start``,
        ``end``, ``walltime``, ``nodes``). A job still running at ``now`` is assumed to run to
        its limit; a job without a limit plans with its runtime (the simulator's rule)."""
        submit = jobs["submit"].to_numpy(dtype=float)
        keep = np.isfinite(submit) & (submit < now) & (submit >= now - (lookback + 1) * period)
        start = jobs["start"].to_numpy(dtype=float)[keep]
        end = jobs["end"].to_numpy(dtype=float)[keep]
        walltime = jobs["walltime"].to_numpy(dtype=float)[keep]
        nodes = jobs["nodes"].to_numpy(dtype=np.int64)[keep]
        runtime = np.where(np.isfinite(end) & (end <= now), end - start, walltime)
        has_limit = np.isfinite(walltime) & (walltime > 0)
        walltime = np.where(has_limit, walltime, runtime)
        ok = np.isfinite(runtime) & (runtime >= 0) & np.isfinite(walltime) & (nodes > 0)
        submit = submit[keep][ok]
        order = np.argsort(submit, kind="stable")
        return cls(
            submit=submit[order],
            nodes=nodes[ok][order],
            walltime=walltime[ok][order],
            runtime=np.minimum(runtime[ok], walltime[ok])[order],
            fitted_at=float(now),
            period=period,
            lookback=lookback,
        )

    def shifts(self, now: float, horizon: float) -> np.ndarray:
        """The day shifts whose whole window ``[now - shift, now - shift + horizon)`` lies in
        the known history."""
        if not len(self.submit):
            return np.empty(0)
        lo = max(1, math.ceil((now - self.fitted_at + horizon) / self.period))
        shifts = np.arange(lo, self.lookback + 1) * self.period
        return shifts[now - shifts >= self.submit[0]]

    def sample(self, now: float, horizon: float, rng: np.random.Generator) -> Arrivals:
        """One draw of the jobs submitted in ``(now, now + horizon)``."""
        shifts = self.shifts(now, horizon)
        if not len(shifts):
            return Arrivals.none()
        shift = float(shifts[rng.integers(len(shifts))])
        lo = np.searchsorted(self.submit, now - shift, side="right")
        hi = np.searchsorted(self.submit, now - shift + horizon, side="left")
        return Arrivals(
            submit=self.submit[lo:hi] + shift,
            nodes=self.nodes[lo:hi],
            walltime=self.walltime[lo:hi],
            runtime=self.runtime[lo:hi],
        )
