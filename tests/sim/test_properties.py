"""Properties of simulated schedules on random small traces (hypothesis)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parsl_malleable.sim import simulate
from parsl_malleable.sim.handmade import handmade_trace
from parsl_malleable.sim.reference import reference_schedule

POLICIES = ("fcfs", "easy", "conservative")


@st.composite
def traces(draw):
    nodes = draw(st.integers(1, 8))
    n = draw(st.integers(1, 25))
    rows = []
    for _ in range(n):
        walltime = draw(st.one_of(st.integers(1, 60).map(float), st.just(math.nan)))
        rows.append(
            (
                float(draw(st.integers(0, 100))),
                float(draw(st.integers(0, 70))),  # may exceed the walltime: capped
                walltime,
                draw(st.integers(1, nodes)),
            )
        )
    return handmade_trace(rows, nodes)


def check_no_node_double_booked(res, n_nodes):
    node, s, e = res.busy_intervals()
    assert node.min() >= 0 and node.max() < n_nodes
    sizes = [len(res.node_ids(r)) for r in range(len(res.jobs))]
    assert sizes == res.jobs["nodes"].tolist()
    order = np.lexsort((e, s, node))
    node, s, e = node[order], s[order], e[order]
    same = node[1:] == node[:-1]
    assert np.all(s[1:][same] >= e[:-1][same]), "a node runs two jobs at once"


def check_partition(res, n_nodes):
    lo, hi = res.stats.window_start, res.stats.window_end
    node, s, e = res.busy_intervals()
    s, e = np.maximum(s, lo), np.minimum(e, hi)
    keep = e > s
    idle_node, idle_s, idle_e = res.idle_arrays()
    all_node = np.concatenate([node[keep], idle_node])
    all_s = np.concatenate([s[keep], idle_s])
    all_e = np.concatenate([e[keep], idle_e])
    for i in range(n_nodes):
        mine = all_node == i
        order = np.argsort(all_s[mine], kind="stable")
        ss, ee = all_s[mine][order], all_e[mine][order]
        if hi > lo:
            assert len(ss) and ss[0] == lo and ee[-1] == hi, f"node {i} not covered to the ends"
            assert np.array_equal(ss[1:], ee[:-1]), f"node {i}: gap or overlap"
        else:
            assert len(ss) == 0


@settings(max_examples=120, deadline=None)
@given(traces(), st.sampled_from(POLICIES), st.integers(0, 30))
def test_schedule_invariants(trace, policy, warmup):
    res = simulate(trace, policy, warmup=float(warmup), end_cut="last_end")
    jobs = res.jobs
    n_nodes = trace.machine.nodes
    start = jobs["sim_start"].to_numpy()
    assert not np.isnan(start).any()  # every job fits the machine, so every job runs
    assert np.all(start >= jobs["submit"].to_numpy()), "a job started before it was submitted"
    check_no_node_double_booked(res, n_nodes)
    check_partition(res, n_nodes)
    # the statistics agree with the holes expanded one row per node
    _, idle_s, idle_e = res.idle_arrays()
    lengths = idle_e - idle_s
    assert res.stats.holes == len(lengths)
    if len(lengths):
        assert res.stats.hole_p50 == pytest.approx(np.percentile(lengths, 50))
        assert res.stats.hole_p90 == pytest.approx(np.percentile(lengths, 90))
    span = n_nodes * (res.stats.window_end - res.stats.window_start)
    if span > 0:
        assert res.stats.idle_fraction == pytest.approx(lengths.sum() / span)
    reservation = jobs["reservation"].to_numpy()
    if policy == "fcfs":
        assert np.all(np.diff(start) >= 0), "FCFS started jobs out of submit order"
        assert not jobs["backfilled"].any()
    elif policy == "easy":
        # a backfilled job never delays the head: each head starts no later than the
        # reservation computed when it first became the blocked head
        made = ~np.isnan(reservation)
        assert np.all(start[made] <= reservation[made])
    else:
        # every job is reserved on arrival, and starts no later than that reservation
        assert not np.isnan(reservation).any()
        assert np.all(start <= reservation)


@settings(max_examples=120, deadline=None)
@given(traces(), st.sampled_from(POLICIES))
def test_event_loop_matches_the_textbook_reference(trace, policy):
    # The numba loop skips work (arrival-only rescans, lazy profiles, compression without
    # remove/re-insert); the plain-Python reference does none of that. Same schedule expected.
    res = simulate(trace, policy, end_cut="last_end")
    jobs = trace.jobs
    run = (jobs["end"] - jobs["start"]).to_numpy()
    wt = jobs["walltime"].to_numpy()
    est = np.maximum(np.where(np.isfinite(wt) & (wt > 0), wt, run), 1.0)
    ref = reference_schedule(
        trace.machine.nodes,
        policy,
        jobs["submit"].to_numpy(),
        run,
        est,
        jobs["nodes"].to_numpy(),
    )
    assert np.array_equal(res.jobs["sim_start"].to_numpy(), ref.start)
    assert np.array_equal(res.jobs["sim_end"].to_numpy(), ref.end)
    assert np.array_equal(res.jobs["reservation"].to_numpy(), ref.first_res, equal_nan=True)


def test_long_queues_match_the_reference():
    # Bursts of arrivals keep hundreds of jobs queued, so the FCFS/EASY queue's tombstone
    # compaction and the arrival-only scans run many times; the schedule must still be the
    # textbook one. (Conservative compacts its queue at every event; its Python reference is
    # too slow for this size and is compared on the small traces above.)
    rng = np.random.default_rng(7)
    n = 600
    submit = np.sort(rng.integers(0, 20, n) * 1000 + rng.integers(0, 50, n)).astype(float)
    run = rng.integers(0, 400, n).astype(float)
    wall = np.where(rng.random(n) < 0.3, run, run + rng.integers(1, 300, n)).astype(float)
    nodes = rng.choice([1, 1, 1, 2, 4, 8, 16], n)
    trace = handmade_trace(list(zip(submit, run, wall, nodes, strict=True)), 16)
    for policy in ("fcfs", "easy"):
        res = simulate(trace, policy, end_cut="last_end")
        assert res.stats.extra["queue_max"] > 150
        jobs = trace.jobs
        ref = reference_schedule(
            16,
            policy,
            jobs["submit"].to_numpy(),
            (jobs["end"] - jobs["start"]).to_numpy(),
            np.maximum(jobs["walltime"].to_numpy(), 1.0),
            jobs["nodes"].to_numpy(),
        )
        assert np.array_equal(res.jobs["sim_start"].to_numpy(), ref.start), policy
        assert np.array_equal(res.jobs["reservation"].to_numpy(), ref.first_res, equal_nan=True)
