"""MalleTrain's curve model: the measured points themselves, joined by straight lines.

MalleTrain (ICPE 2024) profiles a job online and plans with its per-size throughput
measurements, interpolated linearly. Beyond the largest size measured it has nothing to go on;
this model assumes the last measured per-node rate holds (linear growth from that point), an
optimistic guess that makes the allocator try larger sizes. It has no notion of uncertainty:
one noisy sample is taken at face value.
"""

from __future__ import annotations

from collections.abc import Mapping

from parsl_malleable.allocate.curve import ScalingCurve


def points_curve(
    measured: Mapping[int, tuple[float, float, int]], max_nodes: int, prior_rate: float
) -> ScalingCurve:
    """The curve through ``measured`` (``size -> (mean, stderr, count)``) up to ``max_nodes``.

    With nothing measured the curve is linear at ``prior_rate`` samples/s per node.
    """
    points = {0: 0.0}
    points.update({n: mean for n, (mean, _, _) in measured.items() if 0 < n <= max_nodes})
    largest = max(points)
    if largest == 0:
        return ScalingCurve((0, max_nodes), (0.0, prior_rate * max_nodes))
    if largest < max_nodes:
        points[max_nodes] = points[largest] * max_nodes / largest
    return ScalingCurve.from_points(sorted(points.items()))


__all__ = ["points_curve"]
