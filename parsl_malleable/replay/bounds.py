"""What the idle nodes allow: bounds on the samples any policy can train on a timeline.

Two bounds, both computed from the replay's inputs alone (no policy runs):

* **upper bound**: idle node-seconds x the best per-node rate of the workload (the largest
  ``curve(n) / n`` over its jobs and sizes). No policy can do better: a node-second trains at
  most that many samples, whoever holds it.
* **offline bound**: perfect knowledge and the least rescaling the replay's physics allows.
  A node trains nothing in the first ``scale_up_s`` of any use (a job that starts or grows
  onto it pauses that long, and the node cannot train before it joins), so each idle interval
  is first shortened by the workload's smallest ``scale_up_s``; no other pause is charged.
  Then, at every instant ``t``, the nodes idle then (``N(t)``) are shared among the jobs
  submitted by ``t`` to maximise the summed rate, with each job's curve replaced by its upper
  concave envelope through ``(0, 0)`` and fractional node counts allowed: the LP relaxation of
  one allocation with no other pause and no prediction error. For concave pieces the greedy
  rule (take the best marginal rate per node until ``N(t)`` nodes are used) solves that LP
  exactly, so ``F_t(N)`` is a prefix sum of the jobs' sorted marginal rates, and the bound is
  the integral of ``F_t(N(t))``. It is at most the upper bound, and for a large backlog of
  identical jobs that scale best at one node it is the upper bound less one start pause per
  interval. It ignores each job's sample total unless the workload is finite, where it is
  capped at the samples the jobs ask for.

Both are bounds, not targets: the replay charges a pause at every rescale of a running job
(``scale_up_s`` / ``scale_down_s``, for all its nodes) and a policy must predict how long each
node stays idle, which neither bound does.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from parsl_malleable.allocate.curve import ScalingCurve
from parsl_malleable.replay.idle import IdleTimeline
from parsl_malleable.replay.workload import ReplayJob


@dataclass(frozen=True)
class Bounds:
    """Samples the idle nodes allow between ``t0`` and ``t1`` (see the module docstring)."""

    t0: float
    t1: float
    idle_node_seconds: float
    best_node_rate: float
    upper: float
    offline: float


def best_node_rate(jobs: Sequence[ReplayJob]) -> float:
    """The largest samples/s per node any job reaches at any size it may run at."""
    best = 0.0
    for job in jobs:
        for n, rate in job.curve.breakpoints(job.min_nodes, job.max_nodes):
            if n > 0:
                best = max(best, rate / n)
    return best


def concave_marginals(curve: ScalingCurve, min_nodes: int, max_nodes: int) -> list[float]:
    """Per-node marginal rates of the upper concave envelope of ``curve`` on
    ``{0} U [min_nodes, max_nodes]``, one value per node, non-increasing.

    The envelope lies on or above every size the job may run at, so sharing nodes by these
    marginals never gives less than the best integer allocation.
    """
    points = [(0, 0.0), *curve.breakpoints(min_nodes, max_nodes)]
    hull: list[tuple[int, float]] = []
    for p in points:
        # Upper hull (Andrew's monotone chain, upper half): drop points below the chord.
        while len(hull) >= 2:
            (x1, y1), (x2, y2) = hull[-2], hull[-1]
            if (x2 - x1) * (p[1] - y1) - (y2 - y1) * (p[0] - x1) >= 0:
                hull.pop()
            else:
                break
        hull.append(p)
    marginals: list[float] = []
    for (x1, y1), (x2, y2) in itertools.pairwise(hull):
        slope = max(0.0, (y2 - y1) / (x2 - x1))
        marginals.extend([slope] * (x2 - x1))
    return marginals


def _idle_count_steps(timeline: IdleTimeline, lead_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Times where the number of nodes past the first ``lead_s`` of their idle interval
    changes, and the count after each."""
    start = timeline.start + lead_s
    keep = start < timeline.end
    start, end = start[keep], timeline.end[keep]
    times = np.r_[start, end]
    steps = np.r_[np.ones(len(start)), -np.ones(len(end))]
    order = np.argsort(times, kind="stable")
    return times[order], np.cumsum(steps[order])


def offline_bound(timeline: IdleTimeline, jobs: Sequence[ReplayJob], t1: float) -> float:
    """The offline bound (module docstring) over ``[timeline.t0, t1]``."""
    lead = min((job.scale_up_s for job in jobs), default=0.0)
    times, counts = _idle_count_steps(timeline, lead)
    submits = sorted(jobs, key=lambda j: j.submit)
    marginal_cache: dict[tuple[tuple[int, ...], tuple[float, ...], int, int], list[float]] = {}
    # Events: each job's submit adds its marginals to the pool; between events the idle count
    # is piecewise constant and F(N) a prefix sum of the pool sorted from best to worst.
    edges = np.unique(np.r_[times, [j.submit for j in submits], timeline.t0, t1])
    edges = edges[(edges >= timeline.t0) & (edges <= t1)]
    total = 0.0
    pool: list[float] = []
    prefix = np.zeros(1)
    added = 0
    for a, b in itertools.pairwise(edges):
        changed = False
        while added < len(submits) and submits[added].submit <= a:
            job = submits[added]
            key = (job.curve.nodes, job.curve.throughput, job.min_nodes, job.max_nodes)
            if key not in marginal_cache:
                marginal_cache[key] = concave_marginals(job.curve, job.min_nodes, job.max_nodes)
            pool.extend(marginal_cache[key])
            added += 1
            changed = True
        if changed:
            prefix = np.r_[0.0, np.cumsum(np.sort(pool)[::-1])]
        i = int(np.searchsorted(times, a, side="right")) - 1
        idle = int(counts[i]) if i >= 0 else 0
        total += float(prefix[min(idle, len(prefix) - 1)]) * float(b - a)
    demand = sum(job.samples for job in jobs)
    return min(total, demand) if math.isfinite(demand) else total


def replay_bounds(timeline: IdleTimeline, jobs: Sequence[ReplayJob], t1: float) -> Bounds:
    """Both bounds over ``[timeline.t0, t1]`` (``t1``: when the replay ended)."""
    idle = timeline.window(timeline.t0, t1).idle_node_seconds()
    rate = best_node_rate(jobs)
    upper = idle * rate
    return Bounds(timeline.t0, t1, idle, rate, upper, min(upper, offline_bound(timeline, jobs, t1)))


__all__ = ["Bounds", "best_node_rate", "concave_marginals", "offline_bound", "replay_bounds"]
