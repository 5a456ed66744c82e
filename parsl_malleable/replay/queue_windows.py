"""Windows in job-trace mode: the scheduler-plan predictor of :mod:`parsl_malleable.windows`.

A job trace simulated under EASY says what the queue held at every moment, so ``ours`` plans
with the predictor the live provider runs: at each decision the simulated machine's snapshot
(running jobs with their limits, the pending queue) goes to a :class:`WindowPredictor` whose
early-end and arrival models are refitted every ``refit_s`` on the jobs that had ended (no
look-ahead), and each idle node's window is the ``quantile`` of its sampled windows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from parsl_malleable.sim.trace_replay import SimResult
from parsl_malleable.traces.schema import JobTrace
from parsl_malleable.windows.evaluate import refit_on_history, replay_history
from parsl_malleable.windows.predict import WindowPredictor
from parsl_malleable.windows.replay_snapshots import ReplayState


class QueueWindows:
    """:data:`parsl_malleable.controller.core.WindowSource` over a simulated job trace.

    Node names are the simulator's (:func:`parsl_malleable.sim.trace_replay.node_name`), as in the
    timeline :func:`parsl_malleable.replay.idle.idle_from_sim` builds.
    """

    def __init__(
        self,
        trace: JobTrace,
        sim: SimResult,
        *,
        quantile: float = 0.5,
        samples: int = 16,
        refit_s: float = 3600.0,
        backfill: str = "easy",
    ) -> None:
        self.state = ReplayState(trace, sim)
        self.history = replay_history(self.state, trace.jobs)
        self.predictor = WindowPredictor(samples=samples, seed=0)
        self.quantile = quantile
        self.refit_s = refit_s
        self.backfill = backfill
        self._next_fit = -math.inf
        self.predictions = 0

    def __call__(self, nodes: Sequence[str], now: float) -> Mapping[str, float]:
        self.state.advance(now)
        if now >= self._next_fit:
            refit_on_history(self.predictor, self.history, now, arrivals=True)
            self._next_fit = now + self.refit_s
        windows = self.predictor.node_windows(self.state.snapshot(self.backfill))
        self.predictions += 1
        lengths = dict(zip(windows.names, windows.length(self.quantile), strict=True))
        return {n: float(lengths[n]) for n in nodes if n in lengths}


__all__ = ["QueueWindows"]
