"""The accuracy protocol of docs/profile.md: profile a simulated job whose true curve is known.

The job starts at ``start`` nodes; its first sample is taken there. Before each later sample the
profiler is asked where to run next (``choose``, default :meth:`ScalabilityProfiler.next_size`);
each sample reports ``true(n) * (1 + N(0, noise))``. After ``checkpoints`` samples the estimate
``profiler.curve(job, max_nodes)`` (no optimism shift) is compared with the truth at every whole
node count ``1..max_nodes`` and, separately, at the true curve's measured node counts.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from parsl_malleable.allocate.curve import ScalingCurve
from parsl_malleable.profile.profiler import ScalabilityProfiler

JOB = "simulated"
Chooser = Callable[[ScalabilityProfiler, str, int, int], int]


def default_chooser(profiler: ScalabilityProfiler, job: str, current: int, max_nodes: int) -> int:
    """The profiler's own advice: :meth:`ScalabilityProfiler.next_size`."""
    return profiler.next_size(job, current, max_nodes)


@dataclass(frozen=True)
class ProfilingRun:
    """Worst relative errors after each checkpoint and the sizes sampled, in order."""

    worst_all: dict[int, float]
    worst_grid: dict[int, float]
    sizes: tuple[int, ...]


def worst_error(estimate: ScalingCurve, truth: ScalingCurve, counts: Sequence[int]) -> float:
    """Largest ``|estimate(n) / truth(n) - 1|`` over node counts ``counts``."""
    return max(abs(estimate(n) / truth(n) - 1.0) for n in counts)


def profile_simulated(
    truth: ScalingCurve,
    start: int,
    *,
    max_nodes: int | None = None,
    samples: int = 20,
    noise: float = 0.05,
    seed: int = 0,
    checkpoints: Sequence[int] = (5, 10, 20),
    profiler: ScalabilityProfiler | None = None,
    choose: Chooser = default_chooser,
) -> ProfilingRun:
    """Run the protocol once on ``truth`` (linear between its points) from ``start`` nodes."""
    top = max_nodes if max_nodes is not None else max(truth.nodes)
    grid = [n for n in truth.nodes if 1 <= n <= top]
    prof = profiler if profiler is not None else ScalabilityProfiler()
    rng = random.Random(seed)  # noqa: S311 - simulated measurement noise
    current, taken = start, []
    worst_all: dict[int, float] = {}
    worst_grid: dict[int, float] = {}
    for i in range(1, samples + 1):
        if i > 1:
            current = choose(prof, JOB, current, top)
        taken.append(current)
        prof.record(JOB, current, truth(current) * max(1e-6, 1.0 + rng.gauss(0.0, noise)))
        if i in checkpoints:
            estimate = prof.curve(JOB, top)
            worst_all[i] = worst_error(estimate, truth, range(1, top + 1))
            worst_grid[i] = worst_error(estimate, truth, grid)
    return ProfilingRun(worst_all, worst_grid, tuple(taken))
