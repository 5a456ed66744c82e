"""The controller's end of the agent channel: one connection and one thread per agent.

An agent's first message (``hello``) says where it runs; the reply is its first order. After
that each message is a report (``done``: the ranks it ran have ended) and each reply the next
order (``terminated``: the agent's process got SIGTERM and ends; the reply is ``exit``). Orders
wait in the agent's queue until the controller puts one there. A connection
first answers the same challenge as the coordinator's
(:func:`~parsl_malleable.elastic.wire.challenge`: HMAC-SHA256 of a fresh nonce with the
controller's secret, which never crosses this link); one that has not said ``hello`` within
``hello_timeout_s`` is dropped, and at most ``MAX_UNAUTHENTICATED`` may be at that stage at once.
A closed connection means the agent is gone.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import socket
import socketserver
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from parsl_malleable.elastic.wire import LineReader, challenge, send_message

logger = logging.getLogger(__name__)

MAX_UNAUTHENTICATED = 32
# A report's status when the agent's process got SIGTERM and ends after this report.
TERMINATED = "terminated"


@dataclass
class AgentLink:
    """One connected agent: where it runs, what it runs now, and its order queue."""

    agent_id: str
    node_id: str
    node_name: str
    block_key: str
    parsl_block: str
    local_rank: int
    local_size: int
    jobs: frozenset[str]
    job: str | None = None
    member: str | None = None
    orders: queue.Queue[dict[str, Any]] = field(default_factory=queue.Queue)
    connected: bool = True


Hello = Callable[[dict[str, Any]], AgentLink | None]
Report = Callable[[AgentLink, dict[str, Any]], None]
Gone = Callable[[AgentLink], None]


class _Handler(socketserver.BaseRequestHandler):
    server: AgentServer

    def handle(self) -> None:
        sock: socket.socket = self.request
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(self.server.hello_timeout_s)
        reader = LineReader(sock)
        link: AgentLink | None = None
        with self.server.lock:
            if self.server.unauthenticated >= MAX_UNAUTHENTICATED:
                logger.warning("agent link: too many connections without a hello; dropping one")
                return
            self.server.unauthenticated += 1
            self.server.sockets.add(sock)
        waiting = True
        try:
            if not challenge(sock, reader, self.server.token):
                logger.warning("agent connection that failed the challenge dropped")
                return
            message = reader.read()
            if message is None or message.get("op") != "hello":
                return
            send_message(sock, {"ok": True})  # the client's own greeting ("hello" op)
            message = reader.read()
            if message is None or message.get("op") != "hello":
                return
            sock.settimeout(None)  # ranks run for hours between two reports
            waiting = False
            with self.server.lock:
                self.server.unauthenticated -= 1
            link = self.server.on_hello(message)
            if link is None:
                send_message(sock, {"action": "exit", "reason": "not wanted"})
                return
            while True:
                order = self._next_order(link)
                send_message(sock, order)
                if order.get("action") in ("exit", "refresh"):
                    return
                report = reader.read()
                if report is None:
                    return
                self.server.on_report(link, report)
                if report.get("status") == TERMINATED:
                    # Its process ends now (a preemption's notice): no order will be read.
                    send_message(sock, {"action": "exit", "reason": "its node is being taken"})
                    return
        except (OSError, ValueError) as exc:
            logger.debug("agent connection ended: %s", exc)
        finally:
            with self.server.lock:
                self.server.sockets.discard(sock)
                if waiting:
                    self.server.unauthenticated -= 1
            if link is not None:
                link.connected = False
                self.server.on_gone(link)

    def _next_order(self, link: AgentLink) -> dict[str, Any]:
        while True:
            try:
                return link.orders.get(timeout=0.5)
            except queue.Empty:
                if self.server.closing.is_set():
                    return {"action": "exit", "reason": "controller closed"}


class AgentServer(socketserver.ThreadingTCPServer):
    """Serves agents for one controller on ``(host, port)``."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128  # every worker of a new block connects at once

    def __init__(
        self,
        address: tuple[str, int],
        token: str,
        on_hello: Hello,
        on_report: Report,
        on_gone: Gone,
        hello_timeout_s: float = 10.0,
    ) -> None:
        self.token = token
        self.on_hello = on_hello
        self.on_report = on_report
        self.on_gone = on_gone
        self.hello_timeout_s = hello_timeout_s
        self.lock = threading.Lock()
        self.unauthenticated = 0
        self.sockets: set[socket.socket] = set()
        self.closing = threading.Event()
        super().__init__(address, _Handler)

    def start(self) -> None:
        """Serve in a daemon thread."""
        threading.Thread(target=self.serve_forever, name="controller-agents", daemon=True).start()

    def close(self) -> None:
        """Stop serving and drop every agent connection (agents then end)."""
        self.closing.set()
        self.shutdown()
        self.server_close()
        with self.lock:
            for sock in list(self.sockets):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


__all__ = ["TERMINATED", "AgentLink", "AgentServer"]
