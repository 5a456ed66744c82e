"""Bad snapshots: clear errors for contradictions, resolved notes for real-life oddities."""

from __future__ import annotations

import math

import pytest

from parsl_malleable.errors import SnapshotError
from parsl_malleable.snapshot import (
    Node,
    NodeState,
    PendingJob,
    Reservation,
    RunningJob,
    Snapshot,
)
from parsl_malleable.windows.validate import check_snapshot

IDL, A, D = NodeState.IDLE, NodeState.ALLOCATED, NodeState.DOWN


def _nodes(*states: NodeState, partitions: tuple[str, ...] = ()) -> list[Node]:
    return [Node(f"n{i}", s, partitions) for i, s in enumerate(states)]


def test_clean_snapshot_resolves_nothing() -> None:
    snap = Snapshot(
        now=100.0,
        nodes=_nodes(A, IDL),
        running=[RunningJob("r1", ("n0",), 0.0, 500.0)],
        pending=[PendingJob("p1", 2, 300.0, 50.0)],
    )
    checked = check_snapshot(snap)
    assert checked.idle == ["n1"] and checked.usable == ["n0", "n1"]
    assert checked.running_limits == [500.0] and checked.pending_limits == [300.0]
    assert checked.notes == [] and checked.skipped == []


def test_missing_limits_use_the_default_else_unlimited() -> None:
    nodes = _nodes(A, IDL)
    running = [RunningJob("r1", ("n0",), 0.0, None)]
    pending = [PendingJob("p1", 1, None, 0.0)]
    with_default = check_snapshot(Snapshot(10.0, nodes, running, pending, default_time_limit=60.0))
    assert with_default.running_limits == [60.0] and with_default.pending_limits == [60.0]
    unlimited = check_snapshot(Snapshot(10.0, nodes, running, pending))
    assert math.isinf(unlimited.running_limits[0]) and math.isinf(unlimited.pending_limits[0])
    assert any("r1" in n and "unlimited" in n for n in unlimited.notes)


@pytest.mark.parametrize("limit", [0.0, -5.0, float("nan")])
def test_nonpositive_limit_is_an_error_naming_the_job(limit: float) -> None:
    snap = Snapshot(0.0, _nodes(IDL), pending=[PendingJob("bad7", 1, limit, 0.0)])
    with pytest.raises(SnapshotError, match="bad7"):
        check_snapshot(snap)


def test_down_nodes_are_neither_holes_nor_usable() -> None:
    checked = check_snapshot(Snapshot(0.0, _nodes(IDL, D, NodeState.DRAINED, IDL)))
    assert checked.idle == ["n0", "n3"]
    assert checked.usable == ["n0", "n3"]


def test_job_larger_than_partition_is_skipped_not_blocking() -> None:
    nodes = _nodes(IDL, IDL, D)
    snap = Snapshot(
        0.0, nodes, pending=[PendingJob("huge", 3, 60.0, 0.0), PendingJob("ok", 2, 60.0, 0.0)]
    )
    checked = check_snapshot(snap)
    assert [j.job_id for j in checked.pending] == ["ok"]
    assert checked.skipped and checked.skipped[0][0] == "huge"
    assert "3 nodes" in checked.skipped[0][1]


def test_partition_sizes_count_only_its_nodes() -> None:
    nodes = [Node("a", IDL, ("small",)), Node("b", IDL, ("big",)), Node("c", IDL, ("big",))]
    snap = Snapshot(0.0, nodes, pending=[PendingJob("p", 2, 60.0, 0.0, partition="small")])
    checked = check_snapshot(snap)
    assert checked.skipped[0][0] == "p" and "partition 'small'" in checked.skipped[0][1]


def test_overdue_running_job_ends_now() -> None:
    snap = Snapshot(1000.0, _nodes(A), running=[RunningJob("late", ("n0",), 0.0, 600.0)])
    checked = check_snapshot(snap)
    assert checked.running_limits == [1000.0]
    assert any("late" in n for n in checked.notes)


@pytest.mark.parametrize(
    ("running", "match"),
    [
        ([RunningJob("r", ("zz",), 0.0, 10.0)], "unknown node 'zz'"),
        ([RunningJob("r", ("n0",), 0.0, 10.0), RunningJob("s", ("n0",), 0.0, 10.0)], "both"),
        ([RunningJob("r", ("n1",), 0.0, 10.0)], "idle but held"),
        ([RunningJob("r", ("n0",), 50.0, 10.0)], "after the snapshot"),
        ([RunningJob("r", (), 0.0, 10.0)], "holds no nodes"),
    ],
)
def test_contradictions_raise(running: list[RunningJob], match: str) -> None:
    with pytest.raises(SnapshotError, match=match):
        check_snapshot(Snapshot(10.0, _nodes(A, IDL), running=running))


def test_duplicate_nodes_and_bad_settings_raise() -> None:
    with pytest.raises(SnapshotError, match="listed twice"):
        check_snapshot(Snapshot(0.0, [Node("x", IDL), Node("x", IDL)]))
    with pytest.raises(SnapshotError, match="backfill"):
        check_snapshot(Snapshot(0.0, _nodes(IDL), backfill="fcfs-ish"))
    with pytest.raises(SnapshotError, match="asks for 0 nodes"):
        check_snapshot(Snapshot(0.0, _nodes(IDL), pending=[PendingJob("z", 0, 5.0, 0.0)]))


def test_orphan_allocated_nodes_never_free() -> None:
    checked = check_snapshot(Snapshot(0.0, _nodes(A, IDL)))
    assert checked.usable == ["n1"]
    assert any("never free" in n for n in checked.notes)


def test_reservations_cap_idle_nodes() -> None:
    snap = Snapshot(
        100.0,
        _nodes(IDL, IDL),
        reservations=[
            Reservation("maint", ("n0",), 400.0, 900.0, maintenance=True),
            Reservation("old", ("n1",), 0.0, 50.0),
        ],
    )
    checked = check_snapshot(snap)
    assert checked.reserved_from == {"n0": 400.0}
