"""The driver's file-descriptor budget: a flood of connections ends a run cleanly (issue 49).

Parsl's HighThroughputExecutor binds three ZMQ sockets in the driver process (tasks out,
results in, commands; on its ``loopback_address``, 127.0.0.1), which its interchange connects
to. Any local user can open TCP connections to them, and libzmq accepts each one, holding a
descriptor until the peer's handshake completes or times out (``ZMQ_HANDSHAKE_IVL``, 30 s by
default). The executor's sockets use CurveZMQ (``encrypted=True``), so a stranger never
completes the handshake, but ~21,000 silent connections in 6 s took every descriptor of a driver
with ``ulimit -n`` 20000: its next open (the Optuna journal) failed with ``Too many open files``,
with a 60-line traceback. libzmq has no cap on the connections a bound socket accepts (the
context's ``MAX_SOCKETS`` counts ZMQ sockets, not their connections), so the budget is kept
around it:

* :func:`raise_soft_limit`: the soft ``RLIMIT_NOFILE`` is raised to the hard one;
* :func:`shorten_zmq_handshakes`: the driver's ZMQ sockets drop a connection that has not
  completed its handshake within :data:`HANDSHAKE_IVL_MS` (the interchange, on this host,
  completes it in milliseconds, and reconnects by itself if it ever does not), so a flood holds
  about its rate times 2 s of descriptors instead of its rate times 30 s;
* :class:`DescriptorBudget`: a thread counts the open descriptors; when fewer than a margin are
  left (a tenth of the limit, at least :data:`MARGIN_MIN` but never more than a quarter), the
  run stops as if interrupted, its jobs keep their state, and the driver says so in one line
  (``stop_reason``); an error that comes from running out (``EMFILE`` anywhere: SQLite, a
  journal, Parsl) ends it the same way. A reserve of :data:`RESERVE` descriptors, opened at the
  start, is closed at the alarm, so that the state can still be written while the Parsl
  executor shuts down (closing its sockets, and the flood's connections with them).

The project's own listeners (``transport/server.py``) already cap what strangers hold.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import resource
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

HANDSHAKE_IVL_MS = 2000
RESERVE = 64  # pre-opened descriptors, closed to end the run in order
MARGIN_MIN = 256  # the run stops when fewer than max(MARGIN_MIN, limit / 10) are left
CHECK_S = 0.2  # a count of /proc/self/fd: well under a millisecond for a few hundred
EXHAUSTED_ERRNOS = (errno.EMFILE, errno.ENFILE)


def raise_soft_limit() -> int:
    """Raise the soft limit on open descriptors to the hard one (capped at the kernel's
    ``nr_open`` when the hard one is unlimited); the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:
        try:
            target = int(Path("/proc/sys/fs/nr_open").read_text())
        except (OSError, ValueError):
            return soft
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (OSError, ValueError) as exc:  # a container may refuse: keep what we have
            logger.info("could not raise the descriptor limit from %d to %d: %s", soft, target, exc)
            return soft
        return target
    return soft


def open_descriptors() -> int:
    """How many descriptors this process has open (its own listing's not counted)."""
    return len(os.listdir("/proc/self/fd")) - 1


def _socket_descriptors() -> int:
    count = 0
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                count += 1
    return count


def exhaustion_in(exc: BaseException) -> bool:
    """Whether ``exc``, or an exception it came from, says the descriptors ran out."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in EXHAUSTED_ERRNOS:
            return True
        if "Too many open files" in str(current):  # an error that kept only the words
            return True
        current = current.__cause__ or current.__context__
    return False


class DescriptorBudget:
    """Watch this process's open descriptors; call ``on_exhausted(reason)`` once when fewer
    than the margin are left. :meth:`start` raises the soft limit, opens the reserve and starts
    the watching thread; :meth:`close` stops it and closes the reserve."""

    def __init__(
        self,
        on_exhausted: Callable[[str], None],
        *,
        reserve: int = RESERVE,
        check_s: float = CHECK_S,
    ) -> None:
        self.on_exhausted = on_exhausted
        self.reserve = reserve
        self.check_s = check_s
        self.limit = 0
        self.margin = 0
        self.reason: str | None = None  # why the run ran out, once it did
        self._held: list[int] = []
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Raise the limit, open the reserve, start watching."""
        self.limit = raise_soft_limit()
        # A tenth of the limit, at least MARGIN_MIN, but never most of a small limit.
        self.margin = max(min(MARGIN_MIN, self.limit // 4), self.limit // 10)
        with contextlib.suppress(OSError):
            for _ in range(self.reserve):
                self._held.append(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
        self._thread = threading.Thread(target=self._watch, name="fd-budget", daemon=True)
        self._thread.start()

    @property
    def tripped(self) -> bool:
        """Whether the descriptors ran (nearly) out during this run."""
        return self.reason is not None

    def trip(self, detail: str = "") -> str:
        """Record that the descriptors ran out (once) and tell ``on_exhausted``; the reason."""
        with self._lock:
            if self.reason is not None:
                return self.reason
            try:
                count, sockets = open_descriptors(), _socket_descriptors()
                what = f"{count} of its limit of {self.limit} open, {sockets} of them sockets"
            except OSError:  # listing /proc/self/fd takes a descriptor too
                what = f"all of its limit of {self.limit} open"
            self.reason = (
                f"the driver ran out of file descriptors ({what}{detail}: most likely a flood "
                f"of connections to its ports); it stopped and every job keeps its state: "
                f"rerun the same command to resume"
            )
        self.release_reserve()
        self.on_exhausted(self.reason)
        return self.reason

    def near_limit(self) -> bool:
        """Whether fewer than the margin are left now."""
        try:
            return self.limit - open_descriptors() < self.margin
        except OSError as exc:
            return exc.errno in EXHAUSTED_ERRNOS

    def explains(self, exc: BaseException) -> bool:
        """Whether ``exc`` comes from running out of descriptors (then the run is tripped):
        it says so, or it came while they were (nearly) out. SQLite, for one, says only
        "unable to open database file"."""
        if not (self.tripped or exhaustion_in(exc) or self.near_limit()):
            return False
        self.trip(f"; {type(exc).__name__}: {exc}")
        return True

    def release_reserve(self) -> None:
        """Close the reserve: descriptors for writing the state and the results."""
        with self._lock:
            held, self._held = self._held, []
        for fd in held:
            with contextlib.suppress(OSError):
                os.close(fd)

    def close(self) -> None:
        """Stop watching; close the reserve."""
        self._done.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.release_reserve()

    def _watch(self) -> None:
        while not self._done.wait(self.check_s):
            try:
                left = self.limit - open_descriptors()
            except OSError as exc:
                if exc.errno not in EXHAUSTED_ERRNOS:
                    continue
                left = 0
            if left < self.margin:
                self.trip()
                return


@contextlib.contextmanager
def shorten_zmq_handshakes(executor: Any, ivl_ms: int = HANDSHAKE_IVL_MS) -> Iterator[None]:
    """While the block runs, the ZMQ sockets that Parsl's executors make in this process (the
    three HTEX binds in ``executor.start``, made inside ``parsl.load``) drop a connection whose
    handshake is not done in ``ivl_ms``. libzmq copies a socket's options into its listener at
    ``bind``, so the option must be set when the socket is made, before Parsl binds it: this
    wraps :class:`parsl.curvezmq.ClientContext`'s ``socket`` for the block's duration.
    ``executor`` is only named in the log."""
    import zmq
    from parsl import curvezmq

    original = curvezmq.ClientContext.socket

    def socket(self: Any, socket_type: int, *args: Any, **kwargs: Any) -> zmq.Socket[Any]:
        sock = original(self, socket_type, *args, **kwargs)
        sock.setsockopt(zmq.HANDSHAKE_IVL, ivl_ms)
        return sock

    curvezmq.ClientContext.socket = socket  # type: ignore[method-assign]
    logger.debug("%s: its driver-side ZMQ handshakes time out after %d ms", executor, ivl_ms)
    try:
        yield
    finally:
        curvezmq.ClientContext.socket = original  # type: ignore[method-assign]
