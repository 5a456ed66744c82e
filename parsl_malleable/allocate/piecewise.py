"""Piecewise-linear throughput of one job inside a pulp model (incremental formulation).

The count ``n`` is ``0`` (job stopped, run indicator ``z = 0``) or in ``[min_nodes, max_nodes]``.
With breakpoints ``p_0 = min < p_1 < ... < p_K = max`` and rates ``r_k``:
``n = p_0 z + sum_k d_k (p_{k+1} - p_k)`` and ``rate = r_0 z + sum_k d_k (r_{k+1} - r_k)``,
where ``d_k`` in [0, 1] fill the intervals in order: binaries ``w_k`` with
``d_{k+1} <= w_k <= d_k`` (and ``d_0 <= z``). This is exact for any curve shape (not only
concave ones) and its LP relaxation is tighter than the SOS2 "lambda" form.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

import pulp

from parsl_malleable.allocate.curve import ScalingCurve
from parsl_malleable.allocate.spec import TrainingJob


@dataclass
class PiecewiseRate:
    """Variables of one job's throughput block: ``run`` (z), ``count`` and ``rate`` expressions."""

    run: pulp.LpVariable
    count: pulp.LpAffineExpression
    rate: pulp.LpAffineExpression


def add_piecewise_rate(problem: pulp.LpProblem, job: TrainingJob, tag: str) -> PiecewiseRate:
    """Add the throughput block of ``job`` to ``problem``; variable names start with ``tag``."""
    points = job.curve.breakpoints(job.min_nodes, job.max_nodes)
    run = problem.add_variable(f"z{tag}", cat=pulp.LpBinary)
    fill = [problem.add_variable(f"d{tag}_{k}", 0, 1) for k in range(len(points) - 1)]
    if fill:
        problem += fill[0] - run <= 0
    for k in range(len(fill) - 1):
        order = problem.add_variable(f"w{tag}_{k}", cat=pulp.LpBinary)
        problem += order - fill[k] <= 0
        problem += fill[k + 1] - order <= 0
    steps = list(itertools.pairwise(points))
    count = pulp.LpAffineExpression(
        [(run, float(points[0][0]))]
        + [(d, float(b[0] - a[0])) for d, (a, b) in zip(fill, steps, strict=True)]
    )
    rate = pulp.LpAffineExpression(
        [(run, points[0][1])] + [(d, b[1] - a[1]) for d, (a, b) in zip(fill, steps, strict=True)]
    )
    return PiecewiseRate(run, count, rate)


def concave_envelope(job: TrainingJob) -> list[tuple[int, float]]:
    """Upper concave envelope of ``(0, 0)`` and the curve on ``[min_nodes, max_nodes]``."""
    return list(_envelope(job.curve, job.min_nodes, job.max_nodes))


# Keyed by the curve and bounds, not the job: a job's hash covers its current node names
# (hundreds on a large pool), and hashing them made up a third of the greedy rule's time.
@functools.lru_cache(maxsize=4096)
def _envelope(curve: ScalingCurve, lo: int, hi: int) -> tuple[tuple[int, float], ...]:
    points = [(0, 0.0), *curve.breakpoints(lo, hi)]
    hull: list[tuple[int, float]] = []
    for p in points:
        while len(hull) >= 2:
            (x0, y0), (x1, y1) = hull[-2], hull[-1]
            # Drop the middle point when it lies on or below the chord from hull[-2] to p.
            if (y1 - y0) * (p[0] - x0) <= (p[1] - y0) * (x1 - x0):
                hull.pop()
            else:
                break
        hull.append(p)
    return tuple(hull)


@functools.lru_cache(maxsize=4096)
def _envelope_peak(curve: ScalingCurve, lo: int, hi: int) -> int:
    hull = _envelope(curve, lo, hi)
    return max(hull, key=lambda p: (p[1], -p[0]))[0]


def _on_hull(hull: tuple[tuple[int, float], ...], n: float) -> float:
    n = min(max(n, 0.0), hull[-1][0])
    for (x0, y0), (x1, y1) in itertools.pairwise(hull):
        if n <= x1:
            return y0 + (y1 - y0) * (n - x0) / (x1 - x0)
    return hull[-1][1]


def envelope_rate(job: TrainingJob, n: float) -> float:
    """The concave envelope at ``n`` nodes (``n`` clipped to ``[0, max_nodes]``)."""
    return _on_hull(_envelope(job.curve, job.min_nodes, job.max_nodes), n)


def best_envelope_rate(job: TrainingJob, most: float) -> float:
    """The envelope's highest value on ``[0, most]`` nodes.

    A concave function rises up to its peak and falls after it, so this is its value at
    ``min(most, peak)``: one lookup instead of a scan of every vertex.
    """
    peak = _envelope_peak(job.curve, job.min_nodes, job.max_nodes)
    return envelope_rate(job, min(most, peak))


def add_envelope_rate(problem: pulp.LpProblem, job: TrainingJob, tag: str) -> PiecewiseRate:
    """An LP (binary-free) throughput block on the concave envelope, for forecast segments.

    Maximising a concave piecewise-linear function needs no binaries; it over-estimates the
    curve where the curve is not concave and relaxes ``min_nodes``, which is acceptable for
    segments the allocator will plan again before they start.
    """
    hull = concave_envelope(job)[1:]
    run = problem.add_variable(f"z{tag}", 0, 1)
    lam = [problem.add_variable(f"l{tag}_{k}", 0, 1) for k in range(len(hull))]
    problem += pulp.LpAffineExpression([(v, 1.0) for v in lam] + [(run, -1.0)]) == 0
    count = pulp.LpAffineExpression([(v, float(n)) for v, (n, _) in zip(lam, hull, strict=True)])
    rate = pulp.LpAffineExpression([(v, r) for v, (_, r) in zip(lam, hull, strict=True)])
    return PiecewiseRate(run, count, rate)
