"""The greedy MIP start reaches HiGHS and CBC: a solve stopped early is never worse than greedy.

The start used to set only the count, run and grow/shrink variables; HiGHS then spent its time
limit completing it with a sub-MIP and, at replay limits (0.02-0.1 s), returned an incumbent
far below the greedy one, so ``allocate`` fell back. The start is now every variable's value.
"""

from __future__ import annotations

import math
import re

import pulp
import pytest

from parsl_malleable.allocate import allocate, load_workload
from parsl_malleable.allocate.count_model import build_count_model
from parsl_malleable.allocate.evaluate import objective_value
from parsl_malleable.allocate.greedy import greedy_counts
from parsl_malleable.allocate.instances import Instance, make_instance, summit_remaining_windows
from parsl_malleable.allocate.solve import make_solver, start_violation

from .helpers import instance_classes

TOL = 1e-7  # HiGHS's and CBC's primal feasibility tolerance


@pytest.fixture(scope="module", params=[(40, 300, 1), (20, 100, 0), (80, 300, 2)])
def instance(request, bftrainer_dir) -> Instance:
    """Dozens of jobs and a few hundred nodes, about half held, Summit windows."""
    n_jobs, n_nodes, seed = request.param
    jobs = load_workload(bftrainer_dir, "imagenet-imgps-1001J", limit=n_jobs)
    trace = bftrainer_dir / "summit-idle-intervals-2021-02.csv.gz"
    remaining = summit_remaining_windows(trace, n_nodes, seed=seed)
    return make_instance(jobs, n_nodes, remaining, seed=seed)


@pytest.mark.parametrize("objective", ["throughput", "weighted", "speedup", "maxmin"])
@pytest.mark.parametrize(
    ("charge_start", "shrink_pauses", "pause_rate"),
    [(True, True, "before"), (False, False, "before"), (True, True, "after")],
)
@pytest.mark.parametrize("node_cap", [None, 60])
def test_start_is_a_complete_feasible_point_worth_the_greedy_value(
    instance, objective, charge_start, shrink_pauses, pause_rate, node_cap
) -> None:
    classes = instance_classes(instance)
    options = {
        "charge_start": charge_start,
        "shrink_pauses": shrink_pauses,
        "pause_rate": pause_rate,
    }
    model = build_count_model(
        instance.jobs, classes, objective=objective, node_cap=node_cap, **options
    )
    greedy = greedy_counts(
        instance.jobs, classes, objective=objective, node_cap=node_cap, **options
    )
    start = model.start_values(greedy)
    problem = model.problem
    assert set(problem.variables()) <= set(start), "some variables have no start value"
    for var in problem.variables():
        value = start[var]
        assert var.lowBound is None or value >= var.lowBound - TOL, var.name
        assert var.upBound is None or value <= var.upBound + TOL, var.name
        if var.cat == pulp.LpInteger:
            assert value == round(value), var.name
    assert start_violation(problem, start) == ""
    worth = problem.objective.constant + sum(c * start[v] for v, c in problem.objective.items())
    expected = objective_value(instance.jobs, greedy, classes, objective, **options)
    assert math.isclose(worth, expected, rel_tol=1e-9, abs_tol=1e-9)


def test_highs_stopped_at_the_root_keeps_the_start(instance) -> None:
    """With no branching node allowed and no time for a sub-MIP, HiGHS's incumbent is the start."""
    classes = instance_classes(instance)
    model = build_count_model(instance.jobs, classes)
    greedy = greedy_counts(instance.jobs, classes)
    greedy_value = objective_value(instance.jobs, greedy, classes, "throughput")
    start = model.start_values(greedy)
    solver = make_solver("highs", time_limit=60.0, gap_rel=1e-4, start=start)
    # No search at all: neither branching nor completing a partial start may find anything.
    solver.optionsDict.update(
        mip_max_nodes=0, mip_max_start_nodes=0, mip_heuristic_effort=0.0, presolve="off"
    )
    model.problem.solve(solver)
    assert model.problem.sol_status in (pulp.LpSolutionIntegerFeasible, pulp.LpSolutionOptimal)
    value = pulp.value(model.problem.objective)
    assert value >= greedy_value - 1e-6 * abs(greedy_value)


@pytest.mark.parametrize("time_limit", [0.02, 0.05])
def test_highs_at_a_replay_time_limit_is_at_least_greedy(instance, time_limit) -> None:
    kwargs = {"time_limit": time_limit, "gap_rel": 1e-2}
    greedy = allocate(instance.jobs, instance.free_nodes, instance.windows, solver="greedy")
    alloc = allocate(instance.jobs, instance.free_nodes, instance.windows, **kwargs)
    assert not alloc.fallback and alloc.solver == "highs", alloc.message
    assert alloc.objective >= greedy.objective * (1 - 1e-6)


def test_cbc_reads_the_whole_start_and_finds_it_worth_the_greedy_value(instance, tmp_path) -> None:
    """CBC's log says what it made of the start file pulp writes (``-mips``)."""
    classes = instance_classes(instance)
    model = build_count_model(instance.jobs, classes)
    greedy = greedy_counts(instance.jobs, classes)
    greedy_value = objective_value(instance.jobs, greedy, classes, "throughput")
    solver = make_solver("cbc", time_limit=60.0, gap_rel=1e-4, start=model.start_values(greedy))
    log = tmp_path / "cbc.log"
    solver.optionsDict.update(logPath=str(log), maxNodes=1)  # the start, not the search
    model.problem.solve(solver)
    text = log.read_text()
    found = re.search(r"MIPStart provided solution with cost (\S+)", text)
    assert found, [line for line in text.splitlines() if "mipstart" in line.lower()]
    assert math.isclose(float(found.group(1)), greedy_value, rel_tol=1e-6)
    assert pulp.value(model.problem.objective) >= greedy_value * (1 - 1e-6)


def test_cbc_at_a_short_time_limit_is_at_least_greedy(instance) -> None:
    greedy = allocate(instance.jobs, instance.free_nodes, instance.windows, solver="greedy")
    alloc = allocate(
        instance.jobs, instance.free_nodes, instance.windows, solver="cbc", time_limit=1.0
    )
    assert not alloc.fallback and alloc.solver == "cbc", alloc.message
    assert alloc.objective >= greedy.objective * (1 - 1e-6)


class _GivesUp(pulp.LpSolver):
    """A solver that stops at once with nothing, as a solver out of time does."""

    def actualSolve(self, lp, **kwargs):
        lp.assignStatus(pulp.LpStatusNotSolved, pulp.LpSolutionNoSolutionFound)
        return lp.status


def test_a_solver_that_drops_the_start_is_told_apart_from_a_bad_start(instance) -> None:
    alloc = allocate(instance.jobs, instance.free_nodes, instance.windows, solver=_GivesUp())
    assert alloc.fallback and alloc.solver == "greedy"
    assert "the greedy start is feasible; the solver stopped before using it" in alloc.message
    classes = instance_classes(instance)
    model = build_count_model(instance.jobs, classes)
    start = model.start_values(greedy_counts(instance.jobs, classes))
    var = next(v for row in model.x.values() for v in row if v is not None)
    start[var] = var.upBound + 5  # out of bounds, and too many nodes for its block
    assert f"{var.name} = " in start_violation(model.problem, start)
