"""Hand-built traces whose schedules are worked out by hand in the comments."""

from __future__ import annotations

import numpy as np
import pytest

from parsl_malleable.sim import SimulationError, simulate
from parsl_malleable.sim.handmade import handmade_trace


def starts(trace, policy):
    return simulate(trace, policy, end_cut="last_end").jobs["sim_start"].tolist()


def test_small_job_backfills_ahead_of_blocked_big_job_under_easy_not_fcfs():
    # 4 nodes. J0 holds 3 until 100; J1 needs all 4, so it waits for 100 (head, reserved at
    # 100); J2 needs 1 node for 50 s: it ends at 52 <= 100, so EASY starts it at 2.
    trace = handmade_trace([(0, 100, 100, 3), (1, 100, 100, 4), (2, 50, 50, 1)], nodes=4)
    easy = simulate(trace, "easy", end_cut="last_end").jobs
    assert easy["sim_start"].tolist() == [0, 100, 2]
    assert easy["reservation"].tolist()[1] == 100
    assert easy["backfilled"].tolist() == [False, False, True]
    # FCFS: J2 waits behind J1, which runs 100..200
    assert starts(trace, "fcfs") == [0, 100, 200]


def test_backfill_that_would_delay_the_head_is_refused():
    # Same, but J2 asks for 150 s: it would hold a node at 100 when the head needs all 4.
    trace = handmade_trace([(0, 100, 100, 3), (1, 100, 100, 4), (2, 150, 150, 1)], nodes=4)
    assert starts(trace, "easy") == [0, 100, 200]


def test_long_backfill_allowed_on_extra_nodes():
    # The head needs only 3 of the 4 nodes at 100, so a 1-node job may run past 100.
    trace = handmade_trace([(0, 100, 100, 3), (1, 100, 100, 3), (2, 150, 150, 1)], nodes=4)
    assert starts(trace, "easy") == [0, 100, 2]


def test_time_min_fits_a_job_into_the_hole_with_its_limit_cut_to_it():
    # As above (J2 would hold a node past the head's reservation at 100 with 150 s), but J2
    # says --time-min=60: the hole at 2 lasts 98 s, so EASY starts it at 2 with a 98 s limit
    # and it is cut off at 100; the head still starts at 100.
    trace = handmade_trace([(0, 100, 100, 3), (1, 100, 100, 4), (2, 150, 150, 1)], nodes=4)
    res = simulate(trace, "easy", end_cut="last_end", time_min=np.array([np.nan, np.nan, 60.0]))
    jobs = res.jobs
    assert jobs["sim_start"].tolist() == [0, 100, 2]
    assert jobs["sim_end"].tolist() == [100, 200, 100]
    assert jobs["sim_limit"].tolist() == [100, 100, 98]
    # A minimum longer than the hole does not fit: J2 waits as before.
    later = simulate(trace, "easy", end_cut="last_end", time_min=np.array([np.nan, np.nan, 99.0]))
    assert later.jobs["sim_start"].tolist() == [0, 100, 200]
    assert later.jobs["sim_limit"].tolist() == [100, 100, 150]


def test_bad_time_min_is_named():
    trace = handmade_trace([(0, 100, 100, 3), (1, 100, 100, 4)], nodes=4)
    with pytest.raises(SimulationError, match="one value per job"):
        simulate(trace, "easy", time_min=np.array([60.0]))
    with pytest.raises(SimulationError, match="> 0"):
        simulate(trace, "easy", time_min=np.array([0.0, np.nan]))


def test_conservative_protects_the_second_queued_job_easy_does_not():
    # J0 holds 3 of 4 nodes until 100. J1 (2 nodes) is the head, reserved [100, 200); J2
    # (2 nodes) is second: conservative reserves it [100, 200) too. J3 (1 node, 200 s) fits
    # now on the free node and leaves 2 nodes at 100 for the head, so EASY starts it at 3,
    # which pushes J2 to 200. Conservative refuses: J3 would take a node J2 is promised.
    trace = handmade_trace(
        [(0, 100, 100, 3), (1, 100, 100, 2), (2, 100, 100, 2), (3, 200, 200, 1)], nodes=4
    )
    assert starts(trace, "easy") == [0, 100, 200, 3]
    cons = simulate(trace, "conservative", end_cut="last_end").jobs
    assert cons["sim_start"].tolist() == [0, 100, 100, 200]
    assert cons["reservation"].tolist() == [0, 100, 100, 200]


def test_early_end_lets_the_waiting_job_start_before_its_reservation():
    # J0 asks 100 s but ends at 30; J1 was planned (reserved) at 100 and starts at 30.
    trace = handmade_trace([(0, 30, 100, 2), (1, 10, 50, 2)], nodes=2)
    for policy in ("easy", "conservative"):
        jobs = simulate(trace, policy, end_cut="last_end").jobs
        assert jobs["sim_start"].tolist() == [0, 30], policy
        assert jobs["reservation"].tolist()[1] == 100, policy
    assert starts(trace, "fcfs") == [0, 30]


def test_runtime_is_capped_at_walltime():
    trace = handmade_trace([(0, 500, 100, 1), (0, 10, 20, 1)], nodes=1)
    res = simulate(trace, "easy", end_cut="last_end")
    assert res.jobs["sim_end"].tolist() == [100, 110]
    assert res.stats.adjusted["runtime_capped"] == 1


def test_unknown_walltime_plans_with_the_runtime():
    # J0 holds 1 of 2 nodes until 100; J1 (2 nodes) waits; J2 has no walltime and a 50 s
    # runtime, so its plan ends at 52 <= 100 and it backfills. With a 200 s walltime it would not.
    rows = [(0, 100, 100, 1), (1, 100, 100, 2), (2, 50, float("nan"), 1)]
    res = simulate(handmade_trace(rows, nodes=2), "easy", end_cut="last_end")
    assert res.jobs["sim_start"].tolist() == [0, 100, 2]
    assert res.stats.adjusted["walltime_unknown"] == 1
    rows[2] = (2, 50, 200, 1)
    assert starts(handmade_trace(rows, nodes=2), "easy") == [0, 100, 200]


def test_unknown_times_and_impossible_jobs_are_dropped_and_counted():
    trace = handmade_trace(
        [(0, 10, 10, 1), (1, float("nan"), 10, 1), (2, 10, 10, 5), (3, 10, 10, 0)], nodes=2
    )
    res = simulate(trace, "easy", end_cut="last_end")
    assert len(res.jobs) == 4
    assert res.jobs["dropped"].tolist() == ["", "unknown_times", "too_big", "no_nodes"]
    assert res.jobs["sim_start"].isna().tolist() == [False, True, True, True]
    assert res.stats.jobs_simulated == 1
    assert res.stats.dropped == {
        "unknown_times": 1,
        "negative_runtime": 0,
        "no_nodes": 1,
        "too_big": 1,
    }


def test_lowest_free_node_ids_and_the_holes_they_leave():
    # 4 nodes. J0 (2 nodes, 10 s) gets n0000-n0001, J1 (1 node, 20 s) gets n0002; window 0..20.
    trace = handmade_trace([(0, 10, 10, 2), (0, 20, 20, 1)], nodes=4)
    res = simulate(trace, "easy", end_cut="last_end")
    assert res.node_ids(0).tolist() == [0, 1]
    assert res.node_ids(1).tolist() == [2]
    idle = res.idle
    assert list(idle.columns) == ["node", "idle_start", "idle_end"]
    assert str(idle["node"].dtype) == "string"
    got = sorted(zip(idle["node"], idle["idle_start"], idle["idle_end"], strict=True))
    assert got == [("n0000", 10, 20), ("n0001", 10, 20), ("n0003", 0, 20)]
    st = res.stats
    assert st.idle_fraction == pytest.approx(40 / 80)
    assert st.holes == 3
    assert st.hole_p50 == 10
    assert st.hole_node_hours["<5min"] == pytest.approx(40 / 3600)
    assert st.hole_node_hours[">4h"] == 0


def test_warmup_and_end_cut_clip_the_holes():
    # 2 nodes, jobs at 0 (node 0, 100 s) and 50 (node 1, 10 s): node 1 idles 0..50 and 60..100.
    trace = handmade_trace([(0, 100, 100, 1), (50, 10, 10, 1)], nodes=2)
    res = simulate(trace, "easy", warmup=20, end_cut="last_end")
    got = sorted(zip(*(a.tolist() for a in res.idle_arrays()), strict=True))
    assert got == [(1, 20, 50), (1, 60, 100)]
    assert res.stats.idle_fraction == pytest.approx(70 / (2 * 80))
    res = simulate(trace, "easy", end_cut="last_submit")  # window 0..50
    got = sorted(zip(*(a.tolist() for a in res.idle_arrays()), strict=True))
    assert got == [(1, 0, 50)]


def test_waits_and_bounded_slowdown():
    # 1 node: J0 runs 0..100, J1 (submitted at 0, 5 s) waits 100 s: bsld = max(105/10, 1).
    trace = handmade_trace([(0, 100, 100, 1), (0, 5, 5, 1)], nodes=1)
    st = simulate(trace, "fcfs", end_cut="last_end").stats
    assert st.wait_mean == 50
    assert st.wait_median == 50
    assert st.bounded_slowdown_mean == pytest.approx((1 + 10.5) / 2)


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [
        ({"policy": "sjf"}, "policy"),
        ({"nodes": 0}, "machine size"),
        ({"warmup": -1}, "warmup"),
        ({"end_cut": "never"}, "end_cut"),
    ],
)
def test_bad_settings_name_the_problem(kwargs, word):
    trace = handmade_trace([(0, 1, 1, 1)], nodes=1)
    with pytest.raises(SimulationError, match=word):
        simulate(trace, **kwargs)


def test_results_are_aligned_with_the_input_rows():
    trace = handmade_trace([(5, 1, 1, 1), (0, 1, 1, 1)], nodes=1)
    trace.jobs.index = [10, 20]
    res = simulate(trace, "easy")
    assert res.jobs.index.tolist() == [10, 20]
    assert np.array_equal(res.jobs["job_id"], trace.jobs["job_id"])


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([], "the trace has no jobs"),
        (
            [(0, float("nan"), 1, 1)],
            r"none of the 1 jobs can be simulated: unknown_times 1 \(jobs 1\)",
        ),
    ],
)
def test_empty_and_all_dropped_traces_are_errors(rows, message):
    with pytest.raises(SimulationError, match=message):
        simulate(handmade_trace(rows, nodes=4), "easy", end_cut="last_end")
