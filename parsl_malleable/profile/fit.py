"""The parametric model ``seconds per sample = a/n + b + c*n`` (a, b, c >= 0): the profiler's
model before the Gaussian-process curve model (kept for comparison, see docs/profile.md).

``a/n`` is compute split across ``n`` nodes, ``b`` the part that does not shrink, ``c*n`` the
communication that grows with the world size. Throughput is its inverse. The fit is a weighted
non-negative least squares on the measured seconds per sample; its covariance gives an
uncertainty that the delta method carries to throughput.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np


@dataclass(frozen=True)
class ScalingFit:
    """Fitted parameters ``(a, b, c)``, their covariance, and the measured size range."""

    params: tuple[float, float, float]
    covariance: tuple[tuple[float, ...], ...]
    measured: tuple[int, ...]
    extrapolation_rel: float

    def throughput(self, n: float) -> float:
        """Predicted samples/s on ``n`` nodes."""
        seconds = float(np.dot(self.params, _basis(n)))
        return 1.0 / seconds if seconds > 0 else 0.0

    def stderr(self, n: float) -> float:
        """Standard error of :meth:`throughput` at ``n``, widened outside the measured range."""
        g = _basis(n)
        var_s = float(g @ np.asarray(self.covariance) @ g)
        rate = self.throughput(n)
        fit_err = math.sqrt(max(var_s, 0.0)) * rate * rate
        lo, hi = min(self.measured), max(self.measured)
        outside = max(0.0, math.log2(lo / n) if n < lo else math.log2(n / hi) if n > hi else 0.0)
        # Beyond the measured sizes the model form itself is a guess: add a term per doubling.
        return math.hypot(fit_err, self.extrapolation_rel * outside * rate)


def _basis(n: float) -> np.ndarray:
    return np.array([1.0 / n, 1.0, float(n)])


def _nnls(design: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Non-negative least squares by trying every subset of the (at most 3) columns."""
    best, best_err = np.zeros(design.shape[1]), float(target @ target)
    cols = range(design.shape[1])
    for size in range(1, design.shape[1] + 1):
        for subset in combinations(cols, size):
            sol, *_ = np.linalg.lstsq(design[:, subset], target, rcond=None)
            if np.any(sol < 0):
                continue
            err = float(np.sum((design[:, subset] @ sol - target) ** 2))
            if err < best_err:
                best = np.zeros(design.shape[1])
                best[list(subset)] = sol
                best_err = err
    return best


def fit_scaling(
    sizes: Sequence[int],
    rates: Sequence[float],
    rate_errors: Sequence[float],
    *,
    extrapolation_rel: float = 0.1,
) -> ScalingFit:
    """Fit the model to mean throughputs ``rates`` (with standard errors) at world ``sizes``.

    With one size only ``a`` is fitted (linear scaling); with two, ``a`` and ``b``.
    """
    n = np.asarray(sizes, dtype=float)
    r = np.asarray(rates, dtype=float)
    err = np.asarray(rate_errors, dtype=float)
    seconds = 1.0 / r
    sigma = err / (r * r)
    terms = [0] if len(n) == 1 else [0, 1] if len(n) == 2 else [0, 1, 2]
    design = np.stack([[_basis(v)[t] for t in terms] for v in n])
    w = 1.0 / sigma
    coef = _nnls(design * w[:, None], seconds * w)
    params = np.zeros(3)
    params[terms] = coef
    cov = np.zeros((3, 3))
    active = [t for t, c in zip(terms, coef, strict=True) if c > 0] or terms[:1]
    cols = [terms.index(t) for t in active]
    weighted = design[:, cols] * w[:, None]
    resid = (design @ coef - seconds) * w
    dof = len(n) - len(active)
    scale = max(1.0, float(resid @ resid) / dof) if dof > 0 else 1.0
    inv = np.linalg.pinv(weighted.T @ weighted) * scale
    for i, ti in enumerate(active):
        for k, tk in enumerate(active):
            cov[ti, tk] = inv[i, k]
    a, b, c = (float(p) for p in params)
    return ScalingFit(
        (a, b, c),
        tuple(tuple(float(v) for v in row) for row in cov),
        tuple(int(v) for v in sizes),
        extrapolation_rel,
    )
