"""Admission: which registered jobs the allocator considers in one decision.

Every registered job is a candidate; the allocator decides how many run and at which sizes by
giving some of them 0 nodes. Handing it a 1,000-job backlog as 1,000 jobs would make every
decision a MILP with 1,000 jobs' variables, almost all of them for jobs that cannot start,
so the candidates are cut in two ways:

* **exactly**: jobs that hold no node and are interchangeable (same scalability curve, the same
  bounds, weight and rescale costs: the members of one family of an HPO sweep that have not
  started) are the same option to the allocator, and it can start at most
  ``usable_nodes // min_nodes`` of them. Any allocation that starts others can swap them for
  the first ones of their group with the same value, so keeping only those changes no optimum;
* **by the user's limit** ``max_running`` (a concurrency cap, as FreeTrain's ``maxJ``): the jobs
  that run now come first, then waiting ones in the order given (arrival order);
* **by a bound on one decision's work** ``max_waiting``: at most that many waiting jobs are
  offered at once, one of each group in turn. A decision then starts at most that many jobs;
  the next one (an event later, seconds at most) offers the next ones.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

from parsl_malleable.controller.model import JobSpec


def admit(
    jobs: Sequence[JobSpec],
    running: set[str],
    usable_nodes: int,
    group_of: Callable[[JobSpec], Hashable],
    max_running: int | None = None,
    max_waiting: int | None = None,
) -> tuple[list[JobSpec], int]:
    """The jobs the allocator considers, in the order given, and how many were left out.

    ``running`` names the jobs that hold usable nodes (always considered); ``group_of`` gives a
    job's interchangeability key (jobs with equal keys are the same option while they hold
    nothing); ``max_running`` is the user's concurrency limit; ``max_waiting`` bounds the
    waiting jobs offered in one decision, taken one per group in turn so that every kind of job
    is offered (a bound on the solver's work: jobs left out are offered at the next decision).
    """
    room = max_running if max_running is not None else len(jobs)
    room -= sum(1 for spec in jobs if spec.name in running)
    per_group: dict[Hashable, int] = {}
    group_rank: dict[Hashable, int] = {}
    offered: list[tuple[int, int, int]] = []  # (turn within its group, group, position)
    for position, spec in enumerate(jobs):
        if spec.name in running:
            continue
        key = group_of(spec)
        turn = per_group.get(key, 0)
        if turn >= usable_nodes // spec.min_nodes:
            continue  # the group already offers as many jobs as could start at once
        per_group[key] = turn + 1
        offered.append((turn, group_rank.setdefault(key, len(group_rank)), position))
    offered.sort()
    limit = room if max_waiting is None else min(room, max_waiting)
    chosen = {position for _, _, position in offered[: max(0, limit)]}
    kept = [spec for i, spec in enumerate(jobs) if spec.name in running or i in chosen]
    return kept, len(jobs) - len(kept)


__all__ = ["admit"]
