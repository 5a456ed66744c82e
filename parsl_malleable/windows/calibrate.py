"""Recalibrating the quantile windows from outcomes that have already resolved.

Two methods. :class:`WindowCalibration` (the one to use) rescales the draws' quantile by a
conformal factor per node-state class and horizon bucket, from censoring-aware scores of recent
windows. :class:`QuantileCalibration` (the earlier one, kept for comparison) picks another level
of the draws (PIT values); it cannot go below the smallest draw, which on arrival-driven traces
is not short enough.

The draws of a window are a rough model (arrivals resampled from a past day): their ``q``
quantile is over-predicted more often than ``q``. Each resolved window gives one probability
integral transform value ``u`` (the fraction of its draws below what actually happened, ties
counted half). If the draws were calibrated ``u`` would be uniform; the level whose draws'
quantile is exceeded by the outcome with probability ``1 - q`` is the ``q`` quantile of the
recent ``u``. Outcomes are used only once known (a window is resolved when it has ended), so
the recalibration is online and leaks nothing from the future.
"""

from __future__ import annotations

import math

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


# Horizon buckets (seconds) of the draws' quantile: the draws' error is not proportional across
# lengths (a 5-min prediction is off by a different factor than a 10-h one), so each bucket gets
# its own factor.
BUCKET_EDGES = (600.0, 3600.0, 6 * 3600.0)
# The two node-state classes: a node whose naive window ends inside the horizon waits for a
# pending job the plan has placed on it ("reserved": the queue's own jobs end it); one whose naive
# window is the horizon waits for nobody yet ("free": only future submissions end it). The draws
# model the two very differently (early ends vs resampled arrivals), and so are off differently.
CLASS_NAMES = ("reserved", "free")


def km_quantile(values: np.ndarray, events: np.ndarray, quantile: float) -> float:
    """The ``quantile`` of right-censored ``values`` (Kaplan-Meier): the smallest value where
    the estimated CDF reaches ``quantile``; ``inf`` when it never does (too many censored).

    ``events[i]`` is False where ``values[i]`` is only a lower bound (the window had not ended
    yet): such an outcome leaves the risk set there instead of counting as an end, so a node
    still idle is never taken for one whose window ended.
    """
    values = np.asarray(values, dtype=float)
    events = np.asarray(events, dtype=bool)
    if not len(values):
        return math.inf
    order = np.lexsort((~events, values))  # ends before censorings at equal values
    v, e = values[order], events[order]
    at_risk = len(v) - np.arange(len(v))
    survival = np.cumprod(np.where(e, 1.0 - 1.0 / at_risk, 1.0))
    hit = np.flatnonzero(1.0 - survival >= quantile - 1e-12)
    return float(v[hit[0]]) if len(hit) else math.inf


class WindowCalibration:
    """Online conformal recalibration of quantile windows (censoring-aware, adaptive).

    The draws' ``q`` quantile (the *base* window) is over-predicted more often than ``q``, and on
    some traces the actual window is below even the *smallest* draw more than ``q`` of the time,
    so no choice of the draws' level (:class:`QuantileCalibration`) can reach ``q``. This class
    rescales instead: the score of a window is ``r = actual / base``; the window ``f * base`` is
    over-predicted exactly when ``r < f``, so the factor ``f`` is a quantile of the recent
    scores. Scores are kept per ``quantile`` and per group (node-state class x horizon bucket of
    the base, :meth:`groups`); a group with fewer than ``min_count`` scores uses its class's,
    then all of them, then no correction (1.0). Each :meth:`record` keeps at most
    ``per_record`` evenly spaced windows of its batch: the idle nodes of one snapshot mostly end
    together, so the window of recent scores should span many snapshots, not one busy hour.

    Two online parts, recomputed every ``refresh`` seconds:

    - *conformal*: the factor is the ``alpha_g`` quantile (Kaplan-Meier, :func:`km_quantile`)
      of the group's latest ``window`` scores, as known at ``now``;
    - *adaptive level* (adaptive conformal inference): ``alpha_g`` starts at ``q`` and moves by
      ``gain * (q - rate)``, where ``rate`` is the share of over-predictions among the group's
      windows whose verdict became known since the last refresh. The scores lag (a window's
      score is complete only when the window ends, up to the horizon later) while the load
      drifts within hours; a verdict on the window actually handed out is known much sooner
      (at its end, or when the node is taken before it), so this feedback corrects the drift.

    Strictly online: :meth:`record` takes an outcome with the time it was predicted, and the
    factors at ``now`` use only what is known then. A window predicted at ``t`` that lasted
    ``a`` counts as ended only once ``now >= t + a``; until then it is a censored score (the
    node has been idle at least ``now - t``), a lower bound for the Kaplan-Meier quantile.
    Dropping such pending windows instead would keep only the short ones among the latest
    predictions and make the windows too short. Windows the observation stopped before their end
    (``complete=False``: the node still idle when the replay or the provider's record ends, or
    idle past the horizon) stay censored.
    """

    def __init__(
        self,
        window: int = 3000,
        min_count: int = 50,
        refresh: float = 3600.0,
        gain: float = 0.05,
        per_record: int | None = 32,
        bucket_edges: tuple[float, ...] = BUCKET_EDGES,
    ) -> None:
        self.window = window
        self.per_record = per_record
        self.min_count = min_count
        self.refresh = refresh
        self.gain = gain
        self.bucket_edges = np.asarray(bucket_edges, dtype=float)
        self.per_class = len(bucket_edges) + 1
        self.n_groups = len(CLASS_NAMES) * self.per_class
        # per quantile: chunks of (t, base, actual, complete, group, predicted, own), in
        # recording order; ``own``: the window's factor came from its group's own scores
        self._chunks: dict[float, list[tuple[np.ndarray, ...]]] = {}
        # per quantile: (time computed, factor per group, whether from the group's own scores)
        self._cache: dict[float, tuple[float, np.ndarray, np.ndarray]] = {}
        self._alpha: dict[float, np.ndarray] = {}

    def groups(self, base: np.ndarray, naive: np.ndarray, horizon: float) -> np.ndarray:
        """Group index per node: node-state class (``naive >= horizon``: free) x bucket of
        ``base``."""
        free = np.asarray(naive, dtype=float) >= horizon
        bucket = np.searchsorted(self.bucket_edges, np.asarray(base, dtype=float), side="right")
        return free.astype(np.int64) * self.per_class + bucket

    def alpha(self, quantile: float) -> np.ndarray:
        """Per group, the adaptive level currently used for ``quantile`` (a copy)."""
        return self._alpha.get(float(quantile), np.full(self.n_groups, float(quantile))).copy()

    def record(
        self,
        quantile: float,
        t: float,
        base: np.ndarray,
        groups: np.ndarray,
        actual: np.ndarray,
        complete: np.ndarray,
        predicted: np.ndarray | None = None,
    ) -> None:
        """Windows predicted at ``t`` with base ``base`` (the draws' ``quantile``) in
        ``groups``, which lasted ``actual`` (``complete``: ended by a native job, so exactly
        that; otherwise at least that). ``predicted``: the windows handed out (default: the
        current factors times ``base``). An outcome is used only once known (see the class)."""
        base = np.asarray(base, dtype=float)
        groups = np.asarray(groups, dtype=np.int64)
        factors = self.factors(quantile, t)
        if predicted is None:
            predicted = self._scale(factors[groups], base)
        cols: tuple[np.ndarray, ...] = (
            base,
            np.asarray(actual, dtype=float),
            np.asarray(complete, dtype=bool),
            groups,
            np.asarray(predicted, dtype=float),
        )
        if self.per_record is not None and len(base) > self.per_record:
            # the idle nodes of one snapshot mostly end together (one large job takes them):
            # hundreds of them are barely more evidence than a few, and would fill the window
            # with one hour of a big machine. Keep an evenly spaced subset.
            pick = np.linspace(0, len(base) - 1, self.per_record).round().astype(np.int64)
            cols = tuple(c[pick] for c in cols)
        base, actual_, complete_, groups, predicted_ = cols
        chunk = (
            np.full(len(base), float(t)),
            base,
            actual_,
            complete_,
            groups,
            predicted_,
            self._cache[float(quantile)][2][groups],
        )
        chunks = self._chunks.setdefault(float(quantile), [])
        chunks.append(chunk)
        if len(chunks) > 64:  # keep the lists short
            merged = tuple(np.concatenate(c) for c in zip(*chunks, strict=True))
            # only the latest ``window`` per group can be used again, and windows whose
            # verdict is not known yet (the adaptive level still needs them)
            keep = _verdict_time(merged) > float(t)
            for g in range(self.n_groups):
                keep[np.flatnonzero(merged[4] == g)[-self.window :]] = True
            self._chunks[float(quantile)] = [tuple(c[keep] for c in merged)]

    def factors(self, quantile: float, now: float) -> np.ndarray:
        """Per group, the factor ``f`` such that about ``quantile`` of the windows ``f * base``
        are over-predicted, from what is known at ``now`` (1.0: no data yet)."""
        q = float(quantile)
        cached = self._cache.get(q)
        if cached is not None and cached[0] <= now < cached[0] + self.refresh:
            return cached[1]
        last = cached[0] if cached is not None else -math.inf
        out = np.ones(self.n_groups)
        own = np.zeros(self.n_groups, dtype=bool)
        alpha = self._alpha.setdefault(q, np.full(self.n_groups, q))
        chunks = self._chunks.get(q)
        if chunks:
            cols = tuple(np.concatenate(c) for c in zip(*chunks, strict=True))
            cols = tuple(c[cols[0] <= now] for c in cols)
            t, base, actual, complete, group, _, was_own = cols
            # adaptive level: verdicts on the handed-out windows that became known since the
            # last refresh (a window still idle at its predicted end is not over-predicted)
            verdict = _verdict_time(cols)
            # only windows the group's own factor sized: the uncorrected ones of a young group
            # say nothing about the level (and would wind it far off)
            new = (verdict > last) & (verdict <= now) & was_own
            over = complete & (actual < cols[5])
            for g in range(self.n_groups):
                sel = new & (group == g)
                n = int(sel.sum())
                if n:
                    # weighted by how many verdicts arrived: a handful moves the level little
                    step = self.gain * (q - float(over[sel].mean())) * n / (n + 50.0)
                    alpha[g] = np.clip(alpha[g] + step, q / 5.0, 1.0 - (1.0 - q) / 5.0)
            ended = complete & (t + actual <= now)
            # a window not ended by now is known to last at least ``now - t``
            seen = np.where(ended, actual, np.minimum(actual, now - t))
            score = seen / np.maximum(base, 1.0)
            for c in range(len(CLASS_NAMES)):
                in_class = (group // self.per_class) == c
                for b in range(self.per_class):
                    g = c * self.per_class + b
                    sel = np.flatnonzero(group == g)[-self.window :]
                    if len(sel) >= self.min_count:
                        out[g] = _factor(score[sel], ended[sel], alpha[g])
                        own[g] = True
                    elif in_class.sum() >= self.min_count:  # too young: its class's scores
                        out[g] = _factor(
                            score[in_class][-self.window :], ended[in_class][-self.window :], q
                        )
                    elif len(score) >= self.min_count:
                        out[g] = _factor(score[-self.window :], ended[-self.window :], q)
        self._cache[q] = (now, out, own)
        return out

    @staticmethod
    def _scale(factor: np.ndarray, base: np.ndarray) -> np.ndarray:
        # an infinite factor (most recent windows outlasted the horizon) means "the naive one"
        return np.where(np.isinf(factor), np.where(base > 0, np.inf, 0.0), factor * base)

    def adjust(
        self,
        quantile: float,
        base: np.ndarray,
        groups: np.ndarray,
        naive: np.ndarray,
        now: float,
    ) -> np.ndarray:
        """The recalibrated windows: ``factor * base``, never past the naive window (the
        scheduler's current plan for the node)."""
        base = np.asarray(base, dtype=float)
        f = self.factors(quantile, now)[np.asarray(groups, dtype=np.int64)]
        return np.minimum(self._scale(f, base), np.asarray(naive, dtype=float))


def _factor(score: np.ndarray, ended: np.ndarray, level: float) -> float:
    """The ``level`` quantile of the scores; where too few have ended to reach it (young
    windows, all still idle), the largest score seen, a lower bound of that quantile: the
    window is then no longer than what the recent windows are already known to have lasted,
    never the naive window on no evidence."""
    f = km_quantile(score, ended, level)
    return float(score.max()) if math.isinf(f) else f


def _verdict_time(cols: tuple[np.ndarray, ...]) -> np.ndarray:
    """When each recorded window's verdict (over-predicted or not) is known: at the window's
    end if the node was taken before the predicted end, else at the predicted end; never
    (``inf``) for a censored window that had not outlasted the prediction."""
    t, _, actual, complete, _, predicted, _ = cols
    over = complete & (actual < predicted)
    unknown = ~complete & (actual < predicted)
    return np.where(over, t + actual, np.where(unknown, np.inf, t + predicted))
