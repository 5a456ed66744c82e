"""Piecewise-linear throughput of one job inside a pulp model (SOS2 with binaries).

The count ``n`` is ``0`` (job stopped) or in ``[min_nodes, max_nodes]``: ``lambda_k`` weight the
breakpoints of ``[min, max]`` and sum to the run indicator ``z``; binaries ``y_k`` pick the one
interval whose two ends may carry weight. The breakpoint at 0 gets weight ``1 - z``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pulp

from parsl_malleable.allocate.spec import TrainingJob


@dataclass
class PiecewiseRate:
    """Variables of one job's throughput block: ``run`` (z), ``count`` and ``rate`` expressions."""

    run: pulp.LpVariable
    count: pulp.LpAffineExpression
    rate: pulp.LpAffineExpression


def add_piecewise_rate(problem: pulp.LpProblem, job: TrainingJob, tag: str) -> PiecewiseRate:
    """Add the SOS2 block of ``job`` to ``problem``; variable names start with ``tag``."""
    points = job.curve.breakpoints(job.min_nodes, job.max_nodes)
    run = problem.add_variable(f"z{tag}", cat=pulp.LpBinary)
    lam = [problem.add_variable(f"l{tag}_{k}", 0, 1) for k in range(len(points))]
    problem += pulp.LpAffineExpression([(v, 1.0) for v in lam] + [(run, -1.0)]) == 0
    if len(points) >= 3:
        pick = [
            problem.add_variable(f"y{tag}_{k}", cat=pulp.LpBinary) for k in range(len(points) - 1)
        ]
        problem += pulp.LpAffineExpression([(v, 1.0) for v in pick] + [(run, -1.0)]) == 0
        for k, weight in enumerate(lam):
            near = [pick[i] for i in (k - 1, k) if 0 <= i < len(pick)]
            problem += pulp.LpAffineExpression([(weight, 1.0)] + [(v, -1.0) for v in near]) <= 0
    count = pulp.LpAffineExpression([(v, float(n)) for v, (n, _) in zip(lam, points, strict=True)])
    rate = pulp.LpAffineExpression([(v, r) for v, (_, r) in zip(lam, points, strict=True)])
    return PiecewiseRate(run, count, rate)


def concave_envelope(job: TrainingJob) -> list[tuple[int, float]]:
    """Upper concave envelope of ``(0, 0)`` and the curve on ``[min_nodes, max_nodes]``."""
    points = [(0, 0.0), *job.curve.breakpoints(job.min_nodes, job.max_nodes)]
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
    return hull


def envelope_rate(job: TrainingJob, n: float) -> float:
    """The concave envelope at ``n`` nodes (``n`` clipped to ``[0, max_nodes]``)."""
    hull = concave_envelope(job)
    n = min(max(n, 0.0), hull[-1][0])
    for (x0, y0), (x1, y1) in itertools.pairwise(hull):
        if n <= x1:
            return y0 + (y1 - y0) * (n - x0) / (x1 - x0)
    return hull[-1][1]


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
