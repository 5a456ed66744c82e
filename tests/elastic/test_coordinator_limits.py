"""The coordinator's port: a challenge, never the token, on the wire; connections that never
authenticate are dropped at one deadline for the whole handshake, and beyond the cap the oldest
is evicted so a rank still gets in; malformed requests are refused and the connection kept."""

from __future__ import annotations

import json
import select
import socket
import time

import pytest

from parsl_malleable.elastic import coordinator_server
from parsl_malleable.elastic.coordinator import Coordinator
from parsl_malleable.elastic.torch_backend import TorchRendezvousHost
from parsl_malleable.errors import MalleableError
from parsl_malleable.transport.server import Limits
from parsl_malleable.transport.wire import LineReader, RequestClient, proof, send_message
from tests.elastic.raw_requests import request


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
    # Every connection is challenged first, whatever it does next.
    assert received.startswith(b'{"challenge":'), received[:100]
    return time.monotonic() - began


def _challenged(address: tuple[str, int]) -> socket.socket:
    """A connection that has read its challenge (so the server accepted it) and says nothing."""
    sock = socket.create_connection(address)
    sock.settimeout(10.0)
    line = b""
    while not line.endswith(b"\n"):
        line += sock.recv(1)
    return sock


def test_idle_and_garbage_connections_are_dropped_and_ranks_still_get_in(coordinator):
    host, port = coordinator.address
    idle = socket.create_connection((host, port))
    garbage = socket.create_connection((host, port))
    garbage.sendall(b"this is not json\n")
    endless = socket.create_connection((host, port))
    try:
        endless.sendall(b"x" * 2_000_000)  # no newline, ever
    except (ConnectionResetError, BrokenPipeError):
        reset_mid_send = True  # the server dropped it at its size limit before all was sent
    else:
        reset_mid_send = False
    assert _closed_by_server(garbage) < 5.0
    assert reset_mid_send or _closed_by_server(endless) < 5.0
    assert 0.5 < _closed_by_server(idle) < 10.0  # the 1 s handshake deadline
    client = RequestClient(host, port, coordinator.token)
    request(client, "register", member="m", host="h", pid=1, block="b")
    # A connection opened after the rank authenticated is dropped at its own deadline: by
    # then the rank is past any handshake deadline too, and a known rank may stay quiet.
    later = socket.create_connection((host, port))
    assert _closed_by_server(later) > 0.5
    assert request(client, "hello") == {"ok": True}
    client.close()


def test_a_slow_drip_does_not_outlive_the_handshake_deadline(coordinator):
    """Found by hand (#26): a byte every few seconds kept a connection, because the timeout
    bounded each read and not the handshake."""
    began = time.monotonic()
    sock = socket.create_connection(coordinator.address)
    while True:
        readable, _, _ = select.select([sock], [], [], 0.3)
        if readable and sock.recv(4096) == b"":
            break
        if not readable:
            sock.send(b"{")
    assert time.monotonic() - began < 3.0  # the 1 s deadline, on a loaded machine
    sock.close()


def test_strangers_beyond_the_cap_evict_the_oldest_and_ranks_still_get_in(monkeypatch):
    monkeypatch.setattr(coordinator_server, "AUTH_TIMEOUT_S", 30.0)
    coordinator = Coordinator(TorchRendezvousHost(), settle_s=0.0)
    coordinator.start()
    try:
        cap = Limits().pending_per_address
        crowd = [_challenged(coordinator.address) for _ in range(cap + 8)]
        # The eight oldest made room for newcomers and were told to retry; the rest wait on.
        for sock in crowd[:8]:
            sock.settimeout(10.0)
            assert json.loads(sock.recv(4096)) == {"error": "busy", "retry": True}
            assert sock.recv(4096) == b""
        readable, _, _ = select.select(crowd[8:], [], [], 0)
        assert readable == []
        began = time.monotonic()
        client = RequestClient(*coordinator.address, coordinator.token)
        request(client, "register", member="m", host="h", pid=1, block="b")
        assert time.monotonic() - began < 5.0
        assert coordinator.registered("m")
        client.close()
        for sock in crowd:
            sock.close()
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


def test_malformed_requests_are_refused_and_the_connection_kept(coordinator):
    client = RequestClient(*coordinator.address, coordinator.token)
    for op, fields, why in [
        ("register", {"member": 3}, "bad 'register' request: member"),
        ("register", {"member": "m", "pid": "not a number"}, "bad 'register' request: pid"),
        ("poll", {}, "bad 'poll' request: member: Field required"),
        ("kv_set", {"key": "", "value": "eA=="}, "bad 'kv_set' request: key"),
        ("kv_check", {"keys": "not-a-list"}, "bad 'kv_check' request: keys"),
        ("no_such_op", {}, "unknown op 'no_such_op'"),
    ]:
        with pytest.raises(MalleableError, match=why):
            request(client, op, **fields)
    assert coordinator.members() == []  # nothing malformed reached the coordinator's state
    assert request(client, "hello") == {"ok": True}
    request(client, "register", member="m", host="h", pid=1, block="b")
    assert coordinator.registered("m")
    client.close()
