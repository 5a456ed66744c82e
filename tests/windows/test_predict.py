"""The planner and predict() on hand-built snapshots with known answers, and properties."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parsl_malleable.errors import SnapshotError
from parsl_malleable.sim.queue_forecast import plan_queue
from parsl_malleable.snapshot import (
    Node,
    NodeState,
    PendingJob,
    Reservation,
    RunningJob,
    Snapshot,
)
from parsl_malleable.windows.accounting import BlockCosts
from parsl_malleable.windows.arrivals import ArrivalModel
from parsl_malleable.windows.choose import expected_lengths
from parsl_malleable.windows.predict import WindowPredictor, predict
from parsl_malleable.windows.runtime_model import JobKey, RuntimeRatioModel

IDL, BUSY = NodeState.IDLE, NodeState.ALLOCATED


def _snap(pending: list[PendingJob], backfill: str = "easy", **kw) -> Snapshot:
    """4 nodes: n0, n1 run job r until t=1000 (its limit); n2, n3 idle; now = 0."""
    nodes = [Node("n0", BUSY), Node("n1", BUSY), Node("n2", IDL), Node("n3", IDL)]
    running = [RunningJob("r", ("n0", "n1"), -100.0, 1100.0, user="u")]
    return Snapshot(0.0, nodes, running, pending, backfill=backfill, **kw)


def _ends(windows) -> dict[str, float]:
    return {n: w.end for w in windows for n in w.nodes}


def test_head_job_needs_both_idle_nodes_when_the_running_job_ends() -> None:
    windows = predict(_snap([PendingJob("p", 4, 500.0, 0.0)]))
    assert _ends(windows) == {"n2": 1000.0, "n3": 1000.0}
    assert len(windows) == 1 and windows[0].confidence == 1.0


def test_node_a_job_backfills_now_is_not_a_hole() -> None:
    pending = [PendingJob("p", 4, 500.0, 0.0), PendingJob("b", 1, 100.0, 0.0)]
    assert _ends(predict(_snap(pending))) == {"n3": 1000.0}


def test_backfill_that_would_delay_the_head_does_not_start() -> None:
    pending = [PendingJob("p", 4, 500.0, 0.0), PendingJob("b", 1, 2000.0, 0.0)]
    assert _ends(predict(_snap(pending))) == {"n2": 1000.0, "n3": 1000.0}


def test_spare_node_of_the_reservation_is_backfilled_lowest_id_first() -> None:
    # p takes 3 of 4 nodes at 1000, so b (2000 s) fits now on the lowest idle id, n2;
    # p then takes n0, n1 and n3
    pending = [PendingJob("p", 3, 500.0, 0.0), PendingJob("b", 1, 2000.0, 0.0)]
    assert _ends(predict(_snap(pending))) == {"n3": 1000.0}


def test_empty_queue_leaves_nodes_idle_until_the_horizon() -> None:
    windows = predict(_snap([]), horizon=3600.0)
    assert _ends(windows) == {"n2": 3600.0, "n3": 3600.0}


def test_conservative_second_job_waits_for_the_first() -> None:
    # conservative: p takes n0-n2 on [1000, 1500); q needs all 4 nodes, so n3 waits for it
    pending = [PendingJob("p", 3, 500.0, 0.0), PendingJob("q", 4, 300.0, 0.0)]
    ends = _ends(predict(_snap(pending, backfill="conservative")))
    assert ends == {"n2": 1000.0, "n3": 1500.0}


def test_reservation_caps_the_window() -> None:
    snap = _snap([], reservations=[Reservation("maint", ("n3",), 600.0, 900.0, True)])
    assert _ends(predict(snap, horizon=3600.0)) == {"n2": 3600.0, "n3": 600.0}


def test_down_nodes_and_impossible_jobs() -> None:
    snap = _snap([PendingJob("huge", 5, 10.0, 0.0), PendingJob("p", 3, 500.0, 0.0)])
    snap.nodes[3] = Node("n3", NodeState.DOWN)
    # huge can never run (skipped); p needs n0, n1 and n2 when r ends; n3 is down: no hole
    assert _ends(predict(snap)) == {"n2": 1000.0}


def test_missing_limits_follow_the_default() -> None:
    nodes = [Node("n0", BUSY), Node("n1", IDL)]
    running = [RunningJob("r", ("n0",), 0.0, None)]
    pending = [PendingJob("p", 2, None, 0.0)]
    with_default = Snapshot(10.0, nodes, running, pending, default_time_limit=100.0)
    assert _ends(predict(with_default)) == {"n1": 100.0}
    unlimited = Snapshot(10.0, nodes, running, pending)
    assert _ends(predict(unlimited, horizon=500.0)) == {"n1": 510.0}


def test_contradictory_snapshot_raises() -> None:
    snap = _snap([])
    snap.running.append(RunningJob("x", ("n2",), 0.0, 10.0))
    with pytest.raises(SnapshotError, match="idle but held"):
        predict(snap)


def _history(ratio: float, n: int = 50) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "start": np.zeros(n),
            "end": np.full(n, ratio * 1000.0),
            "walltime": np.full(n, 1000.0),
            "nodes": np.full(n, 2),
            "queue": [""] * n,
            "user": ["u"] * n,
        }
    )


def test_early_ends_shorten_the_window() -> None:
    # r has used 100 of 1100 s; history says jobs use half their limit: r ends near 550
    model = RuntimeRatioModel.fit(_history(0.5))
    windows = predict(_snap([PendingJob("p", 4, 500.0, 0.0)]), 0.5, model=model, samples=16)
    assert _ends(windows) == {"n2": pytest.approx(450.0), "n3": pytest.approx(450.0)}


def test_quantile_is_a_lower_bound_with_the_stated_confidence() -> None:
    ratios = np.linspace(0.1, 1.0, 200)
    hist = pd.concat([_history(r, 1) for r in ratios], ignore_index=True)
    predictor = WindowPredictor(model=RuntimeRatioModel.fit(hist), samples=200, seed=3)
    snap = _snap([PendingJob("p", 4, 500.0, 0.0)])
    nw = predictor.node_windows(snap)
    short, long = nw.length(0.1), nw.length(0.9)
    assert np.all(short <= long) and np.all(long <= nw.naive)
    (window,) = predictor.predict(snap, 0.1)
    assert window.confidence >= 0.9
    assert window.end == pytest.approx(float(short.min()))


def test_arrivals_take_idle_nodes() -> None:
    day = 86400.0
    # every day, a 1-node job arrives one hour into the day and runs 2 h
    history = pd.DataFrame(
        {
            "submit": np.arange(7) * day + 3600.0,
            "start": np.arange(7) * day + 3600.0,
            "end": np.arange(7) * day + 3 * 3600.0,
            "walltime": np.full(7, 4 * 3600.0),
            "nodes": np.ones(7, dtype=np.int64),
        }
    )
    now = 7 * day
    arrivals = ArrivalModel.fit(history, now)
    nodes = [Node("a", IDL), Node("b", IDL)]
    windows = predict(Snapshot(now, nodes), 0.5, arrivals=arrivals, horizon=day, samples=8)
    assert _ends(windows) == {"a": now + 3600.0, "b": now + day}


@st.composite
def snapshots(draw) -> Snapshot:
    n = draw(st.integers(2, 12))
    states = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    nodes = [Node(f"n{i}", IDL if idle else BUSY) for i, idle in enumerate(states)]
    busy = [f"n{i}" for i, idle in enumerate(states) if not idle]
    running = []
    while busy:
        take = draw(st.integers(1, len(busy)))
        limit = draw(st.floats(10.0, 5000.0))
        running.append(RunningJob(f"r{len(running)}", tuple(busy[:take]), -5.0, limit))
        busy = busy[take:]
    pending = [
        PendingJob(f"p{i}", draw(st.integers(1, n)), draw(st.floats(10.0, 5000.0)), 0.0)
        for i in range(draw(st.integers(0, 8)))
    ]
    return Snapshot(
        0.0, nodes, running, pending, backfill=draw(st.sampled_from(["easy", "conservative"]))
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_holes_never_overlap_a_planned_reservation(snap: Snapshot) -> None:
    plan = plan_queue(
        snap.now,
        snap.idle_nodes(),
        [(j.start + j.time_limit, j.nodes) for j in snap.running],
        [(j.num_nodes, j.time_limit) for j in snap.pending],
        snap.backfill,
        node_order=[n.name for n in snap.nodes],
    )
    windows = predict(snap, horizon=1e6)
    for w in windows:
        assert w.end > snap.now
        for start, planned in zip(plan.starts, plan.nodes, strict=True):
            if start < w.end:
                assert not set(planned) & set(w.nodes)
    # grouping only shortens: each node's window ends by its own first planned use
    needed_at = {n: snap.now + d for n, d in plan.node_needed.items()}
    for w in windows:
        assert all(w.end <= needed_at[n] + 1e-9 for n in w.nodes)
    # and the per-node naive windows are exactly the simulator planner's "time until needed"
    nw = WindowPredictor(horizon=1e6).node_windows(snap)
    ends = dict(zip(nw.names, nw.naive, strict=True))
    for node, needed in plan.node_needed.items():
        if needed > 0:
            assert ends[node] == pytest.approx(min(needed, 1e6))
        else:
            assert node not in ends


def test_predictor_from_history_learns_both_models() -> None:
    day = 86400.0
    n = 40
    submit = np.linspace(0.0, 6 * day, n)
    history = pd.DataFrame(
        {
            "submit": submit,
            "start": submit,
            "end": submit + 250.0,
            "walltime": np.full(n, 1000.0),
            "nodes": np.full(n, 2),
            "queue": [""] * n,
            "user": ["u"] * n,
        }
    )
    now = 10 * day
    predictor = WindowPredictor.from_history(history, now, samples=8)
    assert predictor.model is not None and predictor.arrivals is not None
    assert predictor.model.quantile(JobKey(2, "", "u"), 0.5) == pytest.approx(0.25)
    recent = int(np.count_nonzero(submit >= now - 8 * day))  # the arrival model keeps 8 days
    assert 0 < recent < n and len(predictor.arrivals.submit) == recent
    ended_only = history[history["end"] <= 3 * day]
    early = WindowPredictor.from_history(ended_only, now, arrivals=False)
    assert early.arrivals is None and early.model.fitted


def test_expected_mode_chooses_per_node_from_the_draws_and_respects_costs() -> None:
    ratios = np.linspace(0.1, 1.0, 200)
    hist = pd.concat([_history(r, 1) for r in ratios], ignore_index=True)
    predictor = WindowPredictor(model=RuntimeRatioModel.fit(hist), samples=64, seed=3)
    snap = _snap([PendingJob("p", 4, 500.0, 0.0)])
    nw = predictor.node_windows(snap)
    costs = BlockCosts(startup=60.0, commit_interval=60.0)
    chosen = nw.expected(costs)
    assert np.array_equal(chosen, expected_lengths(nw.samples, nw.naive, costs))
    assert np.array_equal(nw.choose(None, costs), chosen)
    assert np.array_equal(nw.choose(0.1), nw.length(0.1))
    assert np.all((chosen >= nw.length(0.0)) & (chosen <= nw.naive))
    (window,) = predictor.predict(snap, None, costs=costs)
    assert window.end == pytest.approx(float(chosen.min()))
    # a start-up longer than any window: no block is worth it, no window offered
    assert predictor.predict(snap, None, costs=BlockCosts(startup=5000.0)) == []
    assert predict(snap, None, model=predictor.model, samples=64, seed=3) == predictor.predict(
        snap, None
    )
