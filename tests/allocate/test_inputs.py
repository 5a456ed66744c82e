"""Curves, horizon classes and workload files: values and clear errors on bad input."""

from __future__ import annotations

import pytest

from parsl_malleable.allocate import (
    AllocationInputError,
    NodeWindow,
    ScalingCurve,
    TrainingJob,
    allocate,
    load_workload,
)
from parsl_malleable.allocate.horizon import classify
from parsl_malleable.allocate.piecewise import best_envelope_rate, concave_envelope, envelope_rate
from parsl_malleable.errors import TraceFormatError

from .helpers import AT_LEISURE_S, linear_job, table_job


def test_curve_interpolates_and_stays_flat():
    curve = ScalingCurve((1, 2, 4), (10.0, 18.0, 30.0))
    assert curve(0) == 0.0
    assert curve(0.5) == pytest.approx(5.0)
    assert curve(3) == pytest.approx(24.0)
    assert curve(100) == 30.0
    assert curve.breakpoints(2, 3) == [(2, 18.0), (3, 24.0)]


@pytest.mark.parametrize(
    ("nodes", "rates", "match"),
    [
        ((2, 1), (1.0, 2.0), "increasing"),
        ((1, 2), (1.0,), "throughputs"),
        ((0, 1), (5.0, 6.0), "at 0 nodes"),
        ((1,), (float("nan"),), "finite"),
    ],
)
def test_bad_curves_are_named(nodes, rates, match):
    with pytest.raises(AllocationInputError, match=match):
        ScalingCurve(nodes, rates)


def test_concave_envelope_covers_superlinear_points():
    job = table_job("j", {1: 10.0, 2: 15.0, 4: 40.0})
    hull = concave_envelope(job)
    assert hull == [(0, 0.0), (4, 40.0)]


@pytest.mark.parametrize(
    "rates",
    [
        {1: 10.0, 2: 15.0, 4: 40.0},  # superlinear: the envelope is one chord
        {1: 10.0, 2: 19.0, 4: 30.0, 8: 28.0, 16: 20.0},  # peaks at 4, then falls
        {1: 10.0, 3: 10.0, 6: 10.0},  # flat: every size past 1 ties
        {2: 8.0, 4: 20.0, 8: 30.0},  # min_nodes 2
    ],
)
def test_best_envelope_rate_is_the_envelope_maximum_up_to_the_bound(rates):
    job = table_job("j", rates, lo=min(rates))
    for most in range(0, max(rates) + 3):
        scan = max(envelope_rate(job, n) for n in range(0, min(most, job.max_nodes) + 1))
        assert best_envelope_rate(job, most) == pytest.approx(scan), most


def test_bad_jobs_and_calls_are_named():
    curve = ScalingCurve((1,), (1.0,))
    with pytest.raises(AllocationInputError, match="min_nodes"):
        TrainingJob("j", 3, 2, curve, 0, 0)
    with pytest.raises(AllocationInputError, match="scale_up_cost"):
        TrainingJob("j", 1, 2, curve, -1, 0)
    with pytest.raises(AllocationInputError, match="outside"):
        TrainingJob("j", 2, 3, curve, 0, 0, current_nodes=("a",))
    job = linear_job("j", 1.0, current=("a",))
    with pytest.raises(AllocationInputError, match="free but also held"):
        allocate([job], ["a"])
    with pytest.raises(AllocationInputError, match="objective 'fast'"):
        allocate([job], ["b"], objective="fast")
    with pytest.raises(AllocationInputError, match="solver 'gurobi'"):
        allocate([job], ["b"], solver="gurobi")
    with pytest.raises(AllocationInputError, match="remaining_s"):
        NodeWindow(("a",), -5)


def test_classes_are_conservative_and_nested():
    jobs = [linear_job("j", 1.0, current=("h0", "h1"))]
    windows = [
        NodeWindow(("f0", "h0"), 100.0),
        NodeWindow(("f1",), 150.0),
        NodeWindow(("f2", "h1"), 900.0),
        NodeWindow(("f3",), 0.0),
    ]
    classes = classify(
        jobs,
        ["f0", "f1", "f2", "f3", "f4"],
        windows,
        default_window_s=5000.0,
        max_horizon_s=2000.0,
        max_classes=2,
    )
    # Two classes keep the most node-seconds with ends 900 (f2, h1) and 2000 (f4); the job's
    # short node h0 is never dropped, so a third class ends at the shortest window, 100 s, and
    # holds every node shorter than 900 s. No node is planned beyond its window.
    assert classes.ends == (100.0, 900.0, 2000.0)
    assert classes.lengths == (100.0, 800.0, 1100.0)
    assert set(classes.free[0]) == {"f0", "f1"}
    assert classes.free[1:] == (("f2",), ("f4",))
    assert classes.held["j"] == (("h0",), ("h1",), ())
    assert "f3" not in classes.remaining  # window already over
    assert classes.capacity(0) == 3


def test_classes_keep_the_most_node_seconds_and_leave_short_free_nodes_out():
    # The equal-population rule put the 1 s window with the 400 s ones and planned all four
    # for 1 s; the chosen ends keep 3 x 400 + 2 x 3600 node-seconds and leave the 1 s node free.
    windows = [NodeWindow((f"n{i}",), w) for i, w in enumerate([1, 400, 400, 400, 3600, 3600])]
    classes = classify(
        [],
        [w.nodes[0] for w in windows],
        windows,
        default_window_s=3600.0,
        max_horizon_s=3600.0,
        max_classes=2,
    )
    assert classes.ends == (400.0, 3600.0)
    assert "n0" not in classes.remaining
    assert sum(e * len(f) for e, f in zip(classes.ends, classes.free, strict=True)) == 8400.0


def test_workload_loads_shared_csvs(bftrainer_dir):
    jobs = load_workload(bftrainer_dir, "imagenet-imgps-1001J", limit=7)
    assert len(jobs) == 7
    alexnet = jobs[0]
    assert alexnet.name == "J00000-AlexNet" and (alexnet.min_nodes, alexnet.max_nodes) == (1, 64)
    assert alexnet.curve(64) == pytest.approx(202135.4)
    assert 17 <= alexnet.scale_up_cost <= 19


def test_workload_errors_name_file_and_line(tmp_path):
    (tmp_path / "w-scaling.csv").write_text("job,nodes,throughput\nA,1,10\nA,2,abc\n")
    (tmp_path / "w-jobs.csv").write_text("job,Tcup,Tcdw,Jmin,Jmax\nA,1,1,1,2\n")
    with pytest.raises(TraceFormatError, match=r"w-scaling.csv:3: bad number"):
        load_workload(tmp_path, "w")
    (tmp_path / "w-scaling.csv").write_text("job,nodes,throughput\nA,1,10\n")
    (tmp_path / "w-jobs.csv").write_text("job,Tcup,Tcdw,Jmin\nA,1,1,1\n")
    with pytest.raises(TraceFormatError, match=r"w-jobs.csv:1: missing column\(s\) Jmax"):
        load_workload(tmp_path, "w")
    (tmp_path / "w-jobs.csv").write_text("job,Tcup,Tcdw,Jmin,Jmax\nA,1,1,1,2\nB,1,1,1,2\n")
    with pytest.raises(TraceFormatError, match=r"w-jobs.csv:3: job B has no scaling curve"):
        load_workload(tmp_path, "w")


def test_solves_asking_for_different_thread_counts_all_solve():
    # HiGHS sizes one thread pool per process at its first solve; a later solve asking for
    # another count used to fail at once ("Not Solved") and fall back to the greedy rule.
    jobs = [linear_job("a", 1.0, up=1.0, down=1.0), linear_job("b", 2.0, up=1.0, down=1.0)]
    free = [f"n{i}" for i in range(5)]
    for threads in (None, 1, None, 2, 1):
        alloc = allocate(jobs, free, solver="highs", threads=threads, time_limit=AT_LEISURE_S)
        assert (alloc.solver, alloc.status, alloc.fallback) == ("highs", "optimal", False)
