"""How much longer an idle node stays idle, learned online from the idle intervals seen so far.

An idle-node trace says nothing about queued jobs, so the scheduler-plan predictor of
:mod:`parsl_malleable.windows` has nothing to read. What it does say is how long past idle
intervals lasted: a node idle for ``a`` seconds stays idle ``r`` more seconds with the
conditional distribution of ``L - a`` given ``L > a`` over completed intervals ``L``. Idle
lengths are heavy-tailed, so that remaining time grows with the age: a node idle for an hour
is likely to stay idle much longer than one idle for a minute.

Only intervals that ended before ``now`` are used (no look-ahead).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from parsl_malleable.errors import ConfigError


class HistoryWindows:
    """Conditional ``quantile`` of the remaining idle time given the age, from past intervals.

    ``observe(length, ended_at)`` records a completed interval; ``remaining(ages)`` predicts.
    The sorted sample is rebuilt at most every ``refresh_s`` seconds of the caller's clock.
    """

    def __init__(self, quantile: float = 0.5, refresh_s: float = 3600.0) -> None:
        if not 0.0 < quantile < 1.0:
            raise ConfigError(f"window quantile must be in (0, 1); got {quantile}")
        self.quantile = quantile
        self.refresh_s = refresh_s
        self._pending: list[float] = []
        self._sorted = np.empty(0)
        self._built_at = -np.inf

    def observe(self, length: float) -> None:
        """An idle interval of ``length`` seconds has ended."""
        self._pending.append(length)

    def _refresh(self, now: float) -> None:
        if self._pending and now - self._built_at >= self.refresh_s:
            self._sorted = np.sort(np.concatenate([self._sorted, self._pending]))
            self._pending.clear()
            self._built_at = now

    def remaining(self, ages: np.ndarray, now: float) -> np.ndarray:
        """Predicted seconds left for nodes idle for ``ages`` seconds (NaN: no history yet).

        A node older than every completed interval keeps its age as the prediction (it has
        lasted that long; the longest past interval says nothing more).
        """
        self._refresh(now)
        lengths = self._sorted
        ages = np.asarray(ages, dtype=float)
        if not len(lengths):
            return np.full(len(ages), np.nan)
        first = np.searchsorted(lengths, ages, side="right")  # intervals longer than the age
        longer = len(lengths) - first
        pick = np.minimum(first + np.floor(self.quantile * longer).astype(int), len(lengths) - 1)
        return np.where(longer > 0, lengths[pick] - ages, ages)


class NodeAges:
    """Adapter to :data:`parsl_malleable.controller.core.WindowSource`: node id -> when its
    idle interval began, predictions from a :class:`HistoryWindows`."""

    def __init__(self, history: HistoryWindows) -> None:
        self.history = history
        self.since: dict[str, float] = {}

    def __call__(self, nodes: Sequence[str], now: float) -> Mapping[str, float]:
        known = [n for n in nodes if n in self.since]
        ages = np.array([now - self.since[n] for n in known])
        left = self.history.remaining(ages, now)
        return {n: float(r) for n, r in zip(known, left, strict=True) if np.isfinite(r)}


__all__ = ["HistoryWindows", "NodeAges"]
