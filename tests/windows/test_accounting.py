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
        np.array([0, 0, 1]),
        np.array([0.0, 500.0, 100.0]),
        np.array([200.0, 900.0, 2000.0]),
        t0=50.0,
        t1=1000.0,
    )

    def rem(node: int, t: float) -> float:
        return float(timeline.remaining(np.array([node]), t)[0])

    assert rem(0, 100.0) == pytest.approx(100.0)
    assert rem(0, 300.0) == 0.0
    assert rem(0, 500.0) == pytest.approx(400.0)
    assert rem(0, 900.0) == 0.0
    assert rem(2, 100.0) == 0.0  # a node that is never idle
    assert rem(1, 100.0) == pytest.approx(900.0)  # clipped at t1
    assert rem(1, 60.0) == 0.0  # before its interval
    both = timeline.remaining(np.array([1, 0]), 150.0)
    assert both.tolist() == [850.0, 50.0]
    assert sorted(timeline.lengths().tolist()) == [150.0, 400.0, 900.0]


def test_policy_places_blocks_only_on_free_nodes_and_long_predictions() -> None:
    timeline = IdleTimeline(np.array([0]), np.array([0.0]), np.array([1000.0]), 0.0, 5000.0)
    state = PolicyState(1)
    node = np.array([0])
    nodes, wake = state.place(node, 0.0, np.array([30.0]), timeline, COSTS)  # below start-up
    assert state.free(node, 0.0)[0] and len(nodes) == 0
    nodes, wake = state.place(node, 0.0, np.array([400.0]), timeline, COSTS)
    assert nodes.tolist() == [0] and wake.tolist() == [400.0]  # ends while still idle
    assert not state.free(node, 399.0)[0] and state.free(node, 400.0)[0]
    state.place(node, 100.0, np.array([400.0]), timeline, COSTS)  # holds a block: ignored
    nodes, _ = state.place(node, 400.0, np.array([9000.0]), timeline, COSTS)
    assert len(nodes) == 0 and state.free(node, 1000.0)[0]
    out = state.summary(COSTS)
    assert out["blocks"] == 2 and out["over_predicted"] == 1
