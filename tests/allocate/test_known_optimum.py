"""Instances whose optimum is known by hand, on every solver."""

from __future__ import annotations

import pytest

from parsl_malleable.allocate import Allocation, NodeWindow
from parsl_malleable.allocate import allocate as allocate_now

from .helpers import AT_LEISURE_S, assert_valid, linear_job, table_job

SOLVERS = ["cbc", "highs"]


def allocate(*args, **kwargs) -> Allocation:
    """The allocator given the time to reach a known optimum, whatever the machine's load."""
    return allocate_now(*args, **{"time_limit": AT_LEISURE_S, **kwargs})


def nodes(k: int, prefix: str = "f") -> list[str]:
    return [f"{prefix}{i}" for i in range(k)]


@pytest.mark.parametrize("solver", SOLVERS)
def test_fast_job_filled_first(solver):
    jobs = [linear_job("fast", 100.0, hi=3), linear_job("slow", 10.0, hi=3)]
    free = nodes(5)
    alloc = allocate(jobs, free, solver=solver, gap_rel=0)
    assert alloc.nodes == {"fast": 3, "slow": 2}
    assert alloc.objective == pytest.approx(320.0)
    assert alloc.status == "optimal" and not alloc.fallback
    assert_valid(alloc, jobs, free)


@pytest.mark.parametrize("solver", SOLVERS)
def test_min_nodes_not_reachable_gives_zero(solver):
    jobs = [linear_job("big", 100.0, lo=4, hi=8), linear_job("small", 1.0, hi=2)]
    alloc = allocate(jobs, nodes(3), solver=solver, gap_rel=0)
    assert alloc.nodes == {"big": 0, "small": 2}


@pytest.mark.parametrize("solver", SOLVERS)
def test_node_cap(solver):
    jobs = [linear_job("a", 100.0, hi=4), linear_job("b", 50.0, hi=4)]
    alloc = allocate(jobs, nodes(8), solver=solver, node_cap=5, gap_rel=0)
    assert alloc.nodes == {"a": 4, "b": 1}
    assert_valid(alloc, jobs, nodes(8), node_cap=5)


@pytest.mark.parametrize("solver", SOLVERS)
def test_objectives_pick_different_optima(solver):
    a = table_job("a", {1: 1000.0, 2: 1500.0})
    b = table_job("b", {1: 100.0, 2: 190.0})
    got = {
        obj: allocate([a, b], nodes(2), solver=solver, objective=obj, gap_rel=0).nodes
        for obj in ("throughput", "speedup")
    }
    assert got["throughput"] == {"a": 2, "b": 0}  # 1500 > 1100 > 190
    assert got["speedup"] == {"a": 1, "b": 1}  # 1 + 1 > 1.9 > 1.5
    heavy_b = table_job("b", {1: 100.0, 2: 190.0}, weight=20.0)
    weighted = allocate([a, heavy_b], nodes(2), solver=solver, objective="weighted", gap_rel=0)
    assert weighted.nodes == {"a": 0, "b": 2}  # 3800 > 3000 > 1500


@pytest.mark.parametrize("solver", SOLVERS)
def test_maxmin_balances_speedup(solver):
    # Throughput alone would give all 6 nodes' worth to the fast job.
    jobs = [linear_job("fast", 1000.0, hi=6), linear_job("slow", 10.0, hi=6)]
    alloc = allocate(jobs, nodes(6), solver=solver, objective="maxmin", gap_rel=0)
    assert alloc.nodes == {"fast": 3, "slow": 3}
    tput = allocate(jobs, nodes(6), solver=solver, objective="throughput", gap_rel=0)
    assert tput.nodes == {"fast": 6, "slow": 0}


@pytest.mark.parametrize("solver", SOLVERS)
def test_short_window_not_worth_scale_up(solver):
    # A job on 4 nodes (400 samples/s) pauses 18 s to grow and 11 s when the node leaves.
    job = linear_job("j", 100.0, hi=8, up=18.0, down=11.0, current=("h0", "h1", "h2", "h3"))
    long_windows = [NodeWindow(("h0", "h1", "h2", "h3"), 3600.0)]
    # FreeTrain's model: each pause costs the rate before the rescale.
    before = {"solver": solver, "gap_rel": 0, "pause_rate": "before"}
    short = allocate([job], ["f0"], [*long_windows, NodeWindow(("f0",), 120.0)], **before)
    # The pauses cost (18 + 11) s x 400/s = 11,600 samples. A 120 s node brings 12,000
    # (worth it, barely); a 100 s node brings 10,000 (not worth it).
    shorter = allocate([job], ["f0"], [*long_windows, NodeWindow(("f0",), 100.0)], **before)
    longer = allocate([job], ["f0"], [*long_windows, NodeWindow(("f0",), 1800.0)], **before)
    assert short.nodes["j"] == 5
    assert shorter.nodes["j"] == 4 and shorter.added["j"] == ()
    assert longer.nodes["j"] == 5 and longer.added["j"] == ("f0",)


@pytest.mark.parametrize("solver", SOLVERS)
def test_start_cost_keeps_job_off_short_windows(solver):
    job = linear_job("j", 100.0, hi=2, up=60.0)
    windows = [NodeWindow(("f0", "f1"), 50.0)]
    assert allocate([job], ["f0", "f1"], windows, solver=solver).nodes["j"] == 0
    assert allocate([job], ["f0", "f1"], windows, solver=solver, charge_start=False).nodes["j"] == 2


@pytest.mark.parametrize("solver", SOLVERS)
def test_shrink_keeps_a_subset(solver):
    # "a" holds 4 nodes; "b" is ten times faster per node: "a" shrinks and "b" takes the rest.
    a = linear_job("a", 10.0, hi=4, current=("h0", "h1", "h2", "h3"))
    b = linear_job("b", 100.0, hi=3)
    alloc = allocate([a, b], [], solver=solver, gap_rel=0)
    assert alloc.nodes == {"a": 1, "b": 3}
    assert set(alloc.node_ids["a"]) < set(a.current_nodes)
    assert set(alloc.node_ids["b"]) == set(alloc.released["a"])


@pytest.mark.parametrize("solver", [*SOLVERS, "greedy"])
def test_empty_inputs(solver):
    assert allocate([], nodes(3), solver=solver).nodes == {}
    job = linear_job("j", 10.0)
    alloc = allocate([job], [], solver=solver)
    assert alloc.nodes == {"j": 0} and alloc.total_nodes == 0
