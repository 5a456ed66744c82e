"""Equal share: every job gets the same number of nodes, whatever its curve says.

The baseline a scheduler without scalability information would use (the ``greedy`` replay
policy). Usable nodes (free and held, up to ``node_cap``) are water-filled: each job gets an
equal share, capped at its ``max_nodes``, and what a capped job leaves goes to the others; the
first jobs in the given order (arrival order) get the remainder of an uneven split. A job whose
share is below its ``min_nodes`` gets none, latest arrivals first, and its share goes back to
the others. Nothing migrates: a job that grows keeps its nodes and adds the longest-lived free
ones; a job that shrinks keeps its longest-lived nodes.
"""

from __future__ import annotations

from collections.abc import Sequence

from parsl_malleable.allocate.horizon import HorizonClasses
from parsl_malleable.allocate.spec import TrainingJob


def equal_targets(jobs: Sequence[TrainingJob], total: int) -> dict[str, int]:
    """Nodes per job when ``total`` nodes are shared equally (see the module docstring)."""
    running = list(jobs)
    while running:
        targets = _water_fill(running, total)
        short = [job for job in running if targets[job.name] < job.min_nodes]
        if not short:
            return {job.name: targets.get(job.name, 0) for job in jobs}
        running.remove(short[-1])
    return {job.name: 0 for job in jobs}


def _water_fill(jobs: Sequence[TrainingJob], total: int) -> dict[str, int]:
    targets: dict[str, int] = {}
    open_jobs = list(jobs)
    left = total
    while open_jobs and left > 0:
        share, extra = divmod(left, len(open_jobs))
        capped = [job for job in open_jobs if job.max_nodes <= share]
        if not capped:
            for k, job in enumerate(open_jobs):
                targets[job.name] = share + (1 if k < extra else 0)
            return targets
        for job in capped:
            targets[job.name] = job.max_nodes
            left -= job.max_nodes
            open_jobs.remove(job)
    for job in open_jobs:
        targets.setdefault(job.name, 0)
    return targets


def equal_counts(
    jobs: Sequence[TrainingJob], classes: HorizonClasses, *, node_cap: int | None = None
) -> dict[str, list[int]]:
    """Counts per job and horizon class for the equal share (see the module docstring)."""
    n_classes = len(classes.ends)
    total = sum(classes.capacity(b) for b in range(n_classes))
    if node_cap is not None:
        total = min(total, node_cap)
    targets = equal_targets(jobs, total)
    pool = [len(nodes) for nodes in classes.free]
    counts: dict[str, list[int]] = {}
    for job in jobs:
        held = [len(h) for h in classes.held[job.name]]
        keep = min(targets[job.name], sum(held))
        row = [0] * n_classes
        for b in range(n_classes - 1, -1, -1):
            row[b] = min(held[b], keep)
            keep -= row[b]
            pool[b] += held[b] - row[b]
        counts[job.name] = row
    for job in jobs:
        row = counts[job.name]
        want = targets[job.name] - sum(row)
        for b in range(n_classes - 1, -1, -1):
            take = min(want, pool[b])
            row[b] += take
            pool[b] -= take
            want -= take
    return counts


__all__ = ["equal_counts", "equal_targets"]
