"""The documented fallback: greedy growth by best marginal objective gain per node.

Rule: every running job keeps its current nodes (a job left below ``min_nodes`` by ended windows
stops; it may start again only on all its nodes plus new ones). While the jobs hold more than
the node cap, the job whose shrink loses the least objective per node of excess removed is
shrunk, to a subset of its nodes (its shortest-lived ones go first; below ``min_nodes`` it
stops); a shrunk job takes no new nodes (that would be a migration). Then, repeatedly, each
other job proposes one step (start at ``min_nodes``; grow by one node; or grow to its next curve
breakpoint) using the free nodes with the longest windows first, and the step with the best
gain in objective per node is taken, while any gain is positive, nodes are left and the node
cap allows.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence

from parsl_malleable.allocate.evaluate import job_score
from parsl_malleable.allocate.horizon import HorizonClasses
from parsl_malleable.allocate.settings import PauseRate
from parsl_malleable.allocate.spec import TrainingJob

Score = Callable[[TrainingJob, list[int]], float]


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


def _drop(per_class: list[int], k: int) -> list[int]:
    """``per_class`` less ``k`` nodes, the shortest-lived (lowest classes) first."""
    out = list(per_class)
    for b in range(len(out)):
        use = min(k, out[b])
        out[b] -= use
        k -= use
    return out


def _shrink_targets(job: TrainingJob, n: int, excess: int, points: list[int]) -> list[int]:
    """Sizes below ``n`` worth trying: stop, the size that just meets the cap, breakpoints.

    The curve is linear between breakpoints (``points``, all ``>= min_nodes``), so sizes in
    between lose value at the rate of their interval: the interval's end, or the size that
    removes the excess, is the best place to stop.
    """
    targets = [0, *(p for p in points if p < n)]
    if n - excess >= job.min_nodes and n - excess not in targets:
        targets.append(n - excess)
    return targets


def _shrink_to_cap(
    jobs: Sequence[TrainingJob], counts: dict[str, list[int]], cap: int, score: Score
) -> set[str]:
    """Shrink jobs in place until at most ``cap`` nodes are used; the names of those shrunk.

    Each round takes the shrink that loses the least score per node of excess it removes:
    nodes dropped beyond the excess do not help meet the cap, so they count only as loss (the
    growth that follows may give them to another job). A job's losses are kept until it
    changes: only the excess changes between rounds.
    """
    shrunk: set[str] = set()
    used = sum(sum(row) for row in counts.values())
    points = {
        job.name: [p for p, _ in job.curve.breakpoints(job.min_nodes, job.max_nodes)]
        for job in jobs
    }
    scores: dict[str, float] = {}
    losses: dict[str, dict[int, tuple[float, list[int]]]] = {}

    def option(job: TrainingJob, target: int) -> tuple[float, list[int]]:
        """Score lost by shrinking ``job`` to ``target`` nodes, and its counts then."""
        table = losses.setdefault(job.name, {})
        if target not in table:
            now = counts[job.name]
            if job.name not in scores:
                scores[job.name] = score(job, now)
            after = _drop(now, sum(now) - target)
            table[target] = (scores[job.name] - score(job, after), after)
        return table[target]

    while used > cap:
        excess = used - cap
        best: tuple[tuple[float, int], str, list[int]] | None = None
        for job in jobs:
            n = sum(counts[job.name])
            if n == 0:
                continue
            for target in _shrink_targets(job, n, excess, points[job.name]):
                loss, after = option(job, target)
                # Ties: drop fewer nodes (the rest may still be useful where they are).
                key = (loss / min(n - target, excess), n - target)
                if best is None or key < best[0]:
                    best = (key, job.name, after)
        assert best is not None  # used > cap >= 0, so some job holds nodes
        (_, dropped), name, after = best
        counts[name] = after
        losses.pop(name, None)
        scores.pop(name, None)
        used -= dropped
        shrunk.add(name)
    return shrunk


def _keep_current(
    jobs: Sequence[TrainingJob], classes: HorizonClasses
) -> tuple[dict[str, list[int]], dict[str, list[int]], list[int]]:
    """Counts where every job keeps its nodes, those of jobs left below ``min_nodes`` (which
    stop), and the free nodes per class (theirs included)."""
    counts: dict[str, list[int]] = {}
    stopped: dict[str, list[int]] = {}
    pool = [len(f) for f in classes.free]
    for job in jobs:
        held = [len(h) for h in classes.held[job.name]]
        if sum(held) >= job.min_nodes:
            counts[job.name] = held
        else:
            counts[job.name] = [0] * len(held)
            pool = [p + h for p, h in zip(pool, held, strict=True)]
            if sum(held):
                stopped[job.name] = held
    return counts, stopped, pool


def greedy_counts(
    jobs: Sequence[TrainingJob],
    classes: HorizonClasses,
    *,
    objective: str = "throughput",
    node_cap: int | None = None,
    charge_start: bool = True,
    shrink_pauses: bool = True,
    pause_rate: PauseRate = "before",
) -> dict[str, list[int]]:
    """Counts per job and class chosen by the greedy rule (see module docstring).

    The total never exceeds ``node_cap`` and no job migrates (each keeps a subset of its usable
    nodes, or all of them and adds free ones).
    """
    counts, stopped, pool = _keep_current(jobs, classes)
    # A "+1" score for maxmin would hide fairness; scoring each job alone keeps the rule simple.
    rule = "throughput" if objective == "maxmin" else objective

    def score(job: TrainingJob, per_class: list[int]) -> float:
        return job_score(
            job,
            per_class,
            classes,
            rule,
            charge_start=charge_start,
            shrink_pauses=shrink_pauses,
            pause_rate=pause_rate,
        )

    frozen: set[str] = set()
    if node_cap is not None:
        before = {name: list(row) for name, row in counts.items()}
        frozen = _shrink_to_cap(jobs, counts, node_cap, score)
        for name in frozen:
            pool = [p + b - a for p, b, a in zip(pool, before[name], counts[name], strict=True)]
    _grow(jobs, counts, stopped, frozen, pool, node_cap, score)
    return counts


def _grow(
    jobs: Sequence[TrainingJob],
    counts: dict[str, list[int]],
    stopped: dict[str, list[int]],
    frozen: set[str],
    pool: list[int],
    node_cap: int | None,
    score: Score,
) -> None:
    """Grow jobs in place by best gain per node while it is positive (module docstring)."""
    pool_left = list(pool)
    used = sum(sum(c) for c in counts.values())
    cap = node_cap if node_cap is not None else float("inf")

    def best_step(job: TrainingJob) -> tuple[float, list[int]] | None:
        now = counts[job.name]
        n = sum(now)
        # A job stopped with some usable nodes may start again only on all of them (plus new
        # ones): starting elsewhere would migrate it. Its nodes are in the pool meanwhile.
        keep = stopped.get(job.name) if n == 0 else None
        base_row = keep if keep is not None else now
        avail = pool_left
        if keep is not None:
            if any(k > p for k, p in zip(keep, pool_left, strict=True)):
                return None  # another job took some of its nodes
            avail = [p - k for p, k in zip(pool_left, keep, strict=True)]
        targets = {job.min_nodes} if n == 0 else {n + 1}
        targets |= {p for p, _ in job.curve.breakpoints(job.min_nodes, job.max_nodes) if p > n}
        base = score(job, now)
        best: tuple[float, list[int]] | None = None
        for target in sorted(targets):
            extra = target - sum(base_row)
            if target > job.max_nodes or target - n > cap - used or extra < 0:
                continue
            after = _take(base_row, avail, extra)
            if after is None:
                continue
            gain = (score(job, after) - base) / (target - n)
            if gain > 0 and (best is None or gain > best[0]):
                best = (gain, after)
        return best

    by_name = {job.name: job for job in jobs}
    heap = []
    for job in jobs:
        step = None if job.name in frozen else best_step(job)
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
        pool_left[:] = [p - (a - c) for p, a, c in zip(pool_left, after, before, strict=True)]
        used += sum(after) - sum(before)
        counts[name] = after
        nxt = best_step(by_name[name])
        if nxt is not None:
            heapq.heappush(heap, (-nxt[0], name))
