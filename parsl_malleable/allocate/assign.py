"""Turn counts per (job, horizon class) into node ids, without migrating any job."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from parsl_malleable.allocate.horizon import HorizonClasses
from parsl_malleable.allocate.spec import TrainingJob


def assign_nodes(
    jobs: Sequence[TrainingJob],
    counts: Mapping[str, Sequence[int]],
    classes: HorizonClasses,
) -> tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]]:
    """Node ids held, added and released per job.

    A job keeps a prefix of its current nodes of a class when it shrinks there and all of them
    when it grows; new nodes come from the class's free nodes and the nodes other jobs release.
    Raises ``ValueError`` if the counts do not fit (a bug in the caller, never user input).
    """
    pools = [list(nodes) for nodes in classes.free]
    kept: dict[str, list[str]] = {}
    released: dict[str, list[str]] = {}
    for job in jobs:
        held = classes.held[job.name]
        kept[job.name] = []
        released[job.name] = list(classes.gone.get(job.name, ()))
        for b, want in enumerate(counts[job.name]):
            mine = held[b]
            kept[job.name].extend(mine[: min(want, len(mine))])
            released[job.name].extend(mine[want:])
            pools[b].extend(mine[want:])
    added: dict[str, list[str]] = {job.name: [] for job in jobs}
    for job in jobs:
        held = classes.held[job.name]
        for b, want in enumerate(counts[job.name]):
            extra = want - len(held[b])
            if extra <= 0:
                continue
            if extra > len(pools[b]):
                raise ValueError(
                    f"class {b}: {extra} nodes wanted by {job.name}, {len(pools[b])} left"
                )
            added[job.name].extend(pools[b][:extra])
            del pools[b][:extra]
    node_ids = {name: (*kept[name], *added[name]) for name in kept}
    return (
        node_ids,
        {k: tuple(v) for k, v in added.items()},
        {k: tuple(v) for k, v in released.items()},
    )
