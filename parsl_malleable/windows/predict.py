"""``predict(snapshot, quantile)``: idle windows for the provider, with the early-end correction.

Each idle node's window is a distribution. One draw: sample every running job's end from the
learned runtime/limit ratios (conditioned on the time it has already run) and every pending
job's runtime, and play the schedule forward with
:func:`~parsl_malleable.windows.first_use.first_use` (plans still use the limits, as the real
scheduler does). The window of quantile ``q`` is the
``q`` quantile of the node's draws: with ``q = 0.1`` the node stays idle at least that long
with about 90% probability. Without a model (or with ``samples=0``) the prediction is the naive
one: everything ends at its limit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from parsl_malleable.snapshot import Snapshot
from parsl_malleable.windows.accounting import BlockCosts
from parsl_malleable.windows.arrivals import ArrivalModel
from parsl_malleable.windows.calibrate import WindowCalibration
from parsl_malleable.windows.choose import expected_lengths
from parsl_malleable.windows.first_use import (
    PlanInput,
    first_use,
    first_use_and_starts,
    plan_input,
)
from parsl_malleable.windows.runtime_model import RuntimeRatioModel
from parsl_malleable.windows.validate import CheckedSnapshot, check_snapshot
from parsl_malleable.windows.window import Window, group_windows

DEFAULT_HORIZON = 7 * 86400.0


@dataclass
class NodeWindows:
    """Per idle node: the naive window and the sampled windows (seconds from ``now``).

    ``names`` excludes nodes that a pending job takes now (they are not holes). ``samples`` has
    shape ``(draws, len(names))``; with no draws it has zero rows and :meth:`length` falls back
    to ``naive``. Lengths are capped at ``horizon``. ``calibration``: when set (the predictor's
    :class:`~parsl_malleable.windows.calibrate.WindowCalibration`), :meth:`length` returns the
    recalibrated quantile; :meth:`draws_length` is always the draws' own.
    """

    now: float
    names: list[str]
    naive: np.ndarray
    samples: np.ndarray
    horizon: float
    checked: CheckedSnapshot
    calibration: WindowCalibration | None = None

    def draws_length(self, quantile: float) -> np.ndarray:
        """Per node, the ``quantile`` of its sampled window lengths, at most the naive window
        (the naive window without draws)."""
        if not 0.0 <= quantile <= 1.0:
            raise ValueError(f"quantile must be in [0, 1], got {quantile}")
        if self.samples.shape[0] == 0:
            return self.naive.copy()
        # never promise a node past the scheduler's current plan for it
        return np.minimum(np.quantile(self.samples, quantile, axis=0, method="lower"), self.naive)

    def calibration_groups(self, quantile: float) -> np.ndarray:
        """Per node, its calibration group (node-state class x horizon bucket of the draws'
        ``quantile``); needs :attr:`calibration`."""
        if self.calibration is None:
            raise ValueError("these windows have no calibration")
        return self.calibration.groups(self.draws_length(quantile), self.naive, self.horizon)

    def length(self, quantile: float) -> np.ndarray:
        """Per node, the ``quantile`` of its window length, at most the naive window:
        recalibrated online when the predictor has a calibration (and draws), else the draws'
        own quantile."""
        base = self.draws_length(quantile)
        if self.calibration is None or self.samples.shape[0] == 0:
            return base
        groups = self.calibration.groups(base, self.naive, self.horizon)
        return self.calibration.adjust(quantile, base, groups, self.naive, self.now)

    def record_outcome(
        self, quantile: float, actual: np.ndarray, complete: np.ndarray | bool = True
    ) -> None:
        """Tell the calibration how long each node actually stayed idle after :attr:`now`
        (``complete`` False where it was still idle when last seen: at least ``actual``).
        The calibration uses each outcome only from ``now + actual`` on, so this may be called
        at any time, e.g. right after the prediction in a replay."""
        if self.calibration is None:
            raise ValueError("these windows have no calibration")
        base = self.draws_length(quantile)
        groups = self.calibration.groups(base, self.naive, self.horizon)
        actual = np.minimum(np.asarray(actual, dtype=float), self.horizon)
        # a window that reached the horizon is only known to be at least that long
        complete = np.asarray(complete, dtype=bool) & (actual < self.horizon)
        predicted = self.calibration.adjust(quantile, base, groups, self.naive, self.now)
        self.calibration.record(quantile, self.now, base, groups, actual, complete, predicted)

    def expected(self, costs: BlockCosts | None = None) -> np.ndarray:
        """Per node, the block length with the largest expected net harvest under ``costs``
        (:func:`~parsl_malleable.windows.choose.expected_lengths`; 0 where no block pays off),
        at most the naive window. Without draws: the naive window."""
        return expected_lengths(self.samples, self.naive, costs or BlockCosts())

    def choose(self, quantile: float | None, costs: BlockCosts | None = None) -> np.ndarray:
        """:meth:`length` of ``quantile``, or :meth:`expected` when ``quantile`` is None."""
        return self.expected(costs) if quantile is None else self.length(quantile)


@dataclass
class WindowPredictor:
    """Predicts idle windows from snapshots with a learned early-end model.

    ``model``: runtime/limit ratios (:meth:`RuntimeRatioModel.fit` on the site's job history);
    ``arrivals``: recent submissions to resample as future jobs (:meth:`ArrivalModel.fit`);
    ``samples``: Monte-Carlo draws per prediction; ``horizon``: longest window reported
    (nodes that no known job needs get it); ``seed``: draws are reproducible per snapshot time.
    """

    model: RuntimeRatioModel | None = None
    arrivals: ArrivalModel | None = None
    samples: int = 16
    horizon: float = DEFAULT_HORIZON
    seed: int = 0
    max_pending: int | None = None
    draw_depth: float | None = 3.0
    calibration: WindowCalibration | None = None

    @classmethod
    def from_history(
        cls, jobs: pd.DataFrame, now: float, *, arrivals: bool = True, **options: Any
    ) -> WindowPredictor:
        """A predictor learned from the site's past jobs (trace schema: ``submit``, ``start``,
        ``end``, ``walltime``, ``nodes``, ``queue``, ``user``) as known at ``now``: the
        early-end model from the jobs that had ended, the arrival model from the submissions.
        ``options`` go to the constructor (``samples``, ``horizon``, ...)."""
        ended = jobs[jobs["end"].to_numpy(dtype=float) <= now]
        return cls(
            model=RuntimeRatioModel.fit(ended),
            arrivals=ArrivalModel.fit(jobs, now) if arrivals else None,
            **options,
        )

    def node_windows(self, snapshot: Snapshot) -> NodeWindows:
        """The per-node windows of every idle node that is a hole."""
        checked = check_snapshot(snapshot)
        if self.max_pending is not None and len(checked.pending) > self.max_pending:
            # jobs that deep in the queue rarely start within the horizon; planning them
            # costs time on every draw
            checked.notes.append(f"planned only the first {self.max_pending} pending jobs")
            checked.pending = checked.pending[: self.max_pending]
            checked.pending_limits = checked.pending_limits[: self.max_pending]
        plan = plan_input(checked)
        now = plan.now
        naive_end, starts = first_use_and_starts(plan, plan.naive_run())
        hole = naive_end > now
        if self.draw_depth is not None:
            # the draws replay the queue to its end; jobs the limit-based plan starts many
            # horizons away almost never reach a hole, and cost most of the replay
            deep = starts[plan.n_pre :] >= now + self.draw_depth * self.horizon
            if deep.any():
                checked.notes.append(f"{int(deep.sum())} pending job(s) beyond the draw depth")
                plan = plan.keep_pending(~deep)
        naive = np.minimum(naive_end[hole] - now, self.horizon)
        names = [n for n, h in zip(plan.idle_names, hole, strict=True) if h]
        corrected = (self.model is not None and self.model.fitted) or self.arrivals is not None
        draws = self.samples if corrected else 0
        sampled = np.empty((draws, len(names)))
        if draws and len(names):
            rng = np.random.default_rng([self.seed, int(now) & 0xFFFFFFFF])
            runs = self._draw_runs(plan, draws, rng)
            for d in range(draws):
                future = self.arrivals.sample(now, self.horizon, rng) if self.arrivals else None
                used = first_use(plan, runs[d], future)[hole]
                sampled[d] = np.minimum(used - now, self.horizon)
        return NodeWindows(now, names, naive, sampled, self.horizon, checked, self.calibration)

    def _draw_runs(self, plan: PlanInput, draws: int, rng: np.random.Generator) -> np.ndarray:
        if self.model is None:
            return np.repeat(plan.naive_run()[None, :], draws, axis=0)
        ends = self.model.sample_ends(
            plan.running_keys, plan.running_starts, plan.running_limits, plan.now, draws, rng
        )
        runtimes = self.model.sample_runtimes(plan.pending_keys, plan.pending_limits, draws, rng)
        pre = np.maximum(ends - plan.now, 0.0)
        return np.concatenate([pre, runtimes], axis=1)

    def predict(
        self,
        snapshot: Snapshot,
        quantile: float | None = 0.1,
        *,
        costs: BlockCosts | None = None,
        min_length: float = 0.0,
        rel_tol: float = 0.1,
        abs_tol: float = 300.0,
    ) -> list[Window]:
        """Windows of the idle nodes, grouped into blocks (see :func:`predict`)."""
        nw = self.node_windows(snapshot)
        lengths = nw.choose(quantile, costs)
        samples = nw.samples if nw.samples.shape[0] else None
        return group_windows(
            nw.names,
            lengths,
            samples,
            nw.now,
            rel_tol=rel_tol,
            abs_tol=abs_tol,
            min_length=max(min_length, math.ulp(0.0)),
        )


def predict(
    snapshot: Snapshot,
    quantile: float | None = 0.1,
    *,
    costs: BlockCosts | None = None,
    model: RuntimeRatioModel | None = None,
    arrivals: ArrivalModel | None = None,
    samples: int = 16,
    horizon: float = DEFAULT_HORIZON,
    min_length: float = 0.0,
    seed: int = 0,
) -> list[Window]:
    """Idle windows of ``snapshot``'s idle nodes, grouped into blocks.

    Each :class:`Window` covers nodes whose ``quantile`` window lengths are close; it ends at
    the shortest of them, and ``confidence`` is the smallest member's sampled probability of
    staying idle that long (1.0 for the naive prediction). Nodes a pending job takes now, and
    windows shorter than ``min_length``, are left out. ``model=None`` gives the naive planner
    (running jobs end at their limits); ``arrivals`` adds sampled future submissions.

    ``quantile=None`` chooses each node's length by expected net harvest under ``costs``
    (default :class:`BlockCosts`: 60 s start-up, commit every 60 s) instead of a fixed
    quantile; nodes where no block pays off are left out.
    """
    predictor = WindowPredictor(
        model=model, arrivals=arrivals, samples=samples, horizon=horizon, seed=seed
    )
    return predictor.predict(snapshot, quantile, costs=costs, min_length=min_length)
