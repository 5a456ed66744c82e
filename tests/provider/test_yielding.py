"""The yield decision on hand-built snapshots."""

from __future__ import annotations

import dataclasses

from parsl_malleable.harvest.yielding import (
    blocks_in_the_way,
    blocks_on_unavailable_nodes,
    first_native_use,
    reservation_in_the_way,
    snapshot_without_blocks,
)
from parsl_malleable.snapshot import NodeState, Reservation

from .snapshots import NOW, block, machine, native, queued


def test_nothing_to_yield_while_the_plan_holds() -> None:
    snap = machine(
        [native("r1", ("n1", "n2"), 540), block("b1", ("n3", "n4"), 480)],
        [queued("big", 6, 600)],
    )
    assert blocks_in_the_way(snap, {"b1": NOW + 480}) == {}
    assert first_native_use(snap, {"b1": NOW + 480})["b1"] == NOW + 540


def test_early_end_makes_the_block_yield() -> None:
    # r1 ended early: the 6-node job could start now if our blocks were not there.
    snap = machine(
        [block("b1", ("n3", "n4"), 480), block("b2", ("n5", "n6"), 480)],
        [queued("big", 6, 600)],
    )
    found = blocks_in_the_way(snap, {"b1": NOW + 480, "b2": NOW + 480})
    assert set(found) == {"b1", "b2"}
    assert all(when == NOW for when in found.values())


def test_a_job_that_fits_elsewhere_needs_no_yield() -> None:
    # 4 idle native nodes suffice for the 4-node job: our block is not in its way.
    snap = machine([block("b1", ("n3", "n4"), 480)], [queued("mid", 4, 600)])
    assert blocks_in_the_way(snap, {"b1": NOW + 480}) == {}


def test_only_the_block_in_the_way_yields() -> None:
    # All native nodes busy; a 1-node job arrives. It needs one of our nodes, and the plan
    # takes the block that ends soonest, so only that block yields.
    snap = machine(
        [
            native("r1", ("n1", "n2"), 900),
            block("b1", ("n3", "n4"), 480),
            block("b2", ("n5", "n6"), 300),
        ],
        [queued("small", 1, 120)],
    )
    found = blocks_in_the_way(snap, {"b1": NOW + 480, "b2": NOW + 300})
    assert set(found) == {"b2"}


def test_a_block_ending_before_the_job_could_start_stays() -> None:
    # The 3-node job could start when r1 ends (NOW+200) on n1,n2 plus one of ours, but b1
    # ends at NOW+150: no delay.
    snap = machine(
        [native("r1", ("n1", "n2", "n5", "n6"), 200), block("b1", ("n3", "n4"), 150)],
        [queued("wide", 6, 600)],
    )
    assert blocks_in_the_way(snap, {"b1": NOW + 150}) == {}
    assert blocks_in_the_way(snap, {"b1": NOW + 250}) == {"b1": NOW + 200}


def test_freed_snapshot_puts_our_nodes_last_and_idle() -> None:
    snap = machine(
        [native("r1", ("n1",), 500), block("b1", ("n2", "n3"), 400), block("b2", ("n4",), 100)],
        [queued("q", 2, 60), queued("mine", 1, 60, ours=True)],
    )
    freed = snapshot_without_blocks(snap, {"b1": NOW + 400, "b2": NOW + 100})
    assert [n.name for n in freed.nodes] == ["n1", "n5", "n6", "n4", "n2", "n3"]
    assert all(n.state is NodeState.IDLE for n in freed.nodes if n.name != "n1")
    assert [j.job_id for j in freed.running] == ["r1"]
    assert [j.job_id for j in freed.pending] == ["q"]


def test_no_blocks_no_work() -> None:
    snap = machine([native("r1", ("n1",), 500)], [queued("q", 6, 60)])
    assert blocks_in_the_way(snap, {}) == {}
    assert first_native_use(snap, {}) == {}
    # No queued job ever needs the node: the plan's horizon (a week), far past any deadline.
    never = first_native_use(machine([block("b", ("n1",), 9)]), {"b": NOW + 9})["b"]
    assert never >= NOW + 7 * 86400


def test_a_block_on_a_drained_or_down_node_must_go_whatever_the_queue() -> None:
    snap = machine([block("b1", ("n3", "n4"), 480), block("b2", ("n5",), 480)])
    nodes = [
        dataclasses.replace(n, state=NodeState.DRAINED) if n.name == "n4" else n for n in snap.nodes
    ]
    snap = dataclasses.replace(snap, nodes=nodes)
    assert blocks_on_unavailable_nodes(snap, {"b1", "b2"}) == {"b1": "n4 drained"}
    down = dataclasses.replace(
        snap,
        nodes=[dataclasses.replace(n, state=NodeState.DOWN) if n.name == "n5" else n
               for n in snap.nodes],
    )  # fmt: skip
    assert set(blocks_on_unavailable_nodes(down, {"b1", "b2"})) == {"b1", "b2"}
    assert blocks_on_unavailable_nodes(down, {"b2"}) == {"b2": "n5 down"}


def test_the_reservation_that_takes_a_block_first_is_named() -> None:
    late = Reservation("late", ("n3",), NOW + 400, NOW + 900)
    early = Reservation("maint", ("n3", "n4"), NOW + 200, NOW + 900)
    other = Reservation("other", ("n1",), NOW + 100, NOW + 900)
    snap = dataclasses.replace(machine([]), reservations=[late, early, other])
    assert reservation_in_the_way(snap, ("n3", "n4"), NOW + 480) == early
    assert reservation_in_the_way(snap, ("n3", "n4"), NOW + 150) is None
    assert reservation_in_the_way(snap, ("n5",), NOW + 480) is None


def test_the_queue_watch_sees_arrivals_and_ends_of_native_jobs_only() -> None:
    from parsl_malleable.harvest.sites import queue_signature_of, snapshot_signature

    snap = machine(
        [native("r1", ("n1", "n2"), 540), block("b1", ("n3",), 480)], [queued("q1", 2, 600)]
    )
    same = "r1 R native-job\nb1 R pm-block-harvest-0\nq1 PD big\n"
    assert queue_signature_of(same) == snapshot_signature(snap)
    arrived = same + "q2 PD another\n"
    assert queue_signature_of(arrived) != snapshot_signature(snap)
    ended = "b1 R pm-block-harvest-0\nq1 PD big\n"
    assert queue_signature_of(ended) != snapshot_signature(snap)
    started = "r1 R native-job\nq1 R big\n"
    assert queue_signature_of(started) != snapshot_signature(snap)


def test_a_block_planned_to_end_just_before_a_queued_start_yields_ahead_of_it() -> None:
    # r1's limit ends in 40 s; the 6-node job is planned then, on b1's nodes too. b1's
    # deadline is 35 s away, 5 s before the planned start: fine if it ends on time, but its
    # end may come up to 6 s late (walltime margin + teardown).
    snap = machine(
        [native("r1", ("n1", "n2", "n5", "n6"), 40), block("b1", ("n3", "n4"), 35)],
        [queued("wide", 6, 600)],
    )
    deadlines = {"b1": NOW + 35}
    assert blocks_in_the_way(snap, deadlines) == {}  # without a lead: its deadline comes first
    # A yield takes 10 s here (poll, grace, teardown): 40 s away, not yet.
    assert blocks_in_the_way(snap, deadlines, lead_s=10, overrun_s=6) == {}
    # 45 s of lead: the next poll would be too late, so it goes now.
    assert blocks_in_the_way(snap, deadlines, lead_s=45, overrun_s=6) == {"b1": NOW + 40}
    # A block sure to be gone before the start (overrun 4 s: deadline + 4 < start) stays.
    assert blocks_in_the_way(snap, deadlines, lead_s=45, overrun_s=4) == {}
