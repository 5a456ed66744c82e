"""Allocations on FreeTrain workloads and Summit windows: every hard constraint holds.

The solves stop at a node limit, one thread, with a wall-clock limit only as a safety net: a
2 s limit that CBC used to meet alone it missed on a loaded machine, and the test failed.
"""

from __future__ import annotations

import logging

import pulp
import pytest

from parsl_malleable.allocate import AllocationSolverError, allocate, load_workload
from parsl_malleable.allocate.evaluate import objective_value
from parsl_malleable.allocate.horizon import classify
from parsl_malleable.allocate.instances import make_instance, summit_remaining_windows
from parsl_malleable.allocate.solve import WALL_CLOCK_STOP, hit_wall_clock

from .helpers import assert_valid

# Branch-and-bound nodes per solve: a stop that does not depend on the machine's load.
NODE_LIMIT = 10
SAFETY_S = 60.0  # never reached here; a solve it stops would say so in its message


@pytest.fixture(scope="module")
def instance(bftrainer_dir):
    jobs = load_workload(bftrainer_dir, "imagenet-imgps-1001J", limit=12)
    remaining = summit_remaining_windows(
        bftrainer_dir / "summit-idle-intervals-2021-02.csv.gz", 160, seed=3
    )
    return make_instance(jobs, 160, remaining, seed=3)


@pytest.mark.parametrize("solver", ["cbc", "highs", "greedy"])
@pytest.mark.parametrize("objective", ["throughput", "speedup", "maxmin"])
def test_constraints_hold(instance, solver, objective):
    alloc = allocate(
        instance.jobs,
        instance.free_nodes,
        instance.windows,
        solver=solver,
        objective=objective,
        time_limit=SAFETY_S,
        mip_node_limit=NODE_LIMIT,
        threads=1,
        node_cap=120,
    )
    assert_valid(alloc, instance.jobs, instance.free_nodes, node_cap=120)
    assert alloc.solver == solver and not alloc.fallback, alloc.message
    assert not hit_wall_clock(alloc.message)
    # Only nodes with a window left are given out.
    for ids in alloc.node_ids.values():
        assert all(alloc.node_window[node] > 0 for node in ids)
        assert not set(ids) & set(alloc.expired)


@pytest.mark.parametrize("pause_rate", ["before", "after"])
def test_solver_objective_matches_direct_evaluation(instance, pause_rate):
    alloc = allocate(
        instance.jobs,
        instance.free_nodes,
        instance.windows,
        solver="highs",
        time_limit=20,
        pause_rate=pause_rate,
    )
    classes = classify(
        instance.jobs,
        instance.free_nodes,
        instance.windows,
        default_window_s=3600.0,
        max_horizon_s=3600.0,
        max_classes=4,
    )
    per_class = {
        job.name: [sum(1 for n in alloc.node_ids[job.name] if n in set(c)) for c in held_all]
        for job in instance.jobs
        for held_all in [
            [
                (*classes.free[b], *(n for h in classes.held.values() for n in h[b]))
                for b in range(len(classes.ends))
            ]
        ]
    }
    direct = objective_value(instance.jobs, per_class, classes, "throughput", pause_rate=pause_rate)
    assert alloc.objective == pytest.approx(direct, rel=1e-6)
    greedy = allocate(
        instance.jobs, instance.free_nodes, instance.windows, solver="greedy", pause_rate=pause_rate
    )
    assert greedy.objective <= alloc.objective * (1 + 1e-9)


def test_broken_solver_falls_back_to_greedy(instance, caplog):
    broken = pulp.COIN_CMD(path="/nonexistent/cbc", msg=False)
    with caplog.at_level(logging.WARNING, logger="parsl_malleable.allocate.api"):
        alloc = allocate(instance.jobs, instance.free_nodes, instance.windows, solver=broken)
    assert alloc.fallback and alloc.solver == "greedy" and alloc.status == "failed"
    assert "greedy" in caplog.text
    assert_valid(alloc, instance.jobs, instance.free_nodes)
    with pytest.raises(AllocationSolverError, match="COIN_CMD"):
        allocate(
            instance.jobs, instance.free_nodes, instance.windows, solver=broken, fallback=False
        )


def test_time_limit_keeps_incumbent_or_falls_back(instance):
    alloc = allocate(
        instance.jobs, instance.free_nodes, instance.windows, solver="cbc", time_limit=0.05
    )
    assert alloc.status in {"optimal", "feasible", "failed"}
    assert alloc.fallback == (alloc.status == "failed")
    assert_valid(alloc, instance.jobs, instance.free_nodes)


@pytest.mark.parametrize("solver", ["cbc", "highs"])
def test_a_stop_at_the_node_limit_keeps_its_incumbent_and_repeats(instance, solver):
    # No gap accepted: only the node limit (one node, the root) can stop the solve.
    options = {
        "solver": solver,
        "gap_rel": 0.0,
        "mip_node_limit": 1,
        "threads": 1,
        "time_limit": SAFETY_S,
    }
    alloc = allocate(instance.jobs, instance.free_nodes, instance.windows, **options)
    greedy = allocate(instance.jobs, instance.free_nodes, instance.windows, solver="greedy")
    assert alloc.status == "feasible" and "node limit (1)" in alloc.message, alloc.message
    assert alloc.solver == solver and not alloc.fallback
    assert not hit_wall_clock(alloc.message)
    assert alloc.objective > greedy.objective * 1.1
    assert_valid(alloc, instance.jobs, instance.free_nodes)
    again = allocate(instance.jobs, instance.free_nodes, instance.windows, **options)
    assert again.node_ids == alloc.node_ids and again.objective == alloc.objective


def test_a_solve_the_clock_stops_despite_a_node_limit_says_so(instance, caplog):
    with caplog.at_level(logging.WARNING, logger="parsl_malleable.allocate.api"):
        alloc = allocate(
            instance.jobs,
            instance.free_nodes,
            instance.windows,
            time_limit=1e-6,
            mip_node_limit=NODE_LIMIT,
        )
    assert hit_wall_clock(alloc.message) and WALL_CLOCK_STOP in alloc.message
    assert "depends on the machine's speed" in caplog.text
    # The greedy start was the incumbent when the clock stopped the solve: no fallback.
    assert alloc.status == "feasible" and not alloc.fallback
    assert_valid(alloc, instance.jobs, instance.free_nodes)
