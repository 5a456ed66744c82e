"""The coordinator's TCP front end: one thread per connection, JSON lines, token checked.

Request connections get one reply per request (some block until an assignment exists). A
liveness connection carries pings from the rank and notices to it; its loss or silence marks
the rank dead.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import socket
import socketserver
import threading
from typing import TYPE_CHECKING

from parsl_malleable.elastic.wire import LineReader, send_message

if TYPE_CHECKING:
    from parsl_malleable.elastic.coordinator import Coordinator

logger = logging.getLogger(__name__)


class _Handler(socketserver.StreamRequestHandler):
    server: CoordinatorServer

    def handle(self) -> None:
        coordinator = self.server.coordinator
        sock: socket.socket = self.request
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        reader = LineReader(sock)
        with self.server.connections_lock:
            self.server.connections.add(sock)
        try:
            while True:
                message = reader.read()
                if message is None:
                    return
                if not secrets.compare_digest(str(message.get("token", "")), coordinator.token):
                    send_message(sock, {"error": "bad token"})
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
    """Serves one :class:`Coordinator`; :meth:`drop_connections` ends every open connection."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], coordinator: Coordinator) -> None:
        self.coordinator = coordinator
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def drop_connections(self) -> None:
        """Shut down every open rank connection so blocked ranks see the job end."""
        with self.connections_lock:
            for sock in list(self.connections):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
