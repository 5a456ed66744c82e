"""Our request transport against ``multiprocessing.connection`` (the maintained candidate).

Issue #39 asks whether framing and the challenge-response handshake should come from a library
while keeping the per-address caps. ``multiprocessing.connection`` (standard library) has both:
length-prefixed messages and an HMAC challenge-response (``Listener(authkey=...)``). pyzmq, the
other candidate, has framing but no handshake of its own (CURVE needs keys handed out, and
its ZAP handler is ours to write), so it would replace less.

Measured, on one machine over loopback, each with an echo server:

1. **Latency**: request round trips of one small JSON message (a rank's ``poll``) on an open
   connection, and connect + handshake of a new connection.
2. **Probe**: the same connect + handshake while one stranger holds a connection open without
   answering the challenge (what ``tests/elastic/hostile.py``'s idle probe does by the hundred).
   ``Listener.accept()`` runs the handshake inside accept, with no deadline: one silent stranger
   holds every later client until it leaves. Ours answers the challenge in a selector, so a
   stranger costs a slot, capped per address, and the oldest is evicted.
3. **Code**: the lines each would leave in this repository.

    python benchmarks/bench_transport.py [--requests N]
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import threading
import time
from multiprocessing.connection import Client, Listener
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from parsl_malleable.elastic.messages import Poll  # noqa: E402
from parsl_malleable.transport.server import Connection, Limits, MessageServer  # noqa: E402
from parsl_malleable.transport.wire import RequestClient, send_message  # noqa: E402

SECRET = "bench-transport-secret"
REQUEST = Poll(member="rank-0", epoch=3, step=1200, samples=38400).to_json()
PROBE_WAIT_S = 5.0  # how long a client waits behind a silent stranger before we call it stuck


def _echo(connection: Connection) -> None:
    while (message := connection.reader.read()) is not None:
        send_message(connection.sock, message)


def ours(requests: int) -> dict[str, float]:
    server = MessageServer(("127.0.0.1", 0), SECRET, _echo, "bench", Limits())
    server.start()
    address = server.server_address
    try:
        connects = []
        for _ in range(50):
            began = time.perf_counter()
            RequestClient(*address, SECRET).close()
            connects.append(time.perf_counter() - began)
        client = RequestClient(*address, SECRET)
        trips = []
        for _ in range(requests):
            began = time.perf_counter()
            client.exchange(REQUEST)
            trips.append(time.perf_counter() - began)
        client.close()
        stranger = socket.create_connection(address)  # never answers the challenge
        began = time.perf_counter()
        RequestClient(*address, SECRET).close()
        behind_stranger = time.perf_counter() - began
        stranger.close()
    finally:
        server.close()
    return _figures(trips, connects, behind_stranger)


def library(requests: int) -> dict[str, float]:
    listener = Listener(("127.0.0.1", 0), authkey=SECRET.encode())
    address = listener.address
    stop = threading.Event()

    def serve(conn) -> None:  # type: ignore[no-untyped-def]
        try:
            while True:
                data = conn.recv_bytes()  # bytes only: recv() would unpickle
                conn.send_bytes(json.dumps(json.loads(data)).encode())
        except (EOFError, OSError):
            pass

    def accept_loop() -> None:
        while not stop.is_set():
            try:
                conn = listener.accept()  # the handshake runs here, for one client at a time
            except Exception:  # a failed handshake (AuthenticationError), a closed socket
                continue
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept_loop, daemon=True).start()
    connects = []
    for _ in range(50):
        began = time.perf_counter()
        Client(address, authkey=SECRET.encode()).close()
        connects.append(time.perf_counter() - began)
    client = Client(address, authkey=SECRET.encode())
    trips = []
    payload = json.dumps(REQUEST).encode()
    for _ in range(requests):
        began = time.perf_counter()
        client.send_bytes(payload)
        json.loads(client.recv_bytes())
        trips.append(time.perf_counter() - began)
    client.close()
    stranger = socket.create_connection(address)  # never answers the challenge
    behind_stranger = _connect_within(address, PROBE_WAIT_S)
    stranger.close()
    stop.set()
    listener.close()
    return _figures(trips, connects, behind_stranger)


def _connect_within(address: tuple[str, int], limit_s: float) -> float:
    """Seconds for a client to connect and authenticate, or ``inf`` past ``limit_s``."""
    done = threading.Event()
    began = time.perf_counter()

    def attempt() -> None:
        try:
            Client(address, authkey=SECRET.encode()).close()
            done.set()
        except OSError:
            pass

    threading.Thread(target=attempt, daemon=True).start()
    return time.perf_counter() - began if done.wait(limit_s) else float("inf")


def _figures(trips: list[float], connects: list[float], behind: float) -> dict[str, float]:
    trips.sort()
    return {
        "rtt_median_us": statistics.median(trips) * 1e6,
        "rtt_p99_us": trips[int(len(trips) * 0.99)] * 1e6,
        "connect_median_ms": statistics.median(connects) * 1e3,
        "connect_behind_stranger_ms": behind * 1e3,
    }


def _lines(path: str) -> int:
    return sum(1 for line in (REPO / path).read_text().splitlines() if line.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=5000)
    args = parser.parse_args()
    rows = {"ours (transport/wire.py + server.py)": ours(args.requests)}
    rows["multiprocessing.connection"] = library(args.requests)
    print(f"{args.requests} round trips of a {len(json.dumps(REQUEST))}-byte poll, loopback\n")
    print(
        f"{'transport':38} {'RTT median':>11} {'RTT p99':>9} {'connect':>9} {'behind 1 idle':>14}"
    )
    for name, f in rows.items():
        behind = f["connect_behind_stranger_ms"]
        stuck = f"> {PROBE_WAIT_S:g} s" if behind == float("inf") else f"{behind:.2f} ms"
        print(
            f"{name:38} {f['rtt_median_us']:8.1f} us {f['rtt_p99_us']:6.1f} us "
            f"{f['connect_median_ms']:6.2f} ms {stuck:>14}"
        )
    framing = ["parsl_malleable/transport/wire.py", "parsl_malleable/transport/server.py"]
    print("\nnon-blank lines now: " + ", ".join(f"{p.split('/')[-1]} {_lines(p)}" for p in framing))


if __name__ == "__main__":
    main()
