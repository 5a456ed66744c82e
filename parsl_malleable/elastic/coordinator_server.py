"""The coordinator's TCP front end: one thread per connection, JSON lines, challenge first.

Request connections get one reply per request (some block until an assignment exists). A
liveness connection carries pings from the rank and notices to it; its loss or silence marks
the rank dead. Each connection is first sent a random nonce and must answer with
:func:`~parsl_malleable.elastic.wire.proof` of the job's token within ``AUTH_TIMEOUT_S``; at
most ``MAX_UNAUTHENTICATED`` may be at that stage at once, so idle or garbage connections cannot
hold threads (200 idle ones were once all kept, forever).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import socketserver
import threading
from typing import Any, Protocol

from parsl_malleable.elastic.wire import LineReader, challenge, send_message

logger = logging.getLogger(__name__)

AUTH_TIMEOUT_S = 10.0
MAX_UNAUTHENTICATED = 32


class ServedCoordinator(Protocol):
    """What the front end needs of the coordinator it serves.

    :class:`~parsl_malleable.elastic.coordinator.Coordinator` is the one implementation; naming
    only these members here, rather than importing it, keeps the dependency one way (the
    coordinator starts its server, the server never imports the coordinator).
    """

    token: str
    heartbeat_timeout_s: float

    def handle(self, message: dict[str, Any]) -> dict[str, Any]:
        """Answer one request from a rank."""
        ...

    def liveness_opened(self, member_id: str, sock: socket.socket) -> None:
        """Note that a rank's liveness connection is open on ``sock``."""
        ...

    def member_lost(self, member_id: str, why: str) -> None:
        """Note that a rank's liveness connection closed or went silent."""
        ...


class _Handler(socketserver.StreamRequestHandler):
    server: CoordinatorServer

    def handle(self) -> None:
        coordinator = self.server.coordinator
        sock: socket.socket = self.request
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        reader = LineReader(sock)
        with self.server.connections_lock:
            if self.server.unauthenticated >= MAX_UNAUTHENTICATED:
                logger.warning("coordinator: too many connections without a token; dropping one")
                return
            self.server.unauthenticated += 1
            self.server.connections.add(sock)
        waiting = True
        sock.settimeout(self.server.auth_timeout_s)
        try:
            if not challenge(sock, reader, coordinator.token):
                return
            # Ranks may be quiet for long between requests once they are known.
            sock.settimeout(None)
            waiting = False
            with self.server.connections_lock:
                self.server.unauthenticated -= 1
            while True:
                message = reader.read()
                if message is None:
                    return
                if message.get("op") == "liveness":
                    self._liveness(sock, reader, str(message.get("member")))
                    return
                send_message(sock, coordinator.handle(message))
        except (OSError, ValueError) as exc:
            logger.debug("coordinator connection ended: %s", exc)
        finally:
            with self.server.connections_lock:
                self.server.connections.discard(sock)
                if waiting:
                    self.server.unauthenticated -= 1

    def _liveness(self, sock: socket.socket, reader: LineReader, member_id: str) -> None:
        coordinator = self.server.coordinator
        send_message(sock, {"ok": True})
        sock.settimeout(coordinator.heartbeat_timeout_s)
        coordinator.liveness_opened(member_id, sock)
        why = "connection closed"
        try:
            while reader.read() is not None:
                pass
        except TimeoutError:
            why = f"no heartbeat for {coordinator.heartbeat_timeout_s} s"
        except (OSError, ValueError) as exc:
            why = f"connection error: {exc}"
        coordinator.member_lost(member_id, why)


class CoordinatorServer(socketserver.ThreadingTCPServer):
    """Serves one coordinator; :meth:`drop_connections` ends every open connection."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128  # a job's ranks connect at once; the default backlog is 5

    def __init__(
        self,
        address: tuple[str, int],
        coordinator: ServedCoordinator,
        auth_timeout_s: float | None = None,
    ) -> None:
        self.coordinator = coordinator
        self.auth_timeout_s = AUTH_TIMEOUT_S if auth_timeout_s is None else auth_timeout_s
        self.unauthenticated = 0
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def drop_connections(self) -> None:
        """Shut down every open rank connection so blocked ranks see the job end."""
        with self.connections_lock:
            for sock in list(self.connections):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
