"""Small hand-made jobs and a checker of the allocator's hard constraints."""

from __future__ import annotations

from collections.abc import Sequence

from parsl_malleable.allocate import Allocation, ScalingCurve, TrainingJob
from parsl_malleable.allocate.horizon import HorizonClasses, classify
from parsl_malleable.allocate.instances import Instance

# The allocator's 0.5 s default is the controller's; a test that asserts "optimal" on a tiny
# model gives the solver time a loaded 2-core machine may need just to start CBC.
AT_LEISURE_S = 30.0


def linear_job(
    name: str,
    per_node: float,
    *,
    lo: int = 1,
    hi: int = 4,
    up: float = 0.0,
    down: float = 0.0,
    weight: float = 1.0,
    current: tuple[str, ...] = (),
) -> TrainingJob:
    curve = ScalingCurve(tuple(range(1, hi + 1)), tuple(per_node * n for n in range(1, hi + 1)))
    return TrainingJob(name, lo, hi, curve, up, down, weight, current)


def table_job(name: str, rates: dict[int, float], **kw) -> TrainingJob:
    curve = ScalingCurve.from_points(list(rates.items()))
    lo, hi = kw.pop("lo", 1), kw.pop("hi", max(rates))
    return TrainingJob(name, lo, hi, curve, kw.pop("up", 0.0), kw.pop("down", 0.0), **kw)


def assert_valid(
    alloc: Allocation,
    jobs: Sequence[TrainingJob],
    free_nodes: Sequence[str],
    node_cap: int | None = None,
) -> None:
    """min/max, no migration, no node used twice, only known nodes, node cap."""
    known = set(free_nodes) | {n for job in jobs for n in job.current_nodes}
    seen: set[str] = set()
    for job in jobs:
        ids = alloc.node_ids[job.name]
        assert alloc.nodes[job.name] == len(ids)
        assert len(ids) == 0 or job.min_nodes <= len(ids) <= job.max_nodes, job.name
        current = set(job.current_nodes) - set(alloc.expired)
        assert current <= set(ids) or set(ids) <= current, f"{job.name} migrated"
        assert set(alloc.added[job.name]) == set(ids) - current
        lost = set(job.current_nodes) & set(alloc.expired)
        assert set(alloc.released[job.name]) == (current - set(ids)) | lost
        assert not seen & set(ids), "a node is given to two jobs"
        seen |= set(ids)
    assert seen <= known
    if node_cap is not None:
        assert len(seen) <= node_cap


def instance_classes(instance: Instance, max_classes: int = 4) -> HorizonClasses:
    """The horizon classes ``allocate`` builds for ``instance`` with its default windows."""
    return classify(
        instance.jobs,
        instance.free_nodes,
        instance.windows,
        default_window_s=3600.0,
        max_horizon_s=3600.0,
        max_classes=max_classes,
    )
