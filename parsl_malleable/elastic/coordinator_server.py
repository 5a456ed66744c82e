"""The coordinator's TCP front end: the rank protocol on an authenticated message server.

Connections pass the challenge in :class:`~parsl_malleable.transport.server.MessageServer`
(no thread until then; one absolute deadline, ``AUTH_TIMEOUT_S``; strangers capped and the oldest
evicted, so they cannot keep ranks out). Then each gets a thread here. A request connection gets
one reply per request (some block until an assignment exists); every request is validated
(:data:`~parsl_malleable.elastic.messages.COORDINATOR_REQUESTS`) and a malformed one answered
with an ``error``, the connection kept. A liveness connection carries pings from the rank and
notices to it; its loss or silence marks the rank dead.
"""

from __future__ import annotations

import logging
import socket
from typing import Protocol

from parsl_malleable.elastic.messages import COORDINATOR_REQUESTS, Liveness
from parsl_malleable.transport.messages import Ok, Refusal, Reply, Request, parse
from parsl_malleable.transport.server import Connection, Limits, MessageServer
from parsl_malleable.transport.wire import send_message

logger = logging.getLogger(__name__)

# Read when a server is made (tests change them). AUTH_TIMEOUT_S: the whole handshake, from
# accept to proof; LIMITS: the rest of what strangers may hold.
AUTH_TIMEOUT_S = 5.0
LIMITS = Limits()


class ServedCoordinator(Protocol):
    """What the front end needs of the coordinator it serves.

    :class:`~parsl_malleable.elastic.coordinator.Coordinator` is the one implementation; naming
    only these members here, rather than importing it, keeps the dependency one way (the
    coordinator starts its server, the server never imports the coordinator).
    """

    token: str
    heartbeat_timeout_s: float

    def handle(self, request: Request) -> Reply | Refusal:
        """Answer one validated request from a rank."""
        ...

    def liveness_opened(self, member_id: str, sock: socket.socket) -> None:
        """Note that a rank's liveness connection is open on ``sock``."""
        ...

    def member_lost(self, member_id: str, why: str) -> None:
        """Note that a rank's liveness connection closed or went silent."""
        ...


class CoordinatorServer(MessageServer):
    """Serves one coordinator; :meth:`drop_connections` ends every open rank connection."""

    def __init__(
        self,
        address: tuple[str, int],
        coordinator: ServedCoordinator,
        auth_timeout_s: float | None = None,
        limits: Limits | None = None,
    ) -> None:
        self.coordinator = coordinator
        timeout = AUTH_TIMEOUT_S if auth_timeout_s is None else auth_timeout_s
        limits = limits or LIMITS.model_copy(update={"handshake_s": timeout})
        super().__init__(address, coordinator.token, self._serve, "coordinator", limits)

    def _serve(self, connection: Connection) -> None:
        sock, reader = connection.sock, connection.reader
        while (raw := reader.read()) is not None:
            request = parse(COORDINATOR_REQUESTS, raw)
            if isinstance(request, Refusal):
                send_message(sock, request.to_json())
                continue
            if isinstance(request, Liveness):
                self._liveness(connection, request.member)
                return
            reply: Reply | Refusal
            try:
                reply = self.coordinator.handle(request)
            except Exception as exc:  # the rank gets an answer; the next request is served
                logger.exception("coordinator: %r request failed", request.op)
                reply = Refusal(error=f"internal error: {type(exc).__name__}")
            send_message(sock, reply.to_json())

    def _liveness(self, connection: Connection, member_id: str) -> None:
        coordinator = self.coordinator
        sock, reader = connection.sock, connection.reader
        send_message(sock, Ok().to_json())
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


__all__ = ["AUTH_TIMEOUT_S", "LIMITS", "CoordinatorServer", "ServedCoordinator"]
