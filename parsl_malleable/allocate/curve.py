"""Scalability curves: throughput (samples/s) measured or predicted at a few node counts."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Annotated

from pydantic import Field

from parsl_malleable.allocate.errors import AllocationInputError
from parsl_malleable.inputs import Number, WholeCount, boundary


@boundary(AllocationInputError)
class ScalingCurve:
    """Throughput of one training job as a function of its node count.

    ``nodes`` are strictly increasing node counts (0 may be included; the curve is always 0 at 0
    nodes), ``throughput`` the samples/s at each, ``stderr`` an optional standard error of each
    value (the profiler fills it). Between points the curve is linear; beyond the last point it
    stays flat, because a job gains nothing from nodes nobody has measured or predicted.
    """

    nodes: tuple[Annotated[WholeCount, Field(ge=0)], ...]
    throughput: tuple[Annotated[Number, Field(ge=0)], ...]
    stderr: tuple[Annotated[Number, Field(ge=0)], ...] | None = None

    def __post_init__(self) -> None:
        nodes, rates = self.nodes, self.throughput
        if not nodes:
            raise AllocationInputError("scaling curve: no points")
        if len(nodes) != len(rates):
            raise AllocationInputError(
                f"scaling curve: {len(nodes)} node counts but {len(rates)} throughputs"
            )
        if any(b <= a for a, b in itertools.pairwise(nodes)):
            raise AllocationInputError(
                f"scaling curve: node counts must be strictly increasing, got {nodes}"
            )
        if nodes[0] == 0 and rates[0] != 0.0:
            raise AllocationInputError("scaling curve: throughput at 0 nodes must be 0")
        if self.stderr is not None and len(self.stderr) != len(nodes):
            raise AllocationInputError("scaling curve: stderr must have one value per point")

    @classmethod
    def from_points(cls, points: Sequence[tuple[int, float]]) -> ScalingCurve:
        """Build from ``(nodes, samples_per_s)`` pairs in any order."""
        ordered = sorted(points)
        return cls(tuple(n for n, _ in ordered), tuple(r for _, r in ordered))

    def _full(self) -> tuple[tuple[int, ...], tuple[float, ...]]:
        if self.nodes[0] == 0:
            return self.nodes, self.throughput
        return (0, *self.nodes), (0.0, *self.throughput)

    def __call__(self, n: float) -> float:
        """Throughput at ``n`` nodes (linear between points, flat after the last one)."""
        xs, ys = self._full()
        if n <= 0:
            return 0.0
        if n >= xs[-1]:
            return ys[-1]
        for i in range(1, len(xs)):
            if n <= xs[i]:
                x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
                return y0 + (y1 - y0) * (n - x0) / (x1 - x0)
        return ys[-1]  # pragma: no cover - loop always returns

    def breakpoints(self, lo: int, hi: int) -> list[tuple[int, float]]:
        """The curve's points inside ``[lo, hi]`` plus both ends, as ``(nodes, throughput)``.

        The allocator interpolates linearly between these, which reproduces the curve exactly
        on ``[lo, hi]``.
        """
        inner = [n for n in self._full()[0] if lo < n < hi]
        return [(n, self(n)) for n in sorted({lo, *inner, hi})]

    def shifted(self, k: float) -> ScalingCurve:
        """The curve moved by ``k`` standard errors (negative: pessimistic), floored at 0."""
        if self.stderr is None:
            return self
        rates = tuple(
            0.0 if n == 0 else max(0.0, r + k * e)
            for n, r, e in zip(self.nodes, self.throughput, self.stderr, strict=True)
        )
        return ScalingCurve(self.nodes, rates, self.stderr)
