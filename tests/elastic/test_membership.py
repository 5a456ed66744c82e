"""The membership state machine driven directly: no server, no sockets, no training.

Calls that block until an assignment (``join``, ``report``) run in a thread pool; everything
else answers at once. ``test_coordinator.py`` covers the same rules over TCP.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest

from parsl_malleable.elastic.backend_interface import RendezvousInfo, info_from_json
from parsl_malleable.elastic.membership import Loss, MemberPhase, Membership
from parsl_malleable.elastic.messages import Exit, Leave
from parsl_malleable.errors import ConfigError

REPLY_S = 30.0  # bound for a blocked call to be answered; not a timing assertion


class FakeRendezvous:
    """Records the epochs prepared; hands out a made-up address."""

    def __init__(self) -> None:
        self.prepared: list[tuple[int, int]] = []

    def prepare_epoch(self, epoch: int, world_size: int) -> RendezvousInfo:
        self.prepared.append((epoch, world_size))
        return RendezvousInfo("torch", "127.0.0.1", 1000 + epoch, epoch, world_size)


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(4) as executor:
        yield executor


Make = Callable[..., tuple[Membership, FakeRendezvous]]


@pytest.fixture
def make(pool: ThreadPoolExecutor) -> Iterator[Make]:
    """Memberships with ``settle_s`` 0, closed at the end (so no call stays blocked)."""
    made: list[Membership] = []

    def factory(**options: Any) -> tuple[Membership, FakeRendezvous]:
        rendezvous = FakeRendezvous()
        options.setdefault("settle_s", 0.0)
        made.append(Membership(rendezvous, **options))
        return made[-1], rendezvous

    yield factory
    for membership in made:  # before the pool's shutdown waits for blocked calls
        membership.closed.set()
        with membership.cond:
            membership.cond.notify_all()


def eventually(predicate: Callable[[], bool]) -> bool:
    """Whether ``predicate`` holds within ``REPLY_S`` (checked every 10 ms)."""
    deadline = time.monotonic() + REPLY_S
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def form_first(
    membership: Membership, pool: ThreadPoolExecutor, *names: str
) -> dict[str, dict[str, Any]]:
    """Register and join ``names``; epoch 1 forms with exactly them (``min_nodes`` is raised
    for this cold start only, so no earlier joiner starts alone). Their assignments."""
    wanted = membership.min_nodes
    membership.min_nodes = len(names)
    try:
        for name in names:
            assert membership.register(name, host="h", pid=1, block=f"b-{name}")
        futures = {name: pool.submit(membership.join, name) for name in names}
        return {name: f.result(REPLY_S) for name, f in futures.items()}
    finally:
        membership.min_nodes = wanted


def report(membership: Membership, pool: ThreadPoolExecutor, name: str, epoch: int, step: int):
    return pool.submit(membership.report, name, epoch=epoch, has_state=True, committed_step=step)


def test_bad_limits_are_refused(make: Make) -> None:
    with pytest.raises(ConfigError, match="min_nodes"):
        make(min_nodes=3, max_nodes=2)


def test_registering_twice_changes_nothing(make: Make) -> None:
    membership, _ = make()
    assert membership.register("a", host="h", pid=1, block=None)
    assert not membership.register("a", host="other", pid=2, block=None)
    assert [(m.member_id, m.host) for m in membership.members()] == [("a", "h")]


def test_a_cold_start_forms_one_epoch_with_every_joiner(
    make: Make, pool: ThreadPoolExecutor
) -> None:
    membership, rendezvous = make(min_nodes=2, max_nodes=4)
    replies = form_first(membership, pool, "a", "b")
    assert sorted(r.rank for r in replies.values()) == [0, 1]
    assert {r.action for r in replies.values()} == {"run"}
    assert {r.epoch for r in replies.values()} == {1}
    assert rendezvous.prepared == [(1, 2)]
    info = info_from_json(replies["a"].info)
    assert (info.port, info.world_size) == (1001, 2)
    assert replies["a"].known_step == -1
    assert membership.running_world_size() == 2
    assert [e["reason"] for e in membership.epochs()] == ["cold start"]


def test_a_newcomer_is_pending_and_joins_last_after_every_member_reports(
    make: Make, pool: ThreadPoolExecutor
) -> None:
    membership, _ = make(max_nodes=3)
    first = form_first(membership, pool, "a", "b")
    leader = min(first, key=lambda name: first[name].rank)
    assert membership.poll(1, step=1, samples=10) is False

    assert membership.register("c", host="h", pid=1, block="b-c")
    newcomer = pool.submit(membership.join, "c")
    # Pending once the newcomer has joined (its join runs in the pool).
    assert eventually(lambda: membership.poll(1, step=2, samples=20))
    ra = report(membership, pool, "a", 1, 2)
    assert not newcomer.done()  # b has not reported: no epoch can form
    rb = report(membership, pool, "b", 1, 2)
    second = {"a": ra.result(REPLY_S), "b": rb.result(REPLY_S), "c": newcomer.result(REPLY_S)}
    assert {r.epoch for r in second.values()} == {2}
    assert second[leader].rank == 0 and second["c"].rank == 2
    assert second["c"].known_step == 2
    assert [e["reason"] for e in membership.epochs()] == ["cold start", "membership change"]


def test_a_stale_epoch_always_sees_a_change(make: Make, pool: ThreadPoolExecutor) -> None:
    membership, _ = make()
    assert membership.poll(1, step=0, samples=0) is True  # no epoch yet
    form_first(membership, pool, "a")
    assert membership.poll(7, step=0, samples=0) is True
    assert membership.poll(1, step=0, samples=0) is False


def test_a_drained_member_leaves_without_saving_when_survivors_hold_the_state(
    make: Make, pool: ThreadPoolExecutor
) -> None:
    membership, _ = make()
    form_first(membership, pool, "a", "b")
    assert membership.drain(block_ids=["b-b"]) == ["b"]
    assert membership.poll(1, step=3, samples=30) is True
    ra, rb = report(membership, pool, "a", 1, 3), report(membership, pool, "b", 1, 3)
    assert rb.result(REPLY_S) == Leave(save=False)
    assert ra.result(REPLY_S).world_size == 1
    membership.left("b", saved_step=None)
    assert membership.live_members() == 1
    assert [e["event"] for e in membership.events()].count("left") == 1


def test_the_last_holder_of_the_state_saves_it_before_leaving(
    make: Make, pool: ThreadPoolExecutor
) -> None:
    membership, _ = make()
    form_first(membership, pool, "a")
    membership.drain(member_ids=["a"])
    assert report(membership, pool, "a", 1, 5).result(REPLY_S) == Leave(save=True)


def test_draining_a_member_not_yet_registered_applies_when_it_arrives(make: Make) -> None:
    membership, _ = make()
    assert membership.drain(member_ids=["late"]) == []
    membership.register("late", host="h", pid=1, block=None)
    assert membership.members()[0].leaving


def test_a_lost_member_names_its_epochs_peers_once(make: Make, pool: ThreadPoolExecutor) -> None:
    membership, _ = make()
    form_first(membership, pool, "a", "b")
    assert membership.lose("nobody", "connection closed") is None
    loss = membership.lose("b", "connection closed")
    assert loss == Loss(1, tuple(m.member_id for m in membership.current_members()))
    assert membership.lose("b", "again") is None
    assert membership.poll(1, step=1, samples=1) is True
    lost = [e for e in membership.events() if e["event"] == "lost"]
    assert [(e["member"], e["why"]) for e in lost] == [("b", "connection closed")]


def test_a_loss_after_the_end_tells_no_one(make: Make, pool: ThreadPoolExecutor) -> None:
    membership, _ = make()
    form_first(membership, pool, "a", "b")
    membership.finish("a", step=9, result=([1, 2],))
    assert membership.outcome == "done" and membership.result == ([1, 2],)
    assert membership.lose("b", "connection closed") == Loss()


def test_abort_sends_waiting_ranks_away(make: Make, pool: ThreadPoolExecutor) -> None:
    membership, _ = make(min_nodes=2)
    membership.register("a", host="h", pid=1, block=None)
    waiting: Future[Any] = pool.submit(membership.join, "a")
    membership.abort("user code failed")
    assert waiting.result(REPLY_S) == Exit(reason="aborted")
    assert membership.abort_message == "user code failed"


def test_closing_releases_a_blocked_join(make: Make, pool: ThreadPoolExecutor) -> None:
    membership, _ = make(min_nodes=2)
    membership.register("a", host="h", pid=1, block=None)
    waiting = pool.submit(membership.join, "a")
    membership.closed.set()
    with membership.cond:
        membership.cond.notify_all()
    assert waiting.result(REPLY_S) == Exit(reason="coordinator closed")


def test_a_failed_collective_is_logged_as_one_rollback(
    make: Make, pool: ThreadPoolExecutor
) -> None:
    membership, _ = make()
    form_first(membership, pool, "a", "b")
    reports = [
        pool.submit(
            membership.report,
            name,
            epoch=1,
            has_state=True,
            committed_step=4,
            reason="failure",
            attempted_step=5,
        )
        for name in ("a", "b")
    ]
    assert [r.result(REPLY_S).epoch for r in reports] == [2, 2]
    rollbacks = [e for e in membership.events() if e["event"] == "rollback"]
    assert len(rollbacks) == 1
    assert (rollbacks[0]["attempted_step"], rollbacks[0]["committed_step"]) == (5, 4)


def test_polls_measure_the_start_pause_then_throughput(
    make: Make, pool: ThreadPoolExecutor
) -> None:
    membership, _ = make(measure_every_s=0.0)
    form_first(membership, pool, "a")
    membership.poll(1, step=1, samples=10)
    membership.poll(1, step=2, samples=1_000_000)
    rates, pauses = membership.take_measurements()
    assert [kind for kind, _ in pauses] == ["start"]
    assert [size for size, _ in rates] == [1] and rates[0][1] > 0
    assert membership.take_measurements() == ([], [])
    assert membership.epochs()[0]["progress_at"] is not None
    assert membership.resumed_at(1, min_step=2) and membership.last_step() == 2


def test_warnings_are_listed_oldest_first(make: Make) -> None:
    membership, _ = make()
    membership.warn("first")
    membership.warn("second", member="a")
    assert membership.warnings() == ["first", "second"]


def test_a_member_that_reports_after_it_was_lost_is_told_to_leave(
    make: Make, pool: ThreadPoolExecutor
) -> None:
    """A frozen rank (its heartbeats stopped) that runs again: the group went on without it."""
    membership, _ = make(max_nodes=3)
    form_first(membership, pool, "a", "b", "c")
    membership.poll(1, step=5, samples=50)
    membership.lose("b", "no heartbeat for 10.0 s")
    survivors = [report(membership, pool, name, 1, 5) for name in ("a", "c")]
    assert {f.result(REPLY_S).epoch for f in survivors} == {2}

    back = report(membership, pool, "b", 1, 5).result(REPLY_S)
    assert back == Leave(save=False)
    assert membership.epochs()[-1]["members"] == ["a", "c"]
    (warning,) = membership.warnings()
    assert "b (block b-b) came back" in warning and "told to leave" in warning


def test_a_member_lost_while_it_waits_for_an_assignment_is_sent_away(
    make: Make, pool: ThreadPoolExecutor
) -> None:
    """Cut off from its liveness connection while blocked in ``join``: it must not wait on."""
    membership, _ = make(min_nodes=2)
    assert membership.register("a", host="h", pid=1, block=None)
    waiting = pool.submit(membership.join, "a")
    assert eventually(lambda: membership.members()[0].phase is MemberPhase.WAITING)
    membership.lose("a", "connection closed")
    assert waiting.result(REPLY_S) == Leave(save=False)
    assert membership.warnings() == []  # it never came back; the loss is its own event
    # and one that froze before it even joined is sent away when it does
    assert membership.register("z", host="h", pid=2, block=None)
    membership.lose("z", "no heartbeat for 10.0 s")
    assert pool.submit(membership.join, "z").result(REPLY_S).action == "leave"


def phases(membership: Membership) -> dict[str, MemberPhase]:
    return {m.member_id: m.phase for m in membership.members()}


def test_a_members_phase_follows_its_life_and_lost_is_final(
    make: Make, pool: ThreadPoolExecutor
) -> None:
    membership, _ = make(max_nodes=2)
    assert membership.register("a", host="h", pid=1, block="b-a")
    assert phases(membership) == {"a": MemberPhase.REGISTERED}
    form_first(membership, pool, "b")  # b trains alone; a has not joined yet
    assert phases(membership) == {"a": MemberPhase.REGISTERED, "b": MemberPhase.ASSIGNED}
    joining = pool.submit(membership.join, "a")
    assert eventually(lambda: phases(membership)["a"] is MemberPhase.WAITING)
    membership.drain(member_ids=["b"])  # b leaves at its next report; a takes over
    leaving = report(membership, pool, "b", 1, 5)
    assert leaving.result(REPLY_S) == Leave(save=True)  # it holds the state
    assert phases(membership) == {"a": MemberPhase.WAITING, "b": MemberPhase.ASSIGNED}
    membership.left("b", saved_step=5)
    assert joining.result(REPLY_S).action == "run"
    assert phases(membership) == {"a": MemberPhase.ASSIGNED, "b": MemberPhase.GONE}
    # A loss after leaving names no one; lost stays lost whatever the member says next.
    assert membership.lose("b", "liveness closed") == Loss()
    assert membership.lose("a", "no heartbeat") == Loss(2, ("a",))
    membership.left("a")
    assert phases(membership) == {"a": MemberPhase.LOST, "b": MemberPhase.LOST}
    assert membership.lose("a", "again") is None
    assert membership.live_members() == 0
