"""Replay snapshots, arrivals, and the evaluation harness on small traces."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from parsl_malleable.sim.trace_replay import simulate
from parsl_malleable.traces.synthetic import synthetic_trace
from parsl_malleable.windows.accounting import BlockCosts
from parsl_malleable.windows.arrivals import DAY, ArrivalModel
from parsl_malleable.windows.command import windows
from parsl_malleable.windows.evaluate import EvalConfig, evaluate
from parsl_malleable.windows.predict import WindowPredictor
from parsl_malleable.windows.replay_snapshots import ReplayState
from parsl_malleable.windows.validate import check_snapshot


@pytest.fixture(scope="module")
def small_trace():
    return synthetic_trace(1500, 48, seed=3, load=0.85)


@pytest.fixture(scope="module")
def small_sim(small_trace):
    return simulate(small_trace, "easy")


def test_replay_snapshots_are_consistent_and_already_scheduled(small_trace, small_sim) -> None:
    state = ReplayState(small_trace, small_sim)
    times = state.event_times()
    predictor = WindowPredictor()
    checked_events = 0
    for t in times[len(times) // 4 :: 37][:40]:
        state.advance(float(t))
        snap = state.snapshot("easy")
        checked = check_snapshot(snap)  # no contradiction in any replay snapshot
        held = sum(len(j.nodes) for j in snap.running)
        assert len(checked.idle) == 48 - held
        nw = predictor.node_windows(snap)
        # the replay's scheduler already started every job that fits: no idle node is
        # taken "now" by the planner, and every window ends after now
        assert sorted(nw.names) == sorted(checked.idle)
        assert np.all(nw.naive > 0)
        checked_events += 1
    assert checked_events == 40


def test_replay_cannot_go_back(small_trace, small_sim) -> None:
    state = ReplayState(small_trace, small_sim)
    state.advance(1000.0)
    with pytest.raises(ValueError, match="go back"):
        state.advance(10.0)


def test_arrival_shifts_stay_inside_known_history() -> None:
    submit = np.arange(0.0, 10 * DAY, 3600.0)
    jobs = pd.DataFrame(
        {
            "submit": submit,
            "start": submit,
            "end": submit + 600.0,
            "walltime": np.full(len(submit), 1800.0),
            "nodes": np.ones(len(submit), dtype=np.int64),
        }
    )
    now = 10 * DAY
    model = ArrivalModel.fit(jobs, now, lookback=3)
    assert model.shifts(now, DAY).tolist() == [DAY, 2 * DAY, 3 * DAY]
    # an hour after fitting, a one-day window one day back would reach past the fit
    assert model.shifts(now + 3600.0, DAY).tolist() == [2 * DAY, 3 * DAY]
    draw = model.sample(now, DAY / 2, np.random.default_rng(0))
    assert len(draw) == 11  # hours 1..11 after the shifted now (the window is open)
    assert np.all((draw.submit > now) & (draw.submit < now + DAY / 2))
    assert np.all(draw.runtime == 600.0)
    assert len(ArrivalModel.fit(jobs.iloc[:0], now).sample(now, DAY, np.random.default_rng(0))) == 0


def test_jobs_still_running_at_fit_time_plan_with_their_limit() -> None:
    jobs = pd.DataFrame(
        {"submit": [0.0], "start": [10.0], "end": [5000.0], "walltime": [9000.0], "nodes": [2]}
    )
    model = ArrivalModel.fit(jobs, 100.0)
    assert model.runtime.tolist() == [9000.0]


def test_evaluation_scores_are_bounded_by_the_oracle(small_trace, small_sim) -> None:
    config = EvalConfig(segments=2, segment_events=150, samples=8, calibrate=True)
    result = evaluate(small_trace, config, sim=small_sim)
    assert result.events == 300 and len(result.periods) == 2
    assert result.predictions > 0 and len(result.pairs) > 0
    assert (result.pairs["actual"] > 0).all()
    assert (result.pairs["corrected"] <= result.pairs["naive"] + 1e-9).all()
    assert (result.pairs["expected"] <= result.pairs["naive"] + 1e-9).all()
    assert (result.pairs["calibrated"] <= result.pairs["naive"] + 1e-9).all()
    assert (result.pairs["conformal"] <= result.pairs["naive"] + 1e-9).all()
    for name in ("corrected", "calibrated", "conformal", "expected", "naive"):
        h = result.harvest[name]
        assert 0 < h["harvest"] / 3600 <= result.oracle_node_hours + 1e-9
        assert h["lost"] <= h["over_predicted"] * config.costs.commit_interval
    table = result.table()
    assert list(table["predictor"]) == [
        "corrected q=0.1",
        "calibrated q=0.1",
        "conformal q=0.1",
        "corrected expected",
        "naive",
    ]
    assert (table["yields"] <= table["blocks"]).all()
    # dearer commits only ever lose more
    dear = result.reaccount(BlockCosts(commit_interval=1800.0))
    for name in ("corrected", "calibrated", "conformal", "expected", "naive"):
        assert dear[name]["lost"] >= result.harvest[name]["lost"]


def test_cli_prints_the_table(tmp_path, traces_dir) -> None:
    plot = tmp_path / "w.png"
    result = CliRunner().invoke(
        windows,
        [
            str(traces_dir / "hpc2n.swf.gz"),
            "--max-events",
            "200",
            "--samples",
            "4",
            "--choose",
            "expected",
            "--plot",
            str(plot),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "naive" in result.output and "oracle" in result.output
    assert "corrected expected" in result.output and "q=0.1" not in result.output
    assert plot.stat().st_size > 10_000


def test_cli_names_a_bad_trace(tmp_path) -> None:
    bad = tmp_path / "bad.swf"
    bad.write_text("1 2 three\n")
    result = CliRunner().invoke(windows, [str(bad)])
    assert result.exit_code != 0
    assert "bad.swf" in result.output
