"""Idle timelines, workloads and the history window predictor."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from parsl_malleable.errors import ConfigError, TraceFormatError
from parsl_malleable.replay.idle import idle_from_sim, load_idle_intervals
from parsl_malleable.replay.predict import HistoryWindows, NodeAges
from parsl_malleable.replay.scenario import hpo_sweep, summit_timeline, workload_jobs
from parsl_malleable.sim.handmade import handmade_trace
from parsl_malleable.sim.trace_replay import simulate


def test_idle_intervals_merge_touching_rows_and_clip(tmp_path):
    path = tmp_path / "idle.csv.gz"
    rows = "node,idle_start,idle_end\na,0,10\nb,5,20\na,10,30\na,40,50\n"
    path.write_bytes(gzip.compress(rows.encode()))
    tl = load_idle_intervals(path)
    assert tl.names == ("a", "b")
    assert sorted(zip(tl.node.tolist(), tl.start.tolist(), tl.end.tolist())) == [
        (0, 0.0, 30.0),
        (0, 40.0, 50.0),
        (1, 5.0, 20.0),
    ]
    assert tl.idle_node_seconds() == 55.0
    cut = tl.window(8.0, 45.0)
    assert cut.idle_node_seconds() == 22.0 + 12.0 + 5.0
    assert tl.first_nodes(1).idle_node_seconds() == 40.0


def test_chained_overlapping_idle_intervals_count_each_second_once_and_say_so(tmp_path):
    # [0, 200) holds [50, 100); [150, 300) overlaps the first: node a idles 300 s, not 350 s
    rows = "node,idle_start,idle_end\na,0,200\na,50,100\na,150,300\nb,0,10\nb,10,20\n"
    path = tmp_path / "idle.csv"
    path.write_text(rows)
    tl = load_idle_intervals(path)
    assert tl.idle_node_seconds() == 300.0 + 20.0
    assert tl.overlaps_merged == 2  # b's touching rows are one idle stretch, not a repair
    assert tl.source == "idle.csv (2 overlapping idle intervals merged)"
    assert tl.window(0.0, 250.0).idle_node_seconds() == 250.0 + 20.0
    assert tl.window(0.0, 250.0).overlaps_merged == 2
    assert tl.first_nodes(1).overlaps_merged == 2


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("node,start\n", "header lacks columns"),
        ("node,idle_start,idle_end\na,5,x\n", r"idle.csv:2: idle_end 'x' is not a number"),
        ("node,idle_start,idle_end\na,5,1\n", "idle.csv:2: idle_end is before idle_start"),
        ("node,idle_start,idle_end\n", "no idle interval"),
    ],
)
def test_bad_idle_files_say_what_and_where(tmp_path, text, says):
    path = tmp_path / "idle.csv"
    path.write_text(text)
    with pytest.raises(TraceFormatError, match=says):
        load_idle_intervals(path)


def test_a_simulated_schedule_gives_its_holes():
    # Two 1-node jobs on 2 nodes, then a 2-node job that waits: node 1 idles from 50 to 100.
    trace = handmade_trace([(0, 100, 100, 1), (0, 50, 50, 1), (1, 10, 10, 2)], nodes=2)
    tl = idle_from_sim(simulate(trace, "easy", end_cut="last_end"), source="hand")
    assert tl.nodes == 2
    assert tl.idle_node_seconds() == pytest.approx(50.0)


def test_history_windows_are_conditional_quantiles_of_past_lengths():
    history = HistoryWindows(quantile=0.5, refresh_s=0.0)
    assert np.isnan(history.remaining(np.array([10.0]), now=0.0)).all()
    for length in range(1, 101):
        history.observe(float(length))
    # Lengths 51..100 outlast age 50; their median is 75 or 76, so about 25 s remain.
    left = history.remaining(np.array([0.0, 50.0, 500.0]), now=1.0)
    assert left[0] == pytest.approx(51.0, abs=1)
    assert left[1] == pytest.approx(25.5, abs=1)
    assert left[2] == 500.0  # older than anything seen: its age is the only evidence


def test_history_windows_use_no_interval_before_it_has_ended():
    history = HistoryWindows(quantile=0.5, refresh_s=3600.0)
    history.observe(100.0)
    assert history.remaining(np.array([0.0]), now=0.0)[0] == 100.0
    history.observe(10_000.0)  # ended after the last refresh: not used until the next one
    assert history.remaining(np.array([0.0]), now=10.0)[0] == 100.0
    assert history.remaining(np.array([0.0]), now=4000.0)[0] == 10_000.0
    ages = NodeAges(history)
    ages.since["n1"] = 3000.0
    assert set(ages(["n1", "unknown"], 4000.0)) == {"n1"}


def test_workloads_and_sweeps_come_from_the_carried_data():
    tl = summit_timeline(nodes=10, days=0.1)
    jobs = workload_jobs("hps-shufflenet-1000J", tl, limit=3)
    assert [j.submit for j in jobs] == sorted(j.submit for j in jobs)
    assert jobs[0].submit == tl.t0 + 3600
    assert all(j.samples == 130e6 and j.max_nodes == 64 for j in jobs)
    sweep = hpo_sweep(tl, 16, samples=1e6)
    assert len({j.name for j in sweep}) == 16 and all(j.samples == 1e6 for j in sweep)
    with pytest.raises(ConfigError, match="unknown workload"):
        workload_jobs("nope", tl)
