"""The equal-share rule: the ``greedy`` replay baseline (no curves, no migration)."""

from __future__ import annotations

from parsl_malleable.allocate import NodeWindow, allocate
from parsl_malleable.allocate.equal import equal_targets

from .helpers import assert_valid, linear_job


def test_shares_are_equal_capped_and_the_rest_goes_to_the_others() -> None:
    jobs = [linear_job("a", 1.0, hi=2), linear_job("b", 1.0, hi=10), linear_job("c", 1.0, hi=10)]
    # a is capped at 2; 13 nodes left for b and c: 7 and 6, the odd one to the earlier job.
    assert equal_targets(jobs, 15) == {"a": 2, "b": 7, "c": 6}
    assert equal_targets(jobs, 40) == {"a": 2, "b": 10, "c": 10}


def test_a_job_whose_share_is_below_its_minimum_waits_latest_first() -> None:
    jobs = [linear_job("a", 1.0, lo=4, hi=8), linear_job("b", 1.0, lo=4, hi=8)]
    assert equal_targets(jobs, 6) == {"a": 6, "b": 0}
    assert equal_targets(jobs, 8) == {"a": 4, "b": 4}
    assert equal_targets(jobs, 3) == {"a": 0, "b": 0}


def test_curves_do_not_matter_and_nothing_migrates() -> None:
    # "fast" scales 100x better, yet both get the same share: equal share ignores curves.
    slow = linear_job("slow", 1.0, hi=8, current=("s0", "s1", "s2", "s3", "s4"))
    fast = linear_job("fast", 100.0, hi=8, current=("f0",))
    free = ["n0", "n1", "n2", "n3"]
    windows = [
        NodeWindow(("s0", "s1", "s2"), 60.0),
        NodeWindow(("s3", "s4", "f0", "n0", "n1"), 3600.0),
        NodeWindow(("n2", "n3"), 600.0),
    ]
    alloc = allocate([slow, fast], free, windows, solver="equal")
    assert_valid(alloc, [slow, fast], free)
    assert alloc.nodes == {"slow": 5, "fast": 5}
    # Ten nodes, two jobs: slow keeps its five; fast keeps f0 and adds the longest-lived first.
    assert set(alloc.node_ids["slow"]) == {"s0", "s1", "s2", "s3", "s4"}
    assert set(alloc.node_ids["fast"]) == {"f0", "n0", "n1", "n2", "n3"}
    assert alloc.solver == "equal" and not alloc.fallback


def test_a_shrinking_job_keeps_its_longest_lived_nodes() -> None:
    big = linear_job("big", 1.0, hi=8, current=("s0", "s1", "l0", "l1", "l2", "l3"))
    new = linear_job("new", 1.0, hi=8)
    windows = [NodeWindow(("s0", "s1"), 60.0), NodeWindow(("l0", "l1", "l2", "l3"), 3600.0)]
    alloc = allocate([big, new], [], windows, solver="equal")
    assert_valid(alloc, [big, new], [])
    assert alloc.nodes == {"big": 3, "new": 3}
    assert set(alloc.node_ids["big"]) < {"l0", "l1", "l2", "l3"}
