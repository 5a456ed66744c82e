"""The demand coupling: the allocator decides how many nodes the training jobs can use."""

from __future__ import annotations

from parsl_malleable.allocate import ScalingCurve, TrainingJob
from parsl_malleable.harvest.blocks_to_submit import harvest_windows
from parsl_malleable.harvest.demand import DemandContext, allocator_demand
from parsl_malleable.harvest.site_profile import SiteProfile
from parsl_malleable.windows.predict import WindowPredictor

from .snapshots import machine, native, queued

PROFILE = SiteProfile(safety_margin_s=60, min_block_s=60, max_nodes_per_block=2)


def _context(node_cap: int) -> DemandContext:
    snap = machine([native("r1", ("n1", "n2"), 3000)], [queued("big", 6, 600)])
    windows = harvest_windows(snap, PROFILE, WindowPredictor(model=None, samples=0))
    return DemandContext(snap, windows, [], 0, node_cap)


def _job(max_nodes: int) -> TrainingJob:
    curve = ScalingCurve.from_points([(1, 10.0), (2, 19.0), (3, 27.0), (4, 34.0)])
    return TrainingJob("resnet", 1, max_nodes, curve, scale_up_cost=30.0, scale_down_cost=10.0)


def test_no_training_job_wants_nothing() -> None:
    assert allocator_demand(lambda: [], solver="greedy")(_context(6)) == 0


def test_the_allocator_sizes_the_demand() -> None:
    ctx = _context(6)
    assert sorted(n for w in ctx.windows for n in w.nodes) == ["n3", "n4", "n5", "n6"]
    assert allocator_demand(lambda: [_job(3)], solver="greedy")(ctx) == 3
    assert allocator_demand(lambda: [_job(4)], solver="greedy")(_context(2)) == 2
    assert allocator_demand(lambda: [_job(4)], solver="cbc", time_limit=5)(ctx) == 4
