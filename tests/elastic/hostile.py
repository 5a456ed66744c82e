"""Hostile peers for the servers' tests: a process that holds idle and slow-drip connections open.

As found by hand (#26): connections that never answer the challenge, and ones that send a byte
every few seconds, held against a port so that no legitimate peer gets in. The process reopens
every connection the server drops (after about ``reopen_after_s``, as an attacker keeping the
count up would), so the load lasts as long as the probe does. :class:`Probe` runs it beside the
test (another process, as an attacker is: it does not compete for the test's GIL) and waits until
it is in its steady state: every connection has been dropped by the server once and reopened.
Run by hand: ``python hostile.py HOST PORT IDLE DRIP``; closing its stdin ends it, and it prints
what it did as one JSON line.
"""

from __future__ import annotations

import json
import random
import selectors
import socket
import subprocess
import sys
import time
from typing import Any

IDLE = 200
DRIP = 32


def hold(
    host: str,
    port: int,
    idle: int,
    drip: int,
    drip_every_s: tuple[float, float] = (1.0, 4.0),
    reopen_after_s: float = 0.5,
) -> dict[str, int]:
    """Keep ``idle`` silent and ``drip`` dripping connections to ``(host, port)`` until stdin
    closes; prints ``ready`` once each was dropped by the server and reopened. Returns counts of
    what happened."""
    selector = selectors.DefaultSelector()
    selector.register(sys.stdin, selectors.EVENT_READ, None)
    kinds = ["idle"] * idle + ["drip"] * drip
    socks: dict[int, socket.socket] = {}
    reopen_at = dict.fromkeys(range(len(kinds)), 0.0)
    drip_at: dict[int, float] = {}
    stats = {"opened": 0, "dropped": 0, "drip_bytes": 0, "challenges": 0}
    opened: set[int] = set()
    reopened: set[int] = set()
    ready = False
    while True:
        now = time.monotonic()
        for slot in [s for s, when in reopen_at.items() if when <= now]:
            del reopen_at[slot]
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setblocking(False)
            sock.connect_ex((host, port))
            selector.register(sock, selectors.EVENT_READ, slot)
            socks[slot] = sock
            stats["opened"] += 1
            (reopened if slot in opened else opened).add(slot)
            if kinds[slot] == "drip":
                drip_at[slot] = now + random.uniform(*drip_every_s)
        # Ready in its steady state: every connection was dropped by the server at least once
        # (at the handshake deadline, or evicted) and opened again.
        if not ready and len(reopened) == len(kinds):
            print("ready", flush=True)
            ready = True
        for slot in [s for s, when in drip_at.items() if when <= now]:
            try:
                socks[slot].send(b" ")  # never a newline: the handshake never ends by itself
                stats["drip_bytes"] += 1
            except OSError:
                pass
            drip_at[slot] = now + random.uniform(*drip_every_s)
        wake = min([*reopen_at.values(), *drip_at.values(), now + 1.0])
        for key, _ in selector.select(max(0.0, wake - time.monotonic())):
            if key.data is None:
                if not sys.stdin.readline():
                    return stats
                continue
            slot = key.data
            sock = socks[slot]
            try:
                data = sock.recv(4096)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if data:
                stats["challenges"] += data.count(b'{"challenge"')
                continue
            selector.unregister(sock)
            sock.close()
            del socks[slot]
            drip_at.pop(slot, None)
            reopen_at[slot] = time.monotonic() + reopen_after_s * random.uniform(0.5, 1.5)
            stats["dropped"] += 1


class Probe:
    """The hostile process against ``address``, for a ``with`` block; ``stats`` after it."""

    def __init__(self, address: tuple[str, int], idle: int = IDLE, drip: int = DRIP) -> None:
        self.address = address
        self.idle = idle
        self.drip = drip
        self.stats: dict[str, Any] = {}
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> Probe:
        host, port = self.address
        cmd = [sys.executable, __file__, host, str(port), str(self.idle), str(self.drip)]
        self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        assert line.strip() == "ready", f"the probe did not start: {line!r}"
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._proc is not None
        out, _ = self._proc.communicate(input="", timeout=30)  # closes stdin: the probe ends
        lines = out.strip().splitlines()
        self.stats = json.loads(lines[-1]) if lines else {}


if __name__ == "__main__":
    host, port, idle, drip = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    print(json.dumps(hold(host, port, idle, drip)), flush=True)
