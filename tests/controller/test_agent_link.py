"""The controller's agent link: the same challenge as the coordinator, never the secret on the
wire; a wrong secret never reaches the controller; idle connections are dropped; the agent
client (RequestClient, as run_agent uses it) gets through and receives its order, also past
200 idle and 32 slow-drip connections; malformed hellos and reports never reach the controller."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from parsl_malleable.controller.agent_link import (
    AgentHello,
    AgentLink,
    AgentReport,
    AgentServer,
    ExitOrder,
    RunRank,
)
from parsl_malleable.controller.node_agent import coordinator_token
from parsl_malleable.errors import MalleableError
from parsl_malleable.transport.server import Limits
from parsl_malleable.transport.wire import LineReader, RequestClient, proof, send_message
from tests.elastic.hostile import DRIP, IDLE, Probe
from tests.elastic.listening import chosen_address, listening
from tests.elastic.raw_requests import request

SECRET = "controller-secret"


def agent_client(address: tuple[str, int]) -> RequestClient:
    """A connection as run_agent opens it: the challenge, then the client's greeting."""
    client = RequestClient(*address, SECRET)
    request(client, "hello")
    return client


class Recorder:
    """The controller's callbacks: hellos seen, and a link that has one order queued."""

    def __init__(self) -> None:
        self.hellos: list[AgentHello] = []
        self.said_hello = threading.Event()

    def hello(self, message: AgentHello) -> AgentLink:
        self.hellos.append(message)
        self.said_hello.set()
        link = AgentLink("a", "n", "node", "b", "0", 0, 1, frozenset({"job"}))
        link.orders.put(ExitOrder(reason="test"))
        return link


@pytest.fixture
def served():
    recorder = Recorder()
    server = AgentServer(
        ("127.0.0.1", 0),
        SECRET,
        recorder.hello,
        lambda link, report: None,
        lambda link: None,
        hello_timeout_s=1.0,
    )
    server.start()
    yield server, recorder
    server.close()


def test_an_agent_with_the_secret_gets_its_order(served):
    server, recorder = served
    client = agent_client(server.server_address)
    order = request(client, "hello", agent="a", jobs=["job"], node="n")
    assert order == {"action": "exit", "reason": "test"}
    assert recorder.hellos[0].node == "n" and "token" not in recorder.hellos[0].to_json()
    client.close()


def test_a_wrong_secret_is_refused_and_never_reaches_the_controller(served):
    server, recorder = served
    with pytest.raises(MalleableError, match="bad token"):
        RequestClient(*server.server_address, "not-the-secret")
    # By hand: the secret is never asked for, only an HMAC of a fresh nonce.
    sock = socket.create_connection(server.server_address)
    reader = LineReader(sock)
    nonce = reader.read()["challenge"]
    assert len(nonce) == 64 and SECRET not in nonce
    send_message(sock, {"op": "auth", "mac": proof("guess", nonce)})
    assert reader.read() == {"error": "bad token"}
    assert reader.read() is None
    sock.close()
    # The old protocol (the secret in clear, in the hello) is refused too.
    sock = socket.create_connection(server.server_address)
    reader = LineReader(sock)
    reader.read()
    send_message(sock, {"op": "hello", "token": SECRET})
    assert reader.read() == {"error": "bad token"}
    sock.close()
    assert not recorder.said_hello.is_set()


def test_idle_connections_are_dropped_within_the_hello_timeout(served):
    server, _ = served
    sock = socket.create_connection(server.server_address)
    sock.settimeout(10.0)
    began = time.monotonic()
    received = b""
    while chunk := sock.recv(4096):
        received += chunk
    assert received.startswith(b'{"challenge":')
    assert 0.5 < time.monotonic() - began < 5.0  # the 1 s hello timeout
    sock.close()


def test_job_tokens_are_derived_so_orders_need_not_carry_them():
    first, again, other = (coordinator_token(SECRET, j) for j in ("job-a", "job-a", "job-b"))
    assert first == again and first != other
    assert SECRET not in first and len(first) == 64
    assert coordinator_token("another-controller", "job-a") != first


def test_the_link_listens_on_the_chosen_address_only():
    host = chosen_address()
    server = AgentServer((host, 0), SECRET, Recorder().hello, print, print)
    server.start()
    try:
        port = server.server_address[1]
        assert {ip for ip, p in listening(os.getpid()) if p == port} == {host}
    finally:
        server.close()


def test_a_terminated_agent_is_answered_exit_without_waiting_for_an_order() -> None:
    reports: list[AgentReport] = []
    gone = threading.Event()

    def hello(message: AgentHello) -> AgentLink:
        link = AgentLink("a", "pool-1", "node", "b", "0", 0, 1, frozenset({"job"}))
        link.orders.put(RunRank(job="job", member="m", host="h", port=1))
        return link  # one order only: a report that waited for a second would hang

    server = AgentServer(
        ("127.0.0.1", 0),
        SECRET,
        hello,
        lambda link, report: reports.append(report),
        lambda link: gone.set(),
        hello_timeout_s=1.0,
    )
    server.start()
    try:
        client = agent_client(server.server_address)
        assert request(client, "hello", agent="a", jobs=["job"])["action"] == "run"
        reply = request(client, "done", agent="a", job="job", status="terminated")
        assert reply == {"action": "exit", "reason": "its node is being taken"}
        assert gone.wait(10)
        assert [r.to_json() for r in reports] == [
            {"op": "done", "agent": "a", "job": "job", "status": "terminated"}
        ]
        client.close()
    finally:
        server.close()


def test_malformed_hellos_and_reports_never_reach_the_controller(served) -> None:
    server, recorder = served
    client = agent_client(server.server_address)
    with pytest.raises(MalleableError, match="bad 'hello' request: local_rank"):
        request(client, "hello", agent="a", jobs=["job"], local_rank="first")
    client.close()
    client = agent_client(server.server_address)
    with pytest.raises(MalleableError, match="bad 'hello' request: agent: Field required"):
        request(client, "hello", jobs=["job"])
    client.close()
    assert not recorder.said_hello.is_set()

    reports: list[AgentReport] = []

    def hello(message: AgentHello) -> AgentLink:
        link = AgentLink("a", "pool-1", "node", "b", "0", 0, 1, frozenset({"job"}))
        link.orders.put(RunRank(job="job", member="m", host="h", port=1))
        link.orders.put(ExitOrder(reason="test"))
        return link

    other = AgentServer(("127.0.0.1", 0), SECRET, hello, lambda _, r: reports.append(r), print)
    other.start()
    try:
        client = agent_client(other.server_address)
        assert request(client, "hello", agent="a", jobs=["job"])["action"] == "run"
        with pytest.raises(MalleableError, match="bad 'done' request: status"):
            request(client, "done", agent="a", job="job")
        # The link goes on: the next, well-formed report gets the next order.
        assert request(client, "done", agent="a", job="job", status="left")["action"] == "exit"
        assert [r.to_json() for r in reports] == [
            {"op": "done", "agent": "a", "job": "job", "status": "left"}
        ]
        client.close()
    finally:
        other.close()


# "fits": the default limits hold the whole probe, which the deadline drops and it reopens;
# "exceeds": 32 per address (the old cap), so newcomers evict the oldest strangers all the time.
PROBE_LIMITS = {
    "fits": Limits(handshake_s=3.0),
    "exceeds": Limits(handshake_s=3.0, pending_per_address=32),
}


@pytest.mark.parametrize("limits", sorted(PROBE_LIMITS))
def test_agents_register_past_idle_and_slow_drip_connections(limits, caplog) -> None:
    recorder = Recorder()
    server = AgentServer(
        ("127.0.0.1", 0), SECRET, recorder.hello, print, lambda link: None,
        limits=PROBE_LIMITS[limits],
    )  # fmt: skip
    server.start()
    pool = ThreadPoolExecutor(8)

    def register(count: int) -> float:
        """Seconds for ``count`` agents, at once, to connect, say hello and get their order."""

        def agent(i: int) -> dict[str, Any]:
            client = agent_client(server.server_address)
            try:
                return request(client, "hello", agent=f"agent-{i}", jobs=["job"], node=f"n{i}")
            finally:
                client.close()

        began = time.monotonic()
        orders = list(pool.map(agent, range(count)))
        assert orders == [{"action": "exit", "reason": "test"}] * count
        return time.monotonic() - began

    try:
        usual_s = register(8)
        caplog.set_level(logging.DEBUG, logger="parsl_malleable")
        caplog.clear()
        with Probe(server.server_address) as probe:
            probed_s = register(8)
            lines = [r for r in caplog.records if r.name.startswith("parsl_malleable")]
    finally:
        server.close()
        pool.shutdown()
    print(
        f"\n8 agents registered: usual {usual_s:.2f} s, under the probe {probed_s:.2f} s; "
        f"{len(lines)} log lines; probe {probe.stats}; drops {dict(server.drops.totals)}"
    )
    assert len(recorder.hellos) == 16
    assert probed_s <= usual_s + 1.0, (usual_s, probed_s)
    assert len(lines) < 100, [r.getMessage() for r in lines[:20]]
    assert probe.stats["opened"] > IDLE + DRIP
