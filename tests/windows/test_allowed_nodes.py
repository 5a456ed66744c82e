"""Queued jobs that may run only on some nodes (``PendingJob.allowed_nodes``): the planner places
them only there, with the real simulator (no mocks) and a brute-force reference."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parsl_malleable.sim.reference_masked import reference_masked
from parsl_malleable.snapshot import Node, NodeState, PendingJob, RunningJob, Snapshot
from parsl_malleable.windows.first_use import MAX_ATOMS, first_use_and_starts, plan_input
from parsl_malleable.windows.predict import WindowPredictor
from parsl_malleable.windows.validate import check_snapshot

IDL, BUSY, DOWN = NodeState.IDLE, NodeState.ALLOCATED, NodeState.DOWN
HORIZON = 1e6
A = ("a0", "a1", "a2")  # vnodes of queue A
B = ("b0", "b1", "b2")  # vnodes bound to queue B


def _windows(snap: Snapshot) -> dict[str, float]:
    """Naive window end per idle node that is a hole (absolute times)."""
    nw = WindowPredictor(horizon=HORIZON).node_windows(snap)
    return {n: snap.now + float(w) for n, w in zip(nw.names, nw.naive, strict=True)}


def _two_queues(idle: set[str], pending: list[PendingJob], backfill: str) -> Snapshot:
    """B's vnodes first (lowest ids: the old planner put any job there first), then A's; every
    busy vnode runs its own job until t=100; now = 0."""
    names = B + A
    nodes = [Node(n, IDL if n in idle else BUSY, ("B",) if n in B else ("A",)) for n in names]
    running = [RunningJob(f"r-{n}", (n,), -50.0, 150.0) for n in names if n not in idle]
    return Snapshot(0.0, nodes, running, pending, backfill=backfill)


def _job_of_a(size: int) -> PendingJob:
    return PendingJob("qa", size, 500.0, -1.0, "A", allowed_nodes=frozenset(A))


@pytest.mark.parametrize("backfill", ["easy", "conservative"])
def test_a_job_of_queue_a_does_not_cut_queue_b_s_windows(backfill: str) -> None:
    # every A vnode busy until 100, the B vnodes idle: the A job waits for an A vnode; it used
    # to be planned on b0 now, which hid that it waits
    snap = _two_queues(set(B), [_job_of_a(1)], backfill)
    assert _windows(snap) == {n: HORIZON for n in B}


@pytest.mark.parametrize("backfill", ["easy", "conservative"])
def test_an_idle_vnode_of_the_job_s_queue_ends_when_the_job_starts_there(backfill: str) -> None:
    # a2 idle: the 1-node A job starts there now, so a2 is no hole (the old planner put the job
    # on b0 and offered a2 for ever: the live case where a block held the job's only vnode)
    snap = _two_queues({*B, "a2"}, [_job_of_a(1)], backfill)
    assert _windows(snap) == {n: HORIZON for n in B}
    # a 3-node A job takes a2 when a0 and a1 end, at 100: a2's window ends then, B's never
    snap = _two_queues({*B, "a2"}, [_job_of_a(3)], backfill)
    assert _windows(snap) == {**{n: HORIZON for n in B}, "a2": 100.0}


@pytest.mark.parametrize("backfill", ["easy", "conservative"])
def test_a_job_that_can_use_only_idle_nodes_ends_their_windows_at_its_start(backfill) -> None:
    # a B job needs all three B vnodes; b0 is busy until 100, b1 and b2 idle (as are a1, a2):
    # b1 and b2 end at 100, when it starts; the A vnodes, which it may not use, stay free
    jb = PendingJob("qb", 3, 500.0, -1.0, "B", allowed_nodes=frozenset(B))
    snap = _two_queues({"b1", "b2", "a1", "a2"}, [jb], backfill)
    assert _windows(snap) == {"b1": 100.0, "b2": 100.0, "a1": HORIZON, "a2": HORIZON}


def test_a_job_with_too_few_usable_allowed_nodes_is_skipped_and_counted() -> None:
    nodes = [Node("a0", IDL), Node("a1", DOWN), Node("b0", IDL)]
    pending = [
        PendingJob("stuck", 2, 60.0, 0.0, allowed_nodes=frozenset({"a0", "a1", "gone"})),
        PendingJob("fits", 1, 60.0, 0.0, allowed_nodes=frozenset({"a0", "a1", "gone"})),
    ]
    checked = check_snapshot(Snapshot(0.0, nodes, [], pending))
    assert [j.job_id for j in checked.pending] == ["fits"]
    assert checked.skipped == [("stuck", "asks 2 nodes, 1 of its allowed nodes are usable")]
    assert any("stuck" in note and "skipped" in note for note in checked.notes)
    # the job that can start takes its own node now; b0 stays free
    assert _windows(Snapshot(0.0, nodes, [], pending)) == {"b0": HORIZON}


def test_more_node_sets_than_conservative_planning_handles_offers_no_node() -> None:
    n = MAX_ATOMS + 2
    nodes = [Node(f"n{i}", IDL) for i in range(n)] + [Node("busy", BUSY)]
    running = [RunningJob("r", ("busy",), 0.0, 100.0)]
    # each job may use one idle node or the busy one, and needs 2: every node its own group
    pending = [
        PendingJob(f"p{i}", 2, 50.0, 0.0, allowed_nodes=frozenset({f"n{i}", "busy"}))
        for i in range(n)
    ]
    snap = Snapshot(0.0, nodes, running, pending, backfill="conservative")
    nw = WindowPredictor(horizon=HORIZON).node_windows(snap)
    assert nw.names == [] and any("no idle node is offered" in x for x in nw.checked.notes)
    # EASY books no reservation per group, so it plans them: each job waits for "busy"
    snap.backfill = "easy"
    assert _windows(snap)["n0"] == 100.0


@st.composite
def snapshots(draw) -> Snapshot:
    """Up to 7 nodes, idle or busy until a few round times; up to 8 queued jobs, each free to
    use any node or one of up to 3 shared node sets (queues); EASY or conservative."""
    n = draw(st.integers(2, 7))
    names = [f"n{i}" for i in range(n)]
    idle = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    nodes = [Node(x, IDL if i else BUSY) for x, i in zip(names, idle, strict=True)]
    busy = [x for x, i in zip(names, idle, strict=True) if not i]
    running = []
    while busy:
        take = draw(st.integers(1, len(busy)))
        ends = 10.0 * draw(st.integers(1, 30))
        running.append(RunningJob(f"r{len(running)}", tuple(busy[:take]), -5.0, ends + 5.0))
        busy = busy[take:]
    sets = draw(st.lists(st.sets(st.sampled_from(names), min_size=1), min_size=1, max_size=3))
    pending = [
        PendingJob(
            f"p{i}",
            draw(st.integers(1, n)),
            10.0 * draw(st.integers(1, 30)),
            0.0,
            allowed_nodes=draw(st.one_of(st.none(), st.sampled_from(sets).map(frozenset))),
        )
        for i in range(draw(st.integers(0, 8)))
    ]
    return Snapshot(
        0.0, nodes, running, pending, backfill=draw(st.sampled_from(["easy", "conservative"]))
    )


def _reference_first_use(snap: Snapshot) -> dict[str, float]:
    """When the brute-force scheduler first places a queued job on each idle node (every job
    lasting its limit), from the snapshot itself."""
    names = [node.name for node in snap.nodes]
    index = {x: i for i, x in enumerate(names)}
    checked = check_snapshot(snap)  # which jobs can ever start
    pre = [[index[x] for x in job.nodes] for job in snap.running]
    est = [max(job.start + job.time_limit - snap.now, 1.0) for job in snap.running]
    est += [job.time_limit for job in checked.pending]
    k = [len(ids) for ids in pre] + [job.num_nodes for job in checked.pending]
    allowed = [None] * len(pre) + [
        None if job.allowed_nodes is None else sorted(index[x] for x in job.allowed_nodes)
        for job in checked.pending
    ]
    ref = reference_masked(
        len(names), snap.backfill, snap.now, [snap.now] * len(k), est, est, k, pre, allowed
    )
    first = dict.fromkeys(snap.idle_nodes(), math.inf)
    for j in range(len(pre), len(k)):
        for i in ref.nodes[j]:
            if names[i] in first:
                first[names[i]] = min(first[names[i]], ref.start[j])
    return first


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_windows_end_no_later_than_the_brute_force_first_use(snap: Snapshot) -> None:
    # the reference honours every job's node set; each idle node's window must end by the
    # first time it places a job there (equal: both follow the same rules)
    first = _reference_first_use(snap)
    ends = _windows(snap)
    for node, used in first.items():
        if used <= snap.now:
            assert node not in ends, f"{node} is taken now"
        else:
            assert ends[node] <= min(used, HORIZON), node
            assert ends[node] == min(used, HORIZON), node


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_blocks_on_the_windows_delay_no_queued_job(snap: Snapshot) -> None:
    # the product's rule: a block that holds an idle node until its window ends never makes a
    # queued native start later in the plan
    before = first_use_and_starts(plan := plan_input(check_snapshot(snap)), plan.naive_run())
    ends = _windows(snap)
    blocks = [
        RunningJob(f"blk-{n}", (n,), snap.now, end - snap.now, ours=True) for n, end in ends.items()
    ]
    nodes = [Node(x.name, BUSY) if x.name in ends else x for x in snap.nodes]
    with_blocks = Snapshot(
        snap.now, nodes, snap.running + blocks, snap.pending, backfill=snap.backfill
    )
    plan2 = plan_input(check_snapshot(with_blocks))
    # the planned starts do not depend on which nodes are asked about; ask about one, so that
    # the planner plays the queue even where blocks took every idle node
    plan2 = replace(plan2, idle_ids=np.zeros(1, dtype=np.int64), cap=np.full(1, math.inf))
    after = first_use_and_starts(plan2, plan2.naive_run())
    assert np.all(after[1][plan2.n_pre :] <= before[1][plan.n_pre :])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_sets_of_every_node_plan_as_no_sets(snap: Snapshot) -> None:
    whole = frozenset(node.name for node in snap.nodes)
    free = Snapshot(
        snap.now,
        snap.nodes,
        snap.running,
        [PendingJob(j.job_id, j.num_nodes, j.time_limit, j.submit) for j in snap.pending],
        backfill=snap.backfill,
    )
    every = Snapshot(
        snap.now,
        snap.nodes,
        snap.running,
        [
            PendingJob(j.job_id, j.num_nodes, j.time_limit, j.submit, allowed_nodes=whole)
            for j in free.pending
        ],
        backfill=snap.backfill,
    )
    assert plan_input(check_snapshot(every)).eligibility is None
    assert _windows(every) == _windows(free)


def test_draws_plan_restricted_jobs_with_arrivals_free_to_use_any_node() -> None:
    import pandas as pd

    from parsl_malleable.windows.arrivals import ArrivalModel

    day = 86400.0
    # every day a 1-node job arrives one hour in: it takes the lowest idle id, b0
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
    snap = _two_queues({*B, "a2"}, [_job_of_a(3)], "easy")
    snap = Snapshot(
        now,
        snap.nodes,
        [RunningJob(j.job_id, j.nodes, now - 50.0, 150.0) for j in snap.running],
        [PendingJob("qa", 3, 500.0, now - 1.0, allowed_nodes=frozenset(A))],
    )
    predictor = WindowPredictor(arrivals=ArrivalModel.fit(history, now), horizon=day, samples=4)
    nw = predictor.node_windows(snap)
    got = dict(zip(nw.names, nw.length(0.5), strict=True))
    assert got == {"b0": 3600.0, "b1": day, "b2": day, "a2": 100.0}
