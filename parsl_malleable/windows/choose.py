"""Decision-theoretic block length: the length that maximises the expected net harvest.

For one idle node the predictor has sampled window lengths ``A`` (Monte-Carlo draws) and the
naive window (no block may outlast the scheduler's current plan). A block of length ``L`` costs
what the evaluation charges (:mod:`parsl_malleable.windows.accounting`)::

    value(L) = E[min(L, A)] - startup                      # node time held, start-up paid
               - E[lost(A); A < L] - yield_penalty P(A < L) # cut by the native job
               - startup P(A > L)                           # ended early: renewed, pays again

where ``lost(A) = max(A - startup, 0) mod commit_interval`` is the work since the last commit.
Between two sampled values ``value`` grows with slope ``P(A > L) >= 0`` and the penalties are
steps at the samples, so the best ``L`` is one of the samples (or the naive window): every one
is tried. A node whose best value is not positive gets no block (length 0).
"""

from __future__ import annotations

import numpy as np

from parsl_malleable.windows.accounting import BlockCosts


def block_values(candidates: np.ndarray, samples: np.ndarray, costs: BlockCosts) -> np.ndarray:
    """Expected net harvest of blocks of ``candidates`` (``(c, n)`` lengths) against
    ``samples`` (``(k, n)`` sampled windows): shape ``(c, n)``, seconds of node time."""
    L = np.asarray(candidates, dtype=float)[:, None, :]
    a = np.asarray(samples, dtype=float)[None, :, :]
    cut = a < L
    lost = np.where(cut, np.mod(np.maximum(a - costs.startup, 0.0), costs.commit_interval), 0.0)
    value = (
        np.minimum(L, a)
        - costs.startup
        - lost
        - costs.yield_penalty * cut
        - costs.startup * (a > L)
    )
    return value.mean(axis=1)


def expected_lengths(samples: np.ndarray, naive: np.ndarray, costs: BlockCosts) -> np.ndarray:
    """Per node, the block length with the largest expected net harvest (0: no block).

    ``samples``: ``(k, n)`` sampled window lengths; ``naive``: ``(n,)`` the longest allowed
    (the limits-only plan). With no samples the naive window is returned. Ties go to the
    shorter length (the same value with fewer seconds at risk).
    """
    samples = np.asarray(samples, dtype=float)
    naive = np.asarray(naive, dtype=float)
    if samples.ndim != 2 or samples.shape[1] != len(naive):
        raise ValueError(f"samples must have shape (draws, {len(naive)}), got {samples.shape}")
    if samples.shape[0] == 0 or len(naive) == 0:
        return naive.copy()
    # candidates: every sampled length (a block can never outlast the naive plan), and naive
    candidates = np.sort(np.vstack([np.minimum(samples, naive), naive[None, :]]), axis=0)
    values = block_values(candidates, samples, costs)
    best = np.argmax(values, axis=0)  # first maximum: the shortest of equal values
    cols = np.arange(len(naive))
    return np.where(values[best, cols] > 0.0, candidates[best, cols], 0.0)
