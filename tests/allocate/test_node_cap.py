"""A node cap holds on every path: greedy (which must shrink), its fallback use, HiGHS, CBC, equal.

``make_instance`` gives about half the nodes to running jobs, so a cap below that can only be
met by shrinking them: the greedy rule used to keep every running job's nodes and break it.
"""

from __future__ import annotations

import pulp
import pytest

from parsl_malleable.allocate import NodeWindow, allocate, load_workload
from parsl_malleable.allocate.api import check_counts
from parsl_malleable.allocate.greedy import greedy_counts
from parsl_malleable.allocate.instances import Instance, make_instance, summit_remaining_windows

from .helpers import assert_valid, instance_classes, linear_job

CAPS = [0, 1, 10, 30, 48]


@pytest.fixture(scope="module", params=["no-windows", "summit-windows"])
def instance(request, bftrainer_dir) -> Instance:
    """The ``parsl-malleable allocate`` default (10 jobs, 100 nodes, 49 held), with and without
    Summit windows (several horizon classes)."""
    jobs = load_workload(bftrainer_dir, "imagenet-imgps-1001J", limit=10)
    remaining = None
    if request.param == "summit-windows":
        trace = bftrainer_dir / "summit-idle-intervals-2021-02.csv.gz"
        remaining = summit_remaining_windows(trace, 100, seed=0)
    built = make_instance(jobs, 100, remaining, seed=0)
    assert sum(len(job.current_nodes) for job in built.jobs) > max(CAPS)  # the cap binds
    return built


@pytest.mark.parametrize("cap", CAPS)
@pytest.mark.parametrize("objective", ["throughput", "maxmin"])
def test_greedy_rule_shrinks_running_jobs_to_the_cap(instance, cap, objective) -> None:
    classes = instance_classes(instance)
    counts = greedy_counts(instance.jobs, classes, objective=objective, node_cap=cap)
    assert sum(sum(row) for row in counts.values()) <= cap
    assert check_counts(instance.jobs, counts, classes, cap) == ""  # min/max, no migration


@pytest.mark.parametrize("cap", CAPS)
@pytest.mark.parametrize("solver", ["greedy", "equal", "highs", "cbc"])
def test_every_solver_respects_the_cap(instance, cap, solver) -> None:
    alloc = allocate(
        instance.jobs, instance.free_nodes, instance.windows, solver=solver, node_cap=cap
    )
    assert alloc.total_nodes <= cap
    assert_valid(alloc, instance.jobs, instance.free_nodes, node_cap=cap)
    if solver in ("highs", "cbc"):
        # The greedy start is feasible now, so the solver's answer is kept.
        assert alloc.solver == solver and not alloc.fallback, alloc.message


class _BrokenSolver(pulp.LpSolver):
    """A solver that always fails: ``allocate`` must fall back to the greedy rule."""

    def actualSolve(self, lp, **kwargs):
        raise pulp.PulpSolverError("broken on purpose")


@pytest.mark.parametrize("cap", CAPS)
def test_fallback_to_greedy_respects_the_cap(instance, cap) -> None:
    alloc = allocate(
        instance.jobs, instance.free_nodes, instance.windows, solver=_BrokenSolver(), node_cap=cap
    )
    assert alloc.fallback and alloc.solver == "greedy"
    assert alloc.total_nodes <= cap
    assert_valid(alloc, instance.jobs, instance.free_nodes, node_cap=cap)


def test_shrinking_drops_the_least_valuable_nodes_first() -> None:
    # Both jobs hold 4 nodes; the cap leaves 6. Dropping two of "slow"'s nodes loses 2 samples/s,
    # two of "fast"'s 20: the rule shrinks slow and leaves fast alone.
    slow = linear_job("slow", 1.0, hi=4, current=("s0", "s1", "s2", "s3"))
    fast = linear_job("fast", 10.0, hi=4, current=("f0", "f1", "f2", "f3"))
    alloc = allocate([slow, fast], ["n0"], solver="greedy", node_cap=6)
    assert alloc.nodes == {"slow": 2, "fast": 4}
    assert set(alloc.node_ids["slow"]) < set(slow.current_nodes)  # a subset: no migration
    assert alloc.added == {"slow": (), "fast": ()}


def test_a_job_shrunk_below_its_minimum_stops() -> None:
    # "big" needs 3 nodes to run; with a cap of 2 it must stop, and "small" takes the 2.
    big = linear_job("big", 1.0, lo=3, hi=4, current=("b0", "b1", "b2"))
    small = linear_job("small", 5.0, hi=2, current=("s0",))
    alloc = allocate([big, small], [], solver="greedy", node_cap=2)
    assert alloc.nodes["big"] == 0
    assert alloc.total_nodes <= 2
    assert_valid(alloc, [big, small], [], node_cap=2)


def test_a_job_stopped_by_ended_windows_restarts_only_on_its_own_nodes() -> None:
    # "a" needs 2 nodes; h0's window has ended, so it is left with h1 (short window) below its
    # minimum. Restarting on the two long-lived free nodes would drop h1 and add others: a
    # migration. It may only keep h1 and add one node.
    job = linear_job("a", 10.0, lo=2, hi=2, current=("h0", "h1"))
    free = ["n0", "n1"]
    windows = [
        NodeWindow(("h0",), 0.0),
        NodeWindow(("h1",), 1800.0),
        NodeWindow(("n0", "n1"), 3600.0),
    ]
    alloc = allocate([job], free, windows, solver="greedy")
    assert_valid(alloc, [job], free)
    assert "h1" in alloc.node_ids["a"] and alloc.nodes["a"] == 2
