"""The controller's end of the agent channel: one connection and one thread per agent.

An agent's first message (``hello``) says where it runs; the reply is its first order. After
that each message is a report (``done``: the ranks it ran have ended) and each reply the next
order (``terminated``: the agent's process got SIGTERM and ends; the reply is ``exit``). Orders
wait in the agent's queue until the controller puts one there. The link runs on the job
servers' :class:`~parsl_malleable.transport.server.MessageServer`: a connection first
answers the same challenge as the coordinator's (HMAC-SHA256 of a fresh nonce with the
controller's secret, which never crosses this link) without holding a thread, strangers are
capped and the oldest evicted, and the challenge and both hellos share one deadline,
``hello_timeout_s`` from the accept. Hellos and reports are validated (:class:`AgentHello`,
:class:`AgentReport`): a malformed one is answered with an ``error`` and never reaches the
controller. A closed connection means the agent is gone.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, TypeAdapter

from parsl_malleable.elastic.settings import keep_tail
from parsl_malleable.transport.messages import Hello, Ok, Refusal, Reply, Request, parse
from parsl_malleable.transport.server import Connection, Limits, MessageServer
from parsl_malleable.transport.wire import send_message

logger = logging.getLogger(__name__)

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
    orders: queue.Queue[Order] = field(default_factory=queue.Queue)
    connected: bool = True


def node_name(hello: AgentHello, block_nodes: Sequence[str] = ()) -> str:
    """The node an agent's ``hello`` comes from, named as its block's scheduler job names it.

    An agent that could only name its host (PBS tells a job's processes no vnode, and one MoM
    may carry several) is on the block's node at its ``node_index``; without the block's
    nodes, or when the agent's own name is one of them (Slurm's NodeName), its own name."""
    name = hello.node or hello.pool or ""
    if not block_nodes or name in block_nodes:
        return name
    return block_nodes[min(hello.node_index, len(block_nodes) - 1)]


OnHello = Callable[["AgentHello"], AgentLink | None]
OnReport = Callable[[AgentLink, "AgentReport"], None]
OnGone = Callable[[AgentLink], None]


Name = Annotated[str, Field(min_length=1, max_length=256)]


class AgentHello(Request):
    """Where an agent runs (:func:`~parsl_malleable.controller.node_agent.where_am_i`) and which
    jobs its task carries."""

    op: Literal["hello"] = "hello"
    agent: Name
    jobs: list[Name] = []
    node: str | None = None
    pool: str | None = None
    block: str | None = None
    job_id: str | None = None
    local_rank: Annotated[int, Field(ge=0)] = 0
    local_size: int = 1  # the controller takes at least 1
    node_index: Annotated[int, Field(ge=0)] = 0  # among its block's nodes (PBS names vnodes)
    host: str | None = None
    pid: int | None = None


class AgentReport(Request):
    """The ranks an agent ran have ended: how (``status``) and why (``traceback``: the
    formatted traceback of a training function that raised, its last
    :data:`~parsl_malleable.elastic.settings.TRACEBACK_CHARS` characters kept on receipt)."""

    op: Literal["done"] = "done"
    agent: Name
    job: str | None = None
    status: str
    reason: str = ""
    traceback: Annotated[str, AfterValidator(lambda text: keep_tail(text))] = ""


class RunRank(Reply):
    """Order: run a rank of ``job`` as ``member``, its coordinator at ``host``:``port``."""

    action: Literal["run"] = "run"
    job: Name
    member: Name
    host: str
    port: Annotated[int, Field(ge=1, le=65535)]


class ExitOrder(Reply):
    """Order: end the agent task (``reason``: why, for its log)."""

    action: Literal["exit"] = "exit"
    reason: str = ""


class RefreshOrder(Reply):
    """Order: end the agent task so that one with a newer catalogue of jobs replaces it."""

    action: Literal["refresh"] = "refresh"


Order = Annotated[RunRank | ExitOrder | RefreshOrder, Field(discriminator="action")]
ORDER: TypeAdapter[RunRank | ExitOrder | RefreshOrder] = TypeAdapter(Order)

GREETING = {"hello": Hello}
HELLO = {"hello": AgentHello}
REPORT = {"done": AgentReport}


class AgentServer(MessageServer):
    """Serves agents for one controller on ``(host, port)``."""

    def __init__(
        self,
        address: tuple[str, int],
        token: str,
        on_hello: OnHello,
        on_report: OnReport,
        on_gone: OnGone,
        hello_timeout_s: float = 10.0,
        limits: Limits | None = None,
    ) -> None:
        self.on_hello = on_hello
        self.on_report = on_report
        self.on_gone = on_gone
        self.hello_timeout_s = hello_timeout_s
        self.closing = threading.Event()
        limits = limits or Limits(handshake_s=hello_timeout_s)
        super().__init__(address, token, self._serve, "agent link", limits)

    def close(self) -> None:
        """Stop serving and drop every agent connection (agents then end)."""
        self.closing.set()
        super().close()

    def _serve(self, connection: Connection) -> None:
        hello = self._hello(connection)
        if hello is None:
            return
        sock = connection.sock
        sock.settimeout(None)  # ranks run for hours between two reports
        link = self.on_hello(hello)
        if link is None:
            send_message(sock, ExitOrder(reason="not wanted").to_json())
            return
        try:
            while True:
                order = self._next_order(link)
                send_message(sock, order.to_json())
                if not isinstance(order, RunRank):
                    return
                report = self._report(connection)
                if report is None:
                    return
                self.on_report(link, report)
                if report.status == TERMINATED:
                    # Its process ends now (a preemption's notice): no order will be read.
                    send_message(sock, ExitOrder(reason="its node is being taken").to_json())
                    return
        finally:
            link.connected = False
            self.on_gone(link)

    def _hello(self, connection: Connection) -> AgentHello | None:
        """The client's greeting, then the agent's hello, both before the handshake's
        deadline; ``None`` (the peer was told why, where it said something) drops it."""
        sock, reader = connection.sock, connection.reader
        for stage, models in (("greeting", GREETING), ("hello", HELLO)):
            left = connection.deadline - time.monotonic()
            if left <= 0:
                return None
            sock.settimeout(left)
            raw = reader.read()
            if raw is None:
                return None
            message = parse(models, raw)
            if isinstance(message, Refusal):
                send_message(sock, message.to_json())
                logger.debug("agent link: %s refused: %s", stage, message.error)
                return None
            if stage == "greeting":
                send_message(sock, Ok().to_json())  # the client's own greeting ("hello" op)
            elif isinstance(message, AgentHello):
                return message
        return None

    def _report(self, connection: Connection) -> AgentReport | None:
        """The agent's next valid report (a malformed one is answered and skipped)."""
        while (raw := connection.reader.read()) is not None:
            report = parse(REPORT, raw)
            if isinstance(report, AgentReport):
                return report
            assert isinstance(report, Refusal)
            send_message(connection.sock, report.to_json())
        return None

    def _next_order(self, link: AgentLink) -> Order:
        while True:
            try:
                return link.orders.get(timeout=0.5)
            except queue.Empty:
                if self.closing.is_set():
                    return ExitOrder(reason="controller closed")


__all__ = [
    "ORDER",
    "TERMINATED",
    "AgentHello",
    "AgentLink",
    "AgentReport",
    "AgentServer",
    "ExitOrder",
    "Order",
    "RefreshOrder",
    "RunRank",
]
