"""Which size to measure next: the one that most shrinks the curve's largest uncertainties.

For each candidate size ``m`` (above or below the current one), the posterior variances of
``ln T`` at every grid size are computed as if one more sample came from ``m`` (they do not
depend on the value it would report). The score is the evidence-weighted sum of their squares,
which favours shrinking the largest ones; the smallest score wins, ties going to the size
closest (in doublings) to where the job runs now.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from parsl_malleable.profile.model import CurveModel

TIE_REL = 1e-9  # scores this close are a tie


def size_grid(max_nodes: int) -> list[int]:
    """Powers of two up to ``max_nodes``, and ``max_nodes``: where curves are represented."""
    return sorted({*(2**k for k in range(max_nodes.bit_length()) if 2**k <= max_nodes), max_nodes})


def design_scores(model: CurveModel, grid: Sequence[int], pool: Sequence[int]) -> list[float]:
    """Per candidate in ``pool``: the weighted sum over ``grid`` of squared posterior variances
    of ``ln T`` after one more sample there. One more sample is one more independent
    observation of variance ``noise_rel**2``: a rank-one update of the posterior covariance."""
    points = sorted({*grid, *pool})
    at = {n: i for i, n in enumerate(points)}
    rows, cols = [at[n] for n in grid], [at[m] for m in pool]
    noise_var = model.data.noise_rel**2
    scores = np.zeros(len(pool))
    for weight, cov in zip(model.weights, model.covariances(points), strict=True):
        if cov is None:
            continue
        # after[j, k]: variance at grid size j after a sample at candidate k
        gain = cov[np.ix_(rows, cols)] ** 2 / (np.diag(cov)[cols] + noise_var)
        after = np.maximum(np.diag(cov)[rows][:, None] - gain, 0.0)
        scores += weight * np.sum(after**2, axis=0)
    return [float(v) for v in scores]


def most_informative_size(
    model: CurveModel, current: int, grid: Sequence[int], candidates: Iterable[int] | None = None
) -> int:
    """The candidate (default: ``grid``) whose next sample best reduces the uncertainty."""
    pool = sorted({int(c) for c in (grid if candidates is None else candidates) if c >= 1})
    if not pool:
        raise ValueError("no candidate size >= 1")
    scores = dict(zip(pool, design_scores(model, grid, pool), strict=True))
    lowest = min(scores.values())
    near_best = [m for m in pool if scores[m] <= lowest * (1 + TIE_REL)]
    return min(near_best, key=lambda m: abs(math.log2(m) - math.log2(current)))
