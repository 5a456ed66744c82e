"""Block-policy accounting: start-up, lost work since the last commit, oracle, censoring."""

from __future__ import annotations

import numpy as np
import pytest

from parsl_malleable.windows.accounting import (
    BlockCosts,
    IdleTimeline,
    PolicyState,
    block_harvest,
    oracle_harvest,
)

COSTS = BlockCosts(startup=60.0, commit_interval=100.0)


def test_exact_prediction_harvests_all_but_startup() -> None:
    out = block_harvest(np.array([1000.0]), np.array([1000.0]), COSTS)
    assert out["harvest"] == pytest.approx(940.0)
    assert out["lost"] == 0 and out["over_predicted"] == 0


def test_over_prediction_loses_work_since_last_commit() -> None:
    # runs 1000 s, 940 useful, commits at 100, 200, ... 900: 40 s lost
    out = block_harvest(np.array([5000.0]), np.array([1000.0]), COSTS)
    assert out["over_predicted"] == 1
    assert out["lost"] == pytest.approx(40.0)
    assert out["harvest"] == pytest.approx(900.0)


def test_under_prediction_leaves_the_rest_unharvested() -> None:
    out = block_harvest(np.array([400.0]), np.array([1000.0]), COSTS)
    assert out["harvest"] == pytest.approx(340.0)


def test_block_killed_during_startup_costs_node_time() -> None:
    out = block_harvest(np.array([5000.0]), np.array([30.0]), COSTS)
    assert out["harvest"] == pytest.approx(-30.0)


def test_censored_windows_are_not_over_predictions() -> None:
    out = block_harvest(np.array([5000.0]), np.array([1000.0]), COSTS, np.array([True]))
    assert out["over_predicted"] == 0 and out["lost"] == 0


def test_oracle_takes_every_interval_longer_than_startup() -> None:
    assert oracle_harvest(np.array([30.0, 60.0, 160.0, 1060.0]), COSTS) == pytest.approx(1100.0)


def test_timeline_remaining_and_clipping() -> None:
    timeline = IdleTimeline(
        np.array(["a", "a", "b"]),
        np.array([0.0, 500.0, 100.0]),
        np.array([200.0, 900.0, 2000.0]),
        t0=50.0,
        t1=1000.0,
    )
    assert timeline.remaining("a", 100.0) == pytest.approx(100.0)
    assert timeline.remaining("a", 300.0) == 0.0
    assert timeline.remaining("a", 500.0) == pytest.approx(400.0)
    assert timeline.remaining("a", 900.0) == 0.0
    assert timeline.remaining("c", 0.0) == 0.0
    assert timeline.remaining("b", 100.0) == pytest.approx(900.0)  # clipped at t1
    assert sorted(timeline.lengths().tolist()) == [150.0, 400.0, 900.0]


def test_policy_places_blocks_only_on_free_nodes_and_long_predictions() -> None:
    timeline = IdleTimeline(np.array(["a"]), np.array([0.0]), np.array([1000.0]), t1=5000.0)
    state = PolicyState.empty()
    state.place("a", 0.0, 30.0, timeline, COSTS)  # shorter than the start-up: no block
    assert state.free("a", 0.0) and not state.predicted
    state.place("a", 0.0, 400.0, timeline, COSTS)
    assert not state.free("a", 399.0) and state.free("a", 400.0)
    state.place("a", 400.0, 9000.0, timeline, COSTS)
    assert state.free("a", 1000.0)
    out = state.summary(COSTS)
    assert out["blocks"] == 2 and out["over_predicted"] == 1
