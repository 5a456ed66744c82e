"""plan_queue on hand-built scheduler states."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parsl_malleable.errors import SnapshotError
from parsl_malleable.sim import plan_queue, simulate
from parsl_malleable.sim.handmade import handmade_trace
from parsl_malleable.sim.reference import reference_schedule

# now = 100; a, b free; c, d busy until 150; e busy until 300
FREE = ["a", "b"]
RUNNING = [(150.0, ["c", "d"]), (300.0, ["e"])]


def test_easy_plan_reserves_the_head_and_backfills_around_it():
    # head (4 nodes) can start at 150 when c, d end; the 1-node 40 s job ends at 140 <= 150, so
    # it starts now; the 1-node 100 s job would hold a node at 150 (head needs all 4): it waits
    # for the head to end at 250, like the open-ended 2-node job.
    plan = plan_queue(100.0, FREE, RUNNING, [(4, 100.0), (1, 40.0), (1, 100.0), (2, None)])
    assert plan.starts.tolist() == [150.0, 100.0, 250.0, 250.0]
    assert plan.ends.tolist() == [250.0, 140.0, 350.0, math.inf]
    assert plan.waits().tolist() == [50.0, 0.0, 150.0, 150.0]
    assert plan.nodes[0] == ["a", "b", "c", "d"]
    assert plan.nodes[1] == ["a"]
    # a is used right away, b from 150 on by the head
    assert plan.node_needed == {"a": 0.0, "b": 50.0}


def test_policies_agree_without_backfill_chances_and_differ_with_one():
    pending = [(2, 100.0), (2, 100.0), (1, 300.0)]
    # the first job takes a, b now (until 200); the second takes c, d at 150; the 1-node job
    # finds no node free before a, b are released at 200 under every policy.
    easy = plan_queue(100.0, FREE, RUNNING, pending, "easy")
    cons = plan_queue(100.0, FREE, RUNNING, pending, "conservative")
    fcfs = plan_queue(100.0, FREE, RUNNING, pending, "fcfs")
    assert easy.starts.tolist() == [100.0, 150.0, 200.0]
    assert cons.starts.tolist() == [100.0, 150.0, 200.0]
    assert fcfs.starts.tolist() == [100.0, 150.0, 200.0]
    # one free node and a short 1-node job behind a blocked 3-node head: only EASY backfills
    pending = [(3, 100.0), (1, 10.0)]
    easy = plan_queue(0.0, ["a"], [(50.0, ["b", "c"])], pending, "easy")
    fcfs = plan_queue(0.0, ["a"], [(50.0, ["b", "c"])], pending, "fcfs")
    assert easy.starts.tolist() == [50.0, 0.0]
    assert fcfs.starts.tolist() == [50.0, 150.0]
    assert easy.node_needed == {"a": 0.0}


def test_unbounded_jobs_and_too_large_jobs():
    # e never ends: a 3-node job can never start; a 5-node job is larger than the machine and
    # (as in Slurm) blocks nobody; the 1-node job starts now.
    plan = plan_queue(
        0.0, ["a", "b"], [(math.inf, ["e"])], [(3, 10.0), (5, 10.0), (1, 10.0)], "easy"
    )
    assert plan.starts.tolist() == [math.inf, math.inf, 0.0]
    assert plan.nodes[0] == [] and plan.nodes[1] == []


def test_overdue_running_job_counts_as_ending_now_and_default_limit_applies():
    plan = plan_queue(100.0, [], [(90.0, ["a"])], [(1, None)], default_limit=60.0)
    assert plan.starts.tolist() == [100.0]
    assert plan.ends.tolist() == [160.0]
    assert plan.node_needed == {}


def test_node_order_decides_which_free_node_is_needed_first():
    plan = plan_queue(0.0, ["a", "b", "c"], [], [(1, 10.0)], node_order=["c", "b", "a"])
    assert plan.nodes[0] == ["c"]
    assert plan.node_needed == {"a": math.inf, "b": math.inf, "c": 0.0}


def test_plan_matches_the_simulators_schedule_for_the_same_jobs():
    # planning from an empty machine with every job submitted now is a simulation
    rng = np.random.default_rng(3)
    sizes = rng.integers(1, 5, 30)
    limits = rng.integers(1, 100, 30).astype(float)
    trace = handmade_trace([(0.0, w, w, int(k)) for k, w in zip(sizes, limits, strict=True)], 6)
    for policy in ("fcfs", "easy", "conservative"):
        sim = simulate(trace, policy, end_cut="last_end").jobs["sim_start"].to_numpy()
        plan = plan_queue(0.0, list(range(6)), [], list(zip(sizes, limits, strict=True)), policy)
        assert np.array_equal(plan.starts, sim), policy


@pytest.mark.parametrize(
    ("free", "running", "pending", "word"),
    [
        (["a", "a"], [], [], "twice"),
        (["a"], [(10.0, ["a"])], [], "twice"),
        (["a"], [], [(0, 10.0)], "no nodes|0 nodes"),
        (["a"], [], [(1, -5.0)], "negative"),
    ],
)
def test_inconsistent_snapshots_are_rejected(free, running, pending, word):
    with pytest.raises(SnapshotError, match=word):
        plan_queue(0.0, free, running, pending)


@st.composite
def exact_traces(draw):
    """Random traces whose jobs run exactly their walltime (plans are then exact)."""
    nodes = draw(st.integers(1, 6))
    rows = []
    for _ in range(draw(st.integers(1, 20))):
        wall = float(draw(st.integers(1, 50)))
        rows.append((float(draw(st.integers(0, 60))), wall, wall, draw(st.integers(1, nodes))))
    return handmade_trace(rows, nodes)


@settings(max_examples=80, deadline=None)
@given(exact_traces(), st.sampled_from(["fcfs", "easy", "conservative"]), st.integers(0, 60))
def test_plan_from_a_mid_run_snapshot_predicts_the_simulation(trace, policy, t):
    # Snapshot of a simulation at time t (all events at t done): running jobs with their nodes
    # and ends, pending jobs in priority order. With no early ends, later arrivals cannot move
    # earlier jobs under FCFS or conservative, nor the first pending job under EASY, so the
    # plan must predict those starts exactly.
    res = simulate(trace, policy, end_cut="last_end")
    jobs = res.jobs
    start, end = jobs["sim_start"].to_numpy(), jobs["sim_end"].to_numpy()
    submit = jobs["submit"].to_numpy()
    running = [
        (end[r], res.node_ids(r).tolist()) for r in range(len(jobs)) if start[r] <= t < end[r]
    ]
    busy = {n for _, ids in running for n in ids}
    free = [n for n in range(trace.machine.nodes) if n not in busy]
    pend = [r for r in range(len(jobs)) if submit[r] <= t < start[r]]
    limits = trace.jobs["walltime"].to_numpy()
    plan = plan_queue(
        float(t),
        free,
        running,
        [(int(jobs["nodes"].iloc[r]), float(limits[r])) for r in pend],
        policy,
        node_order=list(range(trace.machine.nodes)),
    )
    # The expected starts come from the textbook reference (sim/reference.py), which shares no
    # code with the planner under test; the simulation only supplies the snapshot.
    frame = trace.jobs
    run = (frame["end"] - frame["start"]).to_numpy()
    wall = frame["walltime"].to_numpy()
    est = np.maximum(np.where(np.isfinite(wall) & (wall > 0), wall, run), 1.0)
    ref = reference_schedule(
        trace.machine.nodes, policy, frame["submit"].to_numpy(), run, est, frame["nodes"].to_numpy()
    )
    assert np.array_equal(ref.start, start)  # the snapshot is the reference's at t too
    expected = ref.start[pend]
    if policy == "easy":
        expected, got = expected[:1], plan.starts[:1]
    else:
        got = plan.starts
    assert np.array_equal(got, expected)
