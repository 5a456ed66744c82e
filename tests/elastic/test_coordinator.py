"""The membership coordinator's protocol, driven by real TCP clients (no training)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import torch

from parsl_malleable.elastic.coordinator import Coordinator
from parsl_malleable.elastic.heartbeat import Heartbeat
from parsl_malleable.elastic.membership import MemberPhase
from parsl_malleable.elastic.rank import _result_copy
from parsl_malleable.elastic.torch_backend import TorchRendezvousHost
from parsl_malleable.errors import ConfigError, MalleableError
from parsl_malleable.transport.wire import RequestClient
from tests.elastic.raw_requests import request


class Rank:
    """A rank as the coordinator sees it: request connection plus liveness connection."""

    def __init__(self, coordinator: Coordinator, name: str) -> None:
        host, port = coordinator.address
        self.name = name
        self.client = RequestClient(host, port, coordinator.token)
        request(self.client, "register", member=name, host="h", pid=1, block=f"b-{name}")
        self.notices: list[dict[str, Any]] = []
        self.heartbeat = Heartbeat(
            host,
            port,
            coordinator.token,
            name,
            interval_s=0.2,
            on_notice=lambda notice: self.notices.append(notice.to_json()),
        )

    def req(self, op: str, **fields: Any) -> dict[str, Any]:
        return request(self.client, op, member=self.name, **fields)

    def report(self, epoch: int, step: int, reason: str = "change") -> dict[str, Any]:
        return self.req(
            "report",
            epoch=epoch,
            committed_step=step,
            attempted_step=step,
            reason=reason,
            has_state=True,
        )

    def close(self) -> None:
        self.heartbeat.close()
        self.client.close()


@pytest.fixture
def coordinator() -> Iterator[Coordinator]:
    c = Coordinator(TorchRendezvousHost(), min_nodes=1, max_nodes=3, settle_s=0.5)
    c.start()
    yield c
    c.close()


def test_grow_drain_and_loss_form_new_epochs(coordinator):
    pool = ThreadPoolExecutor(4)
    a, b = Rank(coordinator, "a"), Rank(coordinator, "b")
    ja, jb = pool.submit(a.req, "join"), pool.submit(b.req, "join")
    first = {ja.result(10)["rank"], jb.result(10)["rank"]}
    assert first == {0, 1} and ja.result()["world_size"] == 2
    leader = a if ja.result()["rank"] == 0 else b
    assert leader.req("poll", epoch=1, step=1) == {"change": False}

    c = Rank(coordinator, "c")
    jc = pool.submit(c.req, "join")
    assert coordinator.wait_for(lambda co: leader.req("poll", epoch=1, step=2)["change"], 5)
    ra, rb = pool.submit(a.report, 1, 2), pool.submit(b.report, 1, 2)
    second = [ra.result(10), rb.result(10), jc.result(10)]
    assert [s["epoch"] for s in second] == [2, 2, 2]
    # Survivors keep their order; the newcomer comes last.
    assert [s["rank"] for s in second] == [ja.result()["rank"], jb.result()["rank"], 2]

    coordinator.drain(block_ids=["b-c"])
    assert leader.req("poll", epoch=2, step=3)["change"]
    replies = dict(zip("abc", pool.map(lambda r: r.report(2, 3), [a, b, c]), strict=True))
    assert replies["c"] == {"action": "leave", "save": False}
    assert replies["a"]["world_size"] == 2 and replies["a"]["epoch"] == 3

    b.close()  # the kernel closes a dead process's sockets: the coordinator sees the loss
    assert coordinator.wait_for(
        lambda co: next(m for m in co.members() if m.member_id == "b").phase is MemberPhase.LOST,
        5,
    )
    assert a.req("poll", epoch=3, step=4)["change"]
    # The survivor was told at once (a backend blocked in a collective can give up now).
    assert coordinator.wait_for(lambda co: bool(a.notices), 5)
    assert a.notices == [{"notice": "peer_lost", "epoch": 3, "member": "b"}]
    fourth = a.report(3, 4, reason="failure")
    assert fourth["world_size"] == 1 and fourth["rank"] == 0
    kinds = [e["event"] for e in coordinator.events()]
    assert "lost" in kinds and "rollback" in kinds and "drain" in kinds
    assert [e["world_size"] for e in coordinator.epochs()] == [2, 3, 2, 1]
    for r in (a, c):
        r.close()


def test_last_leavers_save_once_and_waiting_ranks_exit_when_done(coordinator):
    pool = ThreadPoolExecutor(4)
    a, b = Rank(coordinator, "a"), Rank(coordinator, "b")
    list(pool.map(lambda r: r.req("join"), [a, b]))
    coordinator.drain(member_ids=["a", "b"])
    ra = pool.submit(
        a.req,
        "report",
        epoch=1,
        committed_step=7,
        attempted_step=7,
        reason="change",
        has_state=True,
    )
    rb = pool.submit(
        b.req,
        "report",
        epoch=1,
        committed_step=6,
        attempted_step=7,
        reason="failure",
        has_state=True,
    )
    assert ra.result(10) == {"action": "leave", "save": True}  # the newest state is saved
    assert rb.result(10) == {"action": "leave", "save": False}
    assert coordinator.running_world_size() == 0

    # A newcomer is not placed until the saver is gone, then starts a cold epoch.
    c = Rank(coordinator, "c")
    jc = pool.submit(c.req, "join")
    assert not coordinator.wait_for(lambda co: jc.done(), 0.5)
    a.req("left", saved_step=7)
    b.req("left")
    assert jc.result(10)["world_size"] == 1
    c.req("finish", epoch=2, step=9)
    d = Rank(coordinator, "d")
    assert d.req("join") == {"action": "exit", "reason": "done"}
    assert coordinator.outcome == "done"
    for r in (a, b, c, d):
        r.close()


def test_bad_token_unknown_member_and_bad_sizes_are_refused(coordinator):
    host, port = coordinator.address
    with pytest.raises(MalleableError, match="bad token"):
        RequestClient(host, port, "not-the-token")
    client = RequestClient(host, port, coordinator.token)
    with pytest.raises(MalleableError, match="member ghost has not registered"):
        request(client, "poll", member="ghost", epoch=1, step=1)
    client.close()
    with pytest.raises(ConfigError, match="min_nodes=3, max_nodes=2"):
        Coordinator(TorchRendezvousHost(), min_nodes=3, max_nodes=2)


def test_min_nodes_holds_ranks_until_enough_arrive():
    c = Coordinator(TorchRendezvousHost(), min_nodes=2, max_nodes=2, settle_s=0.0)
    c.start()
    try:
        pool = ThreadPoolExecutor(3)
        a = Rank(c, "a")
        ja = pool.submit(a.req, "join")
        assert not c.wait_for(lambda co: ja.done(), 0.5)
        b = Rank(c, "b")
        jb = pool.submit(b.req, "join")
        assert ja.result(10)["world_size"] == jb.result(10)["world_size"] == 2
        surplus = Rank(c, "s")
        js = pool.submit(surplus.req, "join")
        assert not c.wait_for(lambda co: js.done(), 0.5)  # max_nodes reached: it waits
        c.abort("user error on rank a")
        assert js.result(10) == {"action": "exit", "reason": "aborted"}
        assert c.abort_message == "user error on rank a"
        for r in (a, b, surplus):
            r.close()
    finally:
        c.close()


def test_finish_keeps_a_json_copy_of_rank_0s_result_and_nothing_else(coordinator) -> None:
    assert _result_copy({"acc": 0.97, "steps": (1, 2)}) == {
        "result": {"acc": 0.97, "steps": (1, 2)}
    }
    assert _result_copy(torch.zeros(2)) == {}  # only Parsl can bring a tensor back
    assert _result_copy("x" * (1 << 20)) == {}  # too big for one coordinator message
    a = Rank(coordinator, "a")
    assert a.req("join")["world_size"] == 1
    assert coordinator.result is None
    a.req("finish", epoch=1, step=3, **_result_copy({"acc": 0.97, "steps": (1, 2)}))
    assert coordinator.outcome == "done"
    assert coordinator.result == ({"acc": 0.97, "steps": [1, 2]},)  # as JSON decodes it
    a.close()
