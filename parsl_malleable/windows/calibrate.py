"""Recalibrating the draws' quantile from outcomes that have already resolved (PIT values).

The draws of a window are a rough model (arrivals resampled from a past day): their ``q``
quantile is over-predicted more often than ``q``. Each resolved window gives one probability
integral transform value ``u`` (the fraction of its draws below what actually happened, ties
counted half). If the draws were calibrated ``u`` would be uniform; the level whose draws'
quantile is exceeded by the outcome with probability ``1 - q`` is the ``q`` quantile of the
recent ``u``. Outcomes are used only once known (a window is resolved when it has ended), so
the recalibration is online and leaks nothing from the future.
"""

from __future__ import annotations

import numpy as np


def pit(samples: np.ndarray, actual: np.ndarray) -> np.ndarray:
    """Per node, the mid-rank fraction of its draws (``(k, n)``) below ``actual`` (``(n,)``)."""
    samples = np.asarray(samples, dtype=float)
    actual = np.asarray(actual, dtype=float)[None, :]
    return np.mean(samples < actual, axis=0) + 0.5 * np.mean(samples == actual, axis=0)


class QuantileCalibration:
    """Online map from a wanted quantile to the draws' level that delivers it.

    ``window``: how many of the most recently recorded resolved outcomes are used;
    ``min_count``: below this many, :meth:`level` returns the wanted quantile unchanged.
    """

    def __init__(self, window: int = 20_000, min_count: int = 200) -> None:
        self.window = window
        self.min_count = min_count
        self._resolve: list[np.ndarray] = []
        self._u: list[np.ndarray] = []

    def record(self, resolve_at: np.ndarray, u: np.ndarray) -> None:
        """Outcomes ``u`` (see :func:`pit`) that become known at times ``resolve_at``."""
        self._resolve.append(np.asarray(resolve_at, dtype=float))
        self._u.append(np.asarray(u, dtype=float))
        if len(self._u) > 64:  # keep the lists short
            self._resolve = [np.concatenate(self._resolve)]
            self._u = [np.concatenate(self._u)]

    def level(self, quantile: float, now: float) -> float:
        """The draws' level whose quantile the outcome stays above w.p. about ``1 - quantile``,
        from the outcomes resolved by ``now``."""
        if not self._u:
            return quantile
        resolve = np.concatenate(self._resolve)
        u = np.concatenate(self._u)[resolve <= now][-self.window :]
        if len(u) < self.min_count:
            return quantile
        return float(np.quantile(u, quantile))
