"""Allocations on FreeTrain workloads and Summit windows: every hard constraint holds."""

from __future__ import annotations

import logging

import pulp
import pytest

from parsl_malleable.allocate import AllocationSolverError, allocate, load_workload
from parsl_malleable.allocate.evaluate import objective_value
from parsl_malleable.allocate.horizon import classify
from parsl_malleable.allocate.instances import make_instance, summit_remaining_windows

from .helpers import assert_valid


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
        time_limit=2,
        node_cap=120,
    )
    assert_valid(alloc, instance.jobs, instance.free_nodes, node_cap=120)
    assert alloc.solver == solver and not alloc.fallback
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
