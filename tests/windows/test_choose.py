"""The expected-net-harvest block length: known optima, the brute-force optimum, and the
evaluation's accounting of the mode on a tiny trace counted by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from parsl_malleable.sim.trace_replay import simulate
from parsl_malleable.traces.schema import JOB_COLUMNS, JobTrace, MachineInfo
from parsl_malleable.windows.accounting import BlockCosts
from parsl_malleable.windows.choose import block_values, expected_lengths
from parsl_malleable.windows.evaluate import EvalConfig, evaluate

COSTS = BlockCosts(startup=60.0, commit_interval=60.0)


def _choose(samples: list[list[float]], naive: list[float], costs: BlockCosts = COSTS):
    return expected_lengths(np.array(samples, dtype=float), np.array(naive), costs)


def test_all_samples_equal_gives_that_length() -> None:
    # one certain window per node; a longer naive bound changes nothing
    out = _choose([[1000.0, 7200.0]] * 8, [1000.0, 86400.0])
    assert out.tolist() == [1000.0, 7200.0]


def test_free_blocks_take_the_longest_sample_but_never_past_naive() -> None:
    free = BlockCosts(startup=0.0, commit_interval=1.0)  # integer samples: nothing lost
    out = _choose([[100.0, 50.0], [3000.0, 9000.0], [700.0, 20.0]], [5000.0, 4000.0], free)
    assert out.tolist() == [3000.0, 4000.0]


def test_a_start_up_longer_than_any_window_gives_no_block() -> None:
    out = _choose([[1000.0], [2000.0], [86400.0]], [86400.0], BlockCosts(startup=1e6))
    assert out.tolist() == [0.0]


def test_a_dear_yield_shortens_the_block() -> None:
    # L = 5000: (1000 + 5000)/2 - 60 - 40/2 (cut at 1000: 940 s useful, 40 since the last
    # commit) = 2920; L = 1000: 1000 - 60 - 60/2 (renewed half the time) = 910
    samples = [[1000.0], [5000.0]]
    assert _choose(samples, [86400.0]).tolist() == [5000.0]
    values = block_values(np.array([[1000.0], [5000.0]]), np.array(samples), COSTS)
    assert values[:, 0].tolist() == pytest.approx([910.0, 2920.0])
    dear = BlockCosts(startup=60.0, commit_interval=60.0, yield_penalty=10_000.0)
    assert _choose(samples, [86400.0], dear).tolist() == [1000.0]


def test_choice_beats_every_length_on_a_grid() -> None:
    rng = np.random.default_rng(4)
    costs = BlockCosts(startup=120.0, commit_interval=900.0, yield_penalty=300.0)
    samples = np.round(rng.exponential(3000.0, size=(16, 40)))
    naive = np.round(rng.uniform(500.0, 20000.0, size=40))
    chosen = expected_lengths(samples, naive, costs)
    assert np.all(chosen <= naive)
    grid = np.linspace(0.0, 1.0, 401)[:, None] * naive[None, :]
    best_grid = block_values(grid, samples, costs).max(axis=0)
    got = block_values(chosen[None, :], samples, costs)[0]
    got = np.where(chosen > 0, got, 0.0)  # no block: nothing earned, nothing lost
    assert np.all(got >= np.maximum(best_grid, 0.0) - 1e-9)


def test_no_samples_fall_back_to_naive_and_bad_shapes_are_named() -> None:
    out = expected_lengths(np.empty((0, 2)), np.array([30.0, 500.0]), COSTS)
    assert out.tolist() == [30.0, 500.0]
    with pytest.raises(ValueError, match="shape"):
        expected_lengths(np.zeros((4, 3)), np.zeros(2), COSTS)


def _tiny_trace() -> JobTrace:
    """Two nodes, every job submitted at 0 and running exactly its limit, so the schedule (and
    every window) is known in advance: 30 one-node warm-up jobs of 10 s (0-150), then
    A (1 node, 1000 s) on node 0 at 150; B (2 nodes, 500 s) waits for A; C (1 node, 400 s)
    backfills node 1 at 150 and F (1 node, 30 s) at 550; node 1 idles 580-1150 (570 s).
    B runs 1150-1650; D (1 node, 2000 s) on node 0; E (2 nodes, 100 s) waits for D: node 1
    idles 1650-3650 (2000 s). G (1 node, 10 s) is submitted at 3750, where the replay's
    statistics window ends; the evaluated period runs from the first event after the warm-up
    (550) to the last one before 3750 (3650)."""
    rows = [(1, 10.0)] * 30 + [(1, 1000.0), (2, 500.0), (1, 400.0)]
    rows += [(1, 2000.0), (2, 100.0), (1, 30.0), (1, 10.0)]
    n = len(rows)
    jobs = pd.DataFrame(
        {
            "job_id": np.arange(1, n + 1),
            "submit": np.r_[np.zeros(n - 1), 3750.0],
            "start": np.full(n, np.nan),
            "end": np.full(n, np.nan),
            "walltime": [r for _, r in rows],
            "nodes_req": [k for k, _ in rows],
            "nodes": [k for k, _ in rows],
            "cores_req": np.full(n, -1),
            "cores": np.full(n, -1),
            "queue": ["q"] * n,
            "user": ["u"] * n,
        }
    )
    jobs["start"] = 0.0  # the simulator replays runtimes end - start
    jobs["end"] = jobs["walltime"]
    jobs = jobs.astype(JOB_COLUMNS)
    return JobTrace(jobs, MachineInfo("tiny", 2))


@pytest.mark.parametrize(
    ("startup", "harvest"),
    [(60.0, (570 - 60) + (2000 - 60)), (700.0, 2000 - 700)],  # a 570 s hole is not worth 700 s
)
def test_evaluation_accounts_the_expected_mode_as_counted_by_hand(startup, harvest) -> None:
    trace = _tiny_trace()
    sim = simulate(trace, "easy")
    config = EvalConfig(
        costs=BlockCosts(startup=startup, commit_interval=60.0),
        segments=1,
        segment_events=None,
        arrivals=False,
        samples=8,
    )
    result = evaluate(trace, config, sim=sim)
    h = result.harvest["expected"]
    assert h["harvest"] == pytest.approx(harvest)
    assert h["blocks"] == (2 if startup == 60.0 else 1)
    assert h["over_predicted"] == 0 and h["lost"] == 0
    assert result.oracle_node_hours * 3600 == pytest.approx(harvest)
    predicted, actual, _ = result.blocks["expected"]
    assert sorted(predicted.tolist()) == sorted(actual.tolist())  # every window exact
    first = result.pairs[result.pairs["t"] == 580.0]
    assert first["expected"].tolist() == [570.0 if startup == 60.0 else 0.0]
    table = result.table()
    assert list(table["predictor"]) == ["corrected q=0.1", "corrected expected", "naive"]
