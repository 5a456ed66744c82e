"""The authenticated message server by itself (#26): strangers are evicted oldest first, per
address and in total, never the newcomer; the handshake has one deadline; drops are summarised,
not logged one by one; handler slots are bounded; clients retry a handshake the server evicted."""

from __future__ import annotations

import json
import logging
import re
import select
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from parsl_malleable.errors import MalleableError
from parsl_malleable.transport.server import Connection, Limits, MessageServer
from parsl_malleable.transport.wire import (
    HandshakeBusy,
    LineReader,
    RequestClient,
    open_authenticated,
    proof,
    send_message,
)
from tests.elastic.raw_requests import request

SECRET = "s3cret"


def echo(connection: Connection) -> None:
    while (message := connection.reader.read()) is not None:
        send_message(connection.sock, message)


@contextmanager
def served(limits: Limits, handler=echo) -> Iterator[MessageServer]:
    server = MessageServer(("127.0.0.1", 0), SECRET, handler, "test server", limits)
    server.start()
    try:
        yield server
    finally:
        server.close()


def stranger(server: MessageServer, source: str = "127.0.0.1") -> socket.socket:
    """A connection that reads its challenge (so it was accepted) and never answers."""
    sock = socket.create_connection(server.server_address, source_address=(source, 0))
    sock.settimeout(10.0)
    line = b""
    while not line.endswith(b"\n"):
        line += sock.recv(1)
    assert line.startswith(b'{"challenge":')
    return sock


def until_closed(sock: socket.socket, timeout_s: float = 10.0) -> bytes:
    """What the server sends before closing ``sock`` (the test fails after ``timeout_s``)."""
    sock.settimeout(timeout_s)
    received = b""
    try:
        while chunk := sock.recv(4096):
            received += chunk
    except ConnectionResetError:
        pass
    return received


def still_open(sock: socket.socket) -> bool:
    readable, _, _ = select.select([sock], [], [], 0)
    return not readable


def wait_until(predicate, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_a_slow_drip_is_dropped_at_the_handshake_deadline_however_it_paces() -> None:
    with served(Limits(handshake_s=1.0)) as server:
        began = time.monotonic()
        sock = socket.create_connection(server.server_address)
        dripped = 0
        while True:
            # One byte per 0.2 s, each of which a per-read timeout would have counted as life.
            readable, _, _ = select.select([sock], [], [], 0.2)
            if readable and sock.recv(4096) == b"":
                break
            if not readable:
                sock.send(b" ")
                dripped += 1
        elapsed = time.monotonic() - began
        sock.close()
    assert dripped >= 3
    assert 0.9 < elapsed < 3.0, elapsed


def test_newcomers_evict_the_oldest_pending_handshake_of_their_address() -> None:
    with served(Limits(handshake_s=30.0, pending_per_address=4)) as server:
        crowd = [stranger(server) for _ in range(6)]
        # The two oldest made room (and were told to retry); the newest four still wait.
        for sock in crowd[:2]:
            assert json.loads(until_closed(sock)) == {"error": "busy", "retry": True}
        assert all(still_open(sock) for sock in crowd[2:])
        assert server.pending == 4
        # A peer with the secret gets in at once, past the crowd (evicting its oldest).
        sock, reader = open_authenticated(*server.server_address, SECRET)
        send_message(sock, {"op": "ping"})
        assert reader.read() == {"op": "ping"}
        assert until_closed(crowd[2]) and all(still_open(s) for s in crowd[3:])
        assert server.drops.totals["evicted"] == 3
        for s in [*crowd, sock]:
            s.close()


def test_a_full_server_evicts_from_the_address_holding_the_most() -> None:
    with served(Limits(handshake_s=30.0, pending_per_address=100, pending_total=6)) as server:
        ranks_host = [stranger(server, "127.0.0.2") for _ in range(2)]
        flood = [stranger(server, "127.0.0.1") for _ in range(10)]
        assert server.pending == 6
        # The flooding address paid for every newcomer, its own and the others' alike.
        assert all(still_open(sock) for sock in ranks_host)
        assert all(until_closed(sock) for sock in flood[:6])
        assert all(still_open(sock) for sock in flood[6:])
        for sock in ranks_host + flood:
            sock.close()


def test_drops_are_summarised_in_one_line_per_interval(caplog) -> None:
    caplog.set_level(logging.DEBUG, logger="parsl_malleable")
    with served(Limits(log_every_s=3600.0)) as server:
        for _ in range(40):
            sock = stranger(server)
            sock.sendall(b"not json at all\n")
            assert json.loads(until_closed(sock)) == {"error": "bad token"}
            sock.close()
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("parsl_malleable")]
    # The first drop at once, the other 39 in the summary written when the server closed.
    assert len(lines) == 2, lines
    counts = [int(re.search(r": (\d+) connection", line).group(1)) for line in lines]
    assert sum(counts) == 40 and "bad token" in lines[1]


def test_handler_slots_are_bounded_and_a_full_server_says_retry() -> None:
    with served(Limits(authenticated=1)) as server:
        first, _ = open_authenticated(*server.server_address, SECRET)
        assert wait_until(lambda: server.authenticated == 1)
        began = time.monotonic()
        with pytest.raises(HandshakeBusy, match="server full"):
            open_authenticated(*server.server_address, SECRET, retry_for_s=0.5)
        assert time.monotonic() - began < 5.0
        first.close()
        assert wait_until(lambda: server.authenticated == 0)
        again, reader = open_authenticated(*server.server_address, SECRET)
        send_message(again, {"op": "ping"})
        assert reader.read() == {"op": "ping"}
        again.close()


def test_a_failing_handler_is_logged_and_the_server_goes_on(caplog) -> None:
    def broken(connection: Connection) -> None:
        raise RuntimeError("handler bug")

    with served(Limits(), handler=broken) as server:
        for _ in range(2):
            sock, reader = open_authenticated(*server.server_address, SECRET)
            assert reader.read() is None  # closed after the handler failed
            sock.close()
        assert wait_until(lambda: server.authenticated == 0)
    assert "handler bug" in caplog.text


class FakeServer:
    """Answers connections by a script: ``busy`` evicts after the challenge, ``reset`` resets
    the connection after reading the answer, ``refuse`` says bad token, ``serve`` lets it in."""

    def __init__(self, script: list[str]) -> None:
        self.script = list(script)
        self.accepted = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = self.listener.getsockname()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while self.script:
            sock, _ = self.listener.accept()
            self.accepted += 1
            step = self.script.pop(0)
            reader = LineReader(sock)
            nonce = "ab" * 32
            send_message(sock, {"challenge": nonce})
            if step == "busy":
                send_message(sock, {"error": "busy", "retry": True})
                sock.close()
                continue
            answer = reader.read()
            if step == "reset":
                sock.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
                )
                sock.close()
                continue
            if step == "refuse" or answer != {"op": "auth", "mac": proof(SECRET, nonce)}:
                send_message(sock, {"error": "bad token"})
                sock.close()
                continue
            send_message(sock, {"ok": True})
            while (request := reader.read()) is not None:
                send_message(sock, {"ok": True, "op": request["op"]})

    def close(self) -> None:
        self.listener.close()


def test_clients_retry_a_handshake_the_server_evicted_but_not_a_refusal() -> None:
    fake = FakeServer(["busy", "reset", "serve"])
    client = RequestClient(*fake.address, SECRET)
    assert request(client, "ping") == {"ok": True, "op": "ping"}
    assert fake.accepted == 3
    client.close()
    fake.close()
    fake = FakeServer(["refuse", "serve"])
    with pytest.raises(MalleableError, match="bad token"):
        RequestClient(*fake.address, SECRET)
    assert fake.accepted == 1  # a wrong token is final
    fake.close()
