"""An authenticated JSON-lines server: strangers are held without threads, peers get one each.

Shared by the job's coordinator (:mod:`~parsl_malleable.elastic.coordinator_server`) and the
controller's agent link (:mod:`parsl_malleable.controller.agent_link`). A connection's life:

1. *Pending.* One selector thread accepts it, sends a fresh nonce (:class:`~.messages.Challenge`)
   and waits, without blocking, for :class:`~.messages.Auth`: HMAC-SHA256 of the nonce with the
   shared secret. The whole handshake has one absolute deadline (``Limits.handshake_s`` from the
   accept), so a peer dripping a byte at a time is dropped when it expires, however it paces.
2. *Authenticated.* Only then does the connection get a thread of its own, and the handler
   (which may block for hours: a rank waiting for its assignment) runs there.

Strangers cannot starve peers: pending connections cost a socket, never a thread, and are
capped per source address and in total; a newcomer beyond a cap evicts the *oldest* pending
connection (of its own address, or of the address holding the most) instead of being refused.
A legitimate peer answers the challenge within a round trip, so it is never the oldest for
long, while an idle or slow one ages out. Evicted peers are told ``{"error": "busy", "retry":
true}``; clients retry with backoff (:mod:`~parsl_malleable.transport.wire`). Drops are logged
as one summary line per ``Limits.log_every_s``, never one per connection.
"""

from __future__ import annotations

import contextlib
import errno
import hmac
import json
import logging
import resource
import secrets
import selectors
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from parsl_malleable.transport.messages import Auth, Challenge, Ok, Refusal, parse_line
from parsl_malleable.transport.wire import LineReader, proof, send_message

logger = logging.getLogger(__name__)

# An Auth line is under 100 bytes: more than this without a newline is not a client of ours.
MAX_HANDSHAKE_BYTES = 512


class Limits(BaseModel):
    """What one server allows.

    ``handshake_s``: from accept to a valid proof, whatever the peer sends meanwhile.
    ``pending_per_address`` / ``pending_total``: connections still in the handshake, per source
    address and in all; beyond either, the oldest pending one is evicted. ``authenticated``:
    handler threads (a newcomer beyond it is refused with ``retry``). ``accept_batch``: accepts
    per selector round, after the round's handshake answers, so a burst of newcomers cannot
    evict answers that already arrived. ``log_every_s``: at most one drop summary per interval.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    handshake_s: float = Field(5.0, gt=0)
    pending_per_address: int = Field(256, ge=1)
    pending_total: int = Field(512, ge=1)
    authenticated: int = Field(2048, ge=1)
    accept_batch: int = Field(16, ge=1)
    log_every_s: float = Field(10.0, gt=0)

    def within_descriptors(self) -> Limits:
        """These limits, with pending connections held to a quarter of the process's file
        descriptors (a soft limit of 1024 is common): strangers must not exhaust them."""
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return self
        total = min(self.pending_total, max(16, soft // 4))
        return self.model_copy(
            update={
                "pending_total": total,
                "pending_per_address": min(self.pending_per_address, total),
            }
        )


@dataclass
class Connection:
    """An authenticated connection, as a handler gets it (the server closes it afterwards).

    ``deadline`` (``time.monotonic()``) is when the handshake's time ran out: a handler whose
    protocol has more greeting (the agent link's hello) holds the peer to the same deadline.
    """

    sock: socket.socket
    reader: LineReader
    peer: str
    deadline: float


Handler = Callable[[Connection], None]


@dataclass
class _Pending:
    sock: socket.socket
    peer: str
    nonce: str
    deadline: float
    buffer: bytes = b""


@dataclass
class DropLog:
    """Counts connections dropped before authenticating; logs one summary line per interval.

    The first drop after a quiet interval is logged at once; later ones are folded into the next
    summary, so a flood of thousands a second still writes a line every ``every_s``.
    """

    name: str
    every_s: float
    totals: Counter[str] = field(default_factory=Counter)
    _window: Counter[str] = field(default_factory=Counter)
    _last_line: float = float("-inf")
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def note(self, reason: str) -> None:
        """Count one drop for ``reason``."""
        with self._lock:
            self.totals[reason] += 1
            self._window[reason] += 1

    def due(self) -> float | None:
        """When the next summary is due (``time.monotonic()``), or ``None`` with nothing to say."""
        with self._lock:
            return self._last_line + self.every_s if self._window else None

    def flush(self, now: float, force: bool = False) -> None:
        """Write the summary if one is due (or ``force`` and there is anything to say)."""
        with self._lock:
            if not self._window or (not force and now < self._last_line + self.every_s):
                return
            counts, self._window = self._window, Counter()
            since = now - self._last_line
            self._last_line = now
        span = f"in the last {since:.0f} s" if since < 1e9 else "so far"
        logger.warning(
            "%s: %d connection(s) dropped before authenticating %s (%s)",
            self.name,
            sum(counts.values()),
            span,
            ", ".join(f"{n} {reason}" for reason, n in counts.most_common()),
        )


class MessageServer:
    """Listens on ``address``; authenticates with ``secret``; runs ``handler`` per peer.

    The socketserver-like surface (:meth:`serve_forever`, :meth:`shutdown`,
    :meth:`server_close`, ``server_address``) lets callers run it in a thread of their own;
    :meth:`start` and :meth:`close` do it all.
    """

    def __init__(
        self,
        address: tuple[str, int],
        secret: str,
        handler: Handler,
        name: str,
        limits: Limits | None = None,
    ) -> None:
        self.name = name
        self.limits = (limits or Limits()).within_descriptors()
        self.drops = DropLog(name, self.limits.log_every_s)
        self._secret = secret
        self._handler = handler
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._listener.bind(address)
            # A job's ranks, or a new block's workers, connect at once; the default is 5.
            self._listener.listen(1024)
            self._listener.setblocking(False)
        except OSError:
            self._listener.close()
            raise
        self.server_address: tuple[str, int] = self._listener.getsockname()[:2]
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        # Insertion order is arrival order, so the first entry is the oldest (and the first
        # whose deadline passes: every deadline is arrival + handshake_s).
        self._pending: dict[socket.socket, _Pending] = {}
        self._by_peer: dict[str, dict[socket.socket, _Pending]] = {}
        self._lock = threading.Lock()
        self._peers: set[socket.socket] = set()
        self._stop = threading.Event()
        self._serving = threading.Event()
        self._stopped = threading.Event()
        self._closed = False

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Serve in a daemon thread."""
        threading.Thread(target=self.serve_forever, name=self.name, daemon=True).start()

    def serve_forever(self) -> None:
        """Accept and authenticate until :meth:`shutdown` (blocks the calling thread)."""
        self._serving.set()
        try:
            while not self._stop.is_set():
                try:
                    self._round()
                except Exception:  # a bug here must not silently end the port's service
                    logger.exception("%s: error in the accept loop", self.name)
                    self._stop.wait(0.1)
        finally:
            for pending in list(self._pending.values()):
                self._forget(pending)
                pending.sock.close()
            self.drops.flush(time.monotonic(), force=True)
            self._stopped.set()

    def shutdown(self) -> None:
        """Stop serving (waits for :meth:`serve_forever` to return, if it runs)."""
        self._stop.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if self._serving.is_set():
            self._stopped.wait()

    def server_close(self) -> None:
        """Close the listening socket (after :meth:`shutdown`)."""
        if self._closed:
            return
        self._closed = True
        self.shutdown()  # the selector must not be in use while its sockets close
        for sock in (self._listener, self._wake_r):
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(sock)
            sock.close()
        self._wake_w.close()
        self._selector.close()

    def drop_connections(self) -> None:
        """Shut down every authenticated connection, so handlers blocked on them end."""
        with self._lock:
            peers = list(self._peers)
        for sock in peers:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Stop serving, close the port, drop every connection."""
        self.shutdown()
        self.server_close()
        self.drop_connections()

    @property
    def pending(self) -> int:
        """Connections in the handshake now (a snapshot, from any thread)."""
        return len(self._pending)

    @property
    def authenticated(self) -> int:
        """Connections past the handshake now (each has a handler thread)."""
        with self._lock:
            return len(self._peers)

    # ------------------------------------------------------------ selector stage

    def _round(self) -> None:
        timeout = self._next_wake()
        events = self._selector.select(timeout)
        accept = False
        for key, _ in events:
            if key.fileobj is self._listener:
                accept = True
            elif key.fileobj is self._wake_r:
                with contextlib.suppress(OSError):
                    self._wake_r.recv(4096)
            else:
                self._readable(key.data)
        # Answers first, then newcomers (see Limits.accept_batch).
        if accept and not self._stop.is_set():
            self._accept()
        now = time.monotonic()
        self._expire(now)
        self.drops.flush(now)

    def _next_wake(self) -> float | None:
        times = [self.drops.due()]
        if self._pending:
            times.append(next(iter(self._pending.values())).deadline)
        due = [t for t in times if t is not None]
        return max(0.0, min(due) - time.monotonic()) if due else None

    def _accept(self) -> None:
        for _ in range(self.limits.accept_batch):
            try:
                sock, address = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:  # reset while still in the backlog
                continue
            except OSError as exc:
                self.drops.note(f"not accepted ({errno.errorcode.get(exc.errno or 0, exc)})")
                if exc.errno in (errno.EMFILE, errno.ENFILE) and self._pending:
                    # Free a descriptor, or the listener stays readable and the loop spins.
                    self._drop(next(iter(self._pending.values())), "evicted", busy=True)
                else:
                    self._stop.wait(0.05)
                return
            self._admit(sock, str(address[0]))

    def _admit(self, sock: socket.socket, peer: str) -> None:
        limits = self.limits
        same = self._by_peer.get(peer, {})
        if len(same) >= limits.pending_per_address:
            self._drop(next(iter(same.values())), "evicted", busy=True)
        elif len(self._pending) >= limits.pending_total:
            # The address holding the most pending connections pays: one attacking host cannot
            # evict the handshakes of ranks on other hosts.
            busiest = max(self._by_peer.values(), key=len)
            self._drop(next(iter(busiest.values())), "evicted", busy=True)
        pending = _Pending(sock, peer, secrets.token_hex(32), time.monotonic() + limits.handshake_s)
        self._pending[sock] = pending
        self._by_peer.setdefault(peer, {})[sock] = pending
        line = Challenge(challenge=pending.nonce).model_dump_json().encode() + b"\n"
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._selector.register(sock, selectors.EVENT_READ, pending)
            # A fresh socket's send buffer takes a line whole; anything else is not a peer.
            if sock.send(line) != len(line):
                raise BlockingIOError
        except OSError:
            self._drop(pending, "closed before the challenge")

    def _readable(self, pending: _Pending) -> None:
        try:
            chunk = pending.sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(pending, "reset")
            return
        if not chunk:
            self._drop(pending, "closed by the peer")
            return
        pending.buffer += chunk
        line, newline, rest = pending.buffer.partition(b"\n")
        if len(line) > MAX_HANDSHAKE_BYTES:
            self._drop(pending, "oversized handshake")
            return
        if not newline:
            return
        auth = parse_line(Auth, line)
        if not isinstance(auth, Auth) or not hmac.compare_digest(
            auth.mac, proof(self._secret, pending.nonce)
        ):
            self._drop(pending, "bad token", refusal=Refusal(error="bad token"))
            return
        self._forget(pending)
        self._hand_over(pending, rest)

    def _expire(self, now: float) -> None:
        while self._pending:
            oldest = next(iter(self._pending.values()))
            if oldest.deadline > now:
                return
            self._drop(oldest, "handshake deadline")

    def _forget(self, pending: _Pending) -> None:
        self._pending.pop(pending.sock, None)
        same = self._by_peer.get(pending.peer)
        if same is not None:
            same.pop(pending.sock, None)
            if not same:
                del self._by_peer[pending.peer]
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(pending.sock)

    def _drop(
        self,
        pending: _Pending,
        reason: str,
        busy: bool = False,
        refusal: Refusal | None = None,
    ) -> None:
        self._forget(pending)
        if busy:
            refusal = Refusal(error="busy", retry=True)
        if refusal is not None:
            # Best effort and never blocking: a stranger's full window is its own problem.
            with contextlib.suppress(OSError):
                pending.sock.send(json.dumps(refusal.to_json()).encode() + b"\n")
        pending.sock.close()
        self.drops.note(reason)

    # ------------------------------------------------------- authenticated stage

    def _hand_over(self, pending: _Pending, rest: bytes) -> None:
        sock = pending.sock
        with self._lock:
            full = len(self._peers) >= self.limits.authenticated
            if not full:
                self._peers.add(sock)
        if full:
            refusal = Refusal(error="server full", retry=True).to_json()
            with contextlib.suppress(OSError):
                sock.send(json.dumps(refusal).encode() + b"\n")
            sock.close()
            self.drops.note("refused (every handler slot taken)")
            return
        sock.setblocking(True)
        connection = Connection(sock, LineReader(sock, rest), pending.peer, pending.deadline)
        thread = threading.Thread(
            target=self._serve_peer, args=(connection,), name=f"{self.name}-peer", daemon=True
        )
        try:
            thread.start()
        except RuntimeError:  # the process is out of threads: this peer may try again later
            with self._lock:
                self._peers.discard(sock)
            sock.close()
            self.drops.note("refused (no thread to serve it)")

    def _serve_peer(self, connection: Connection) -> None:
        sock = connection.sock
        try:
            send_message(sock, Ok().to_json())
            self._handler(connection)
        except (OSError, ValueError) as exc:
            logger.debug("%s: connection from %s ended: %s", self.name, connection.peer, exc)
        except Exception:  # a handler's bug must not leak the slot, nor pass silently
            logger.exception(
                "%s: handler failed on a connection from %s", self.name, connection.peer
            )
        finally:
            with self._lock:
                self._peers.discard(sock)
            with contextlib.suppress(OSError):
                sock.close()


__all__ = ["Connection", "DropLog", "Handler", "Limits", "MessageServer"]
