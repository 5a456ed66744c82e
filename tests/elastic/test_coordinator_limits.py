"""The coordinator's port: a challenge, never the token, on the wire; connections that never
authenticate are dropped, and capped."""

from __future__ import annotations

import select
import socket
import time

import pytest

from parsl_malleable.elastic import coordinator_server
from parsl_malleable.elastic.coordinator import Coordinator
from parsl_malleable.elastic.torch_backend import TorchRendezvousHost
from parsl_malleable.elastic.wire import CoordinatorClient, LineReader, proof, send_message


@pytest.fixture
def coordinator(monkeypatch):
    monkeypatch.setattr(coordinator_server, "AUTH_TIMEOUT_S", 1.0)
    c = Coordinator(TorchRendezvousHost(), settle_s=0.0)
    c.start()
    yield c
    c.close()


def _closed_by_server(sock: socket.socket) -> float:
    """Seconds until the server closes ``sock`` (its challenge and refusal are read and
    dropped; the test gives up after 30)."""
    sock.settimeout(30.0)
    began = time.monotonic()
    received = b""
    try:
        while chunk := sock.recv(4096):
            received += chunk
    except ConnectionResetError:
        pass
    assert received.startswith(b'{"challenge":') or not received, received[:100]
    return time.monotonic() - began


def test_idle_and_garbage_connections_are_dropped_and_ranks_still_get_in(coordinator):
    host, port = coordinator.address
    idle = socket.create_connection((host, port))
    garbage = socket.create_connection((host, port))
    garbage.sendall(b"this is not json\n")
    endless = socket.create_connection((host, port))
    endless.sendall(b"x" * 2_000_000)  # no newline, ever
    assert _closed_by_server(garbage) < 5.0
    assert _closed_by_server(endless) < 5.0
    assert 0.5 < _closed_by_server(idle) < 10.0  # the 1 s authentication timeout
    client = CoordinatorClient(host, port, coordinator.token)
    client.request("register", member="m", host="h", pid=1, block="b")
    time.sleep(1.5)  # past the authentication timeout: a known rank may stay quiet
    assert client.request("hello") == {"ok": True}
    client.close()


def test_connections_waiting_to_authenticate_are_capped(monkeypatch):
    monkeypatch.setattr(coordinator_server, "AUTH_TIMEOUT_S", 5.0)
    coordinator = Coordinator(TorchRendezvousHost(), settle_s=0.0)
    coordinator.start()
    try:
        host, port = coordinator.address
        cap = coordinator_server.MAX_UNAUTHENTICATED
        crowd = [socket.create_connection((host, port)) for _ in range(cap + 8)]
        # Beyond the cap, connections are closed at once; the others wait for the timeout.
        closed: set[int] = set()
        deadline = time.monotonic() + 4.0
        while time.monotonic() < deadline and len(closed) < 8:
            ready, _, _ = select.select([s for s in crowd if s.fileno() not in closed], [], [], 0.1)
            closed.update(s.fileno() for s in ready if s.recv(4096) == b"")
        assert len(closed) == 8
        for sock in crowd:
            sock.close()
        client = CoordinatorClient(host, port, coordinator.token)
        assert client.request("hello") == {"ok": True}
        client.close()
    finally:
        coordinator.close()


def test_the_token_never_crosses_the_wire_and_a_wrong_proof_is_refused(coordinator):
    host, port = coordinator.address
    sock = socket.create_connection((host, port))
    reader = LineReader(sock)
    nonce = reader.read()["challenge"]
    assert len(nonce) == 64 and coordinator.token not in nonce
    send_message(sock, {"op": "auth", "mac": proof("not-the-token", nonce)})
    assert reader.read() == {"error": "bad token"}
    assert reader.read() is None  # and the connection is closed
    sock.close()
    # Every connection gets a new nonce, so a recorded proof is worth nothing.
    first = socket.create_connection((host, port))
    second = socket.create_connection((host, port))
    nonces = {LineReader(s).read()["challenge"] for s in (first, second)}
    assert len(nonces) == 2
    first.close()
    second.close()
