"""The documented fallback: greedy growth by best marginal objective gain per node.

Rule: every running job keeps its current nodes (a job left below ``min_nodes`` by ended windows
stops). Then, repeatedly, each job proposes one step (start at ``min_nodes``; grow by one node;
or grow to its next curve breakpoint) using the free nodes with the longest windows first, and
the step with the best gain in objective per node is taken, while any gain is positive, nodes
are left and the node cap allows. It never shrinks a job.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from parsl_malleable.allocate.evaluate import job_score
from parsl_malleable.allocate.horizon import HorizonClasses
from parsl_malleable.allocate.spec import TrainingJob


def _take(per_class: list[int], pool: list[int], k: int) -> list[int] | None:
    """``per_class`` plus ``k`` nodes from the longest classes with nodes left."""
    out = list(per_class)
    for b in range(len(pool) - 1, -1, -1):
        use = min(k, pool[b] - (out[b] - per_class[b]))
        if use > 0:
            out[b] += use
            k -= use
        if k == 0:
            return out
    return None


def greedy_counts(
    jobs: Sequence[TrainingJob],
    classes: HorizonClasses,
    *,
    objective: str = "throughput",
    node_cap: int | None = None,
    charge_start: bool = True,
    shrink_pauses: bool = True,
) -> dict[str, list[int]]:
    """Counts per job and class chosen by the greedy rule (see module docstring)."""
    counts: dict[str, list[int]] = {}
    pool = [len(f) for f in classes.free]
    for job in jobs:
        held = [len(h) for h in classes.held[job.name]]
        if sum(held) >= job.min_nodes:
            counts[job.name] = held
        else:
            counts[job.name] = [0] * len(held)
            pool = [p + h for p, h in zip(pool, held, strict=True)]
    pool_left = list(pool)
    used = sum(sum(c) for c in counts.values())
    cap = node_cap if node_cap is not None else float("inf")
    # A "+1" score for maxmin would hide fairness; scoring each job alone keeps the rule simple.
    rule = "throughput" if objective == "maxmin" else objective

    def score(job: TrainingJob, per_class: list[int]) -> float:
        return job_score(
            job, per_class, classes, rule, charge_start=charge_start, shrink_pauses=shrink_pauses
        )

    def best_step(job: TrainingJob) -> tuple[float, list[int]] | None:
        now = counts[job.name]
        n = sum(now)
        targets = {job.min_nodes} if n == 0 else {n + 1}
        targets |= {p for p, _ in job.curve.breakpoints(job.min_nodes, job.max_nodes) if p > n}
        base = score(job, now)
        best: tuple[float, list[int]] | None = None
        for target in sorted(targets):
            if target > job.max_nodes or target - n > cap - used:
                continue
            after = _take(now, pool_left, target - n)
            if after is None:
                continue
            gain = (score(job, after) - base) / (target - n)
            if gain > 0 and (best is None or gain > best[0]):
                best = (gain, after)
        return best

    by_name = {job.name: job for job in jobs}
    heap = []
    for job in jobs:
        step = best_step(job)
        if step is not None:
            heap.append((-step[0], job.name))
    heapq.heapify(heap)
    while heap and used < cap and sum(pool_left) > 0:
        _, name = heapq.heappop(heap)
        step = best_step(by_name[name])
        if step is None:
            continue
        if heap and step[0] < -heap[0][0]:
            heapq.heappush(heap, (-step[0], name))
            continue
        _gain, after = step
        before = counts[name]
        pool_left = [p - (a - c) for p, a, c in zip(pool_left, after, before, strict=True)]
        used += sum(after) - sum(before)
        counts[name] = after
        nxt = best_step(by_name[name])
        if nxt is not None:
            heapq.heappush(heap, (-nxt[0], name))
    return counts
