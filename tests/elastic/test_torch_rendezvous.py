"""torch rendezvous through the coordinator (#13 security): no rendezvous port of its own, keys
readable and writable only after the coordinator's challenge, the store API's semantics, and
ranks whose every listening socket is bound to the interface that reaches the coordinator."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import textwrap
import threading
import time

import psutil
import pytest

from parsl_malleable.elastic.coordinator import Coordinator
from parsl_malleable.elastic.coordinator_store import CoordinatorStore
from parsl_malleable.elastic.torch_backend import TorchRendezvousHost
from parsl_malleable.errors import MalleableError
from parsl_malleable.transport.wire import LineReader, send_message
from tests.elastic.listening import chosen_address, listening


@pytest.fixture
def coordinator():
    host = chosen_address()
    c = Coordinator(TorchRendezvousHost(host), host=host, settle_s=0.0)
    c.start()
    yield c
    c.close()


def test_the_store_api_over_the_coordinator(coordinator):
    store = CoordinatorStore(*coordinator.address, coordinator.token, timeout_s=0.5)
    store.set("a", b"\x00\xff bytes")
    assert store.get("a") == b"\x00\xff bytes"
    assert store.add("n", 3) == 3 and store.add("n", -1) == 2
    assert store.compare_set("c", b"", b"first") == b"first"
    assert store.compare_set("c", b"wrong", b"second") == b"first"
    assert store.compare_set("c", b"first", b"second") == b"second"
    assert store.check(["a", "n"]) and not store.check(["a", "missing"])
    assert store.num_keys() == 3
    assert store.delete_key("a") and not store.delete_key("a")
    began = time.monotonic()
    with pytest.raises(MalleableError, match="timeout"):
        store.get("never")
    assert 0.4 < time.monotonic() - began < 5.0
    store.close()


def test_old_epochs_keys_are_dropped_and_waiters_end_with_the_job(coordinator):
    store = CoordinatorStore(*coordinator.address, coordinator.token, timeout_s=30.0)
    for epoch in (1, 2, 3):
        store.set(f"epoch-{epoch}/rank-0", b"address")
    coordinator._rendezvous.prepare_epoch(4, 2)
    assert not store.check(["epoch-1/rank-0"]) and not store.check(["epoch-2/rank-0"])
    assert store.check(["epoch-3/rank-0"])  # the previous epoch may still be forming
    failed = threading.Event()

    def wait_for_a_key_that_never_comes() -> None:
        with contextlib.suppress(MalleableError):
            store.get("epoch-4/rank-1")
        failed.set()

    threading.Thread(target=wait_for_a_key_that_never_comes, daemon=True).start()
    table = coordinator._rendezvous.table
    deadline = time.monotonic() + 10.0
    while table.waiting == 0 and time.monotonic() < deadline:
        time.sleep(0.01)  # until the request is blocked in the coordinator
    assert table.waiting == 1
    coordinator.close()
    assert failed.wait(5.0)  # not the store's 30 s timeout
    deadline = time.monotonic() + 5.0
    while table.waiting and time.monotonic() < deadline:
        time.sleep(0.01)
    assert table.waiting == 0  # the coordinator's thread is free too, not held for 30 s


def test_no_rendezvous_port_and_no_keys_without_the_token():
    before = listening(psutil.Process().pid)
    host = chosen_address()
    rendezvous = TorchRendezvousHost(host)
    coordinator = Coordinator(rendezvous, host=host, settle_s=0.0)
    coordinator.start()
    try:
        _refuse_without_token(coordinator, rendezvous, before)
    finally:
        coordinator.close()


def _refuse_without_token(
    coordinator: Coordinator, rendezvous: TorchRendezvousHost, before: set[tuple[str, int]]
) -> None:
    host, port = coordinator.address
    info = rendezvous.prepare_epoch(1, 2)
    assert info.port == 0
    # The job added one listener to the driver: the coordinator's, on the chosen address.
    assert listening(psutil.Process().pid) - before == {(host, port)}
    store = CoordinatorStore(host, port, coordinator.token, timeout_s=1.0)
    store.set("epoch-1/rank-0", b"secret address")
    with pytest.raises(MalleableError, match="bad token"):
        CoordinatorStore(host, port, "not-the-token", timeout_s=1.0)
    # Without answering the challenge, neither a read nor a write gets through.
    for attempt in (
        {"op": "kv_get", "key": "epoch-1/rank-0", "timeout_s": 0},
        {"op": "kv_set", "key": "epoch-1/rank-0", "value": "ZXZpbA=="},
        {"op": "kv_set", "key": "epoch-1/rank-9", "value": "ZXZpbA==", "token": "guess"},
    ):
        sock = socket.create_connection((host, port))
        reader = LineReader(sock)
        assert "challenge" in reader.read()
        send_message(sock, attempt)
        assert reader.read() == {"error": "bad token"}
        assert reader.read() is None
        sock.close()
    assert store.get("epoch-1/rank-0") == b"secret address"
    assert not store.check(["epoch-1/rank-9"])
    store.close()


# One rank: forms a 2-rank gloo group through the coordinator, prints its listening sockets and
# an allreduce's result, then waits for stdin to close before leaving the group.
_RANK = textwrap.dedent(
    """
    import json, os, sys, psutil, torch
    from parsl_malleable.elastic.backend_interface import RendezvousInfo
    from parsl_malleable.elastic.torch_backend import TorchBackend

    host, port, token, rank = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    backend = TorchBackend("gloo")
    backend.attach_coordinator(host, port, token)
    backend.init(rank, RendezvousInfo("torch", host, 0, 1, 2), 30.0)
    values = [torch.full((3,), float(rank))]
    backend.allreduce_mean_(values)
    listens = [
        [c.laddr.ip, c.laddr.port]
        for c in psutil.Process().net_connections("tcp")
        if c.status == psutil.CONN_LISTEN
    ]
    print(json.dumps({"listens": listens, "mean": values[0].tolist()}), flush=True)
    sys.stdin.read()
    backend.shutdown()
    """
)


def test_ranks_listen_only_on_the_interface_that_reaches_the_coordinator(coordinator):
    host, port = coordinator.address
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", _RANK, host, str(port), coordinator.token, str(rank)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    try:
        reports = [json.loads(r.stdout.readline()) for r in ranks]
        for report in reports:
            assert report["mean"] == [0.5, 0.5, 0.5]
            assert report["listens"], "gloo listens for its peers"
            assert {ip for ip, _ in report["listens"]} == {host}, report["listens"]
    finally:
        for rank in ranks:
            rank.stdin.close()
        for rank in ranks:
            assert rank.wait(timeout=30) == 0
