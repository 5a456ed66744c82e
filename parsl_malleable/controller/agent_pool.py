"""The controller's pool of agents: which exist, on which nodes, and which are on their way.

An agent is a Parsl task (:func:`~parsl_malleable.controller.node_agent.run_agent`) sent to an
idle HTEX worker; once there it connects to the pool's
:class:`~parsl_malleable.controller.agent_link.AgentServer` and becomes a link
(:class:`~parsl_malleable.controller.agent_link.AgentLink`: its node, block and local rank, the
job it runs a rank of). The pool sends agents while the jobs want more nodes than are usable
(:meth:`AgentPool.top_up`), collects the tasks that ended (:meth:`AgentPool.collect`), lets
agents go from nodes no job wants (:meth:`AgentPool.release_idle`), and puts the HTEX managers
of blocks being left on hold so no task is sent there again (:meth:`AgentPool.hold_blocks`).

The pool's state is guarded by the controller's lock, which the pool is given: the controller
calls it under that lock, except :meth:`AgentPool.top_up`, which lists HTEX's managers and
submits tasks without it and takes it to record each agent sent.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from parsl.app.app import python_app
from parsl.dataflow.futures import AppFuture
from parsl.executors import HighThroughputExecutor
from parsl.executors.high_throughput.errors import ManagerLost, WorkerLost

from parsl_malleable.controller.agent_link import (
    AgentHello,
    AgentLink,
    AgentServer,
    ExitOrder,
    OnGone,
    OnHello,
    OnReport,
    node_name,
)
from parsl_malleable.controller.core import ControllerCore
from parsl_malleable.controller.node_agent import AgentExit, AgentSpec, JobPayload, run_agent

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EndedTask:
    """An agent task that is done: it returned ``exit``, or failed with ``error``."""

    agent_id: str
    ran: str | None  # the job it last ran ranks of, if its rank may have had a result
    exit: AgentExit | None = None
    error: BaseException | None = None
    # it failed on the worker (not a lost worker), and ``max_failures`` did in a row
    too_many_failures: bool = False


class AgentPool:
    """The agents of one controller: tasks sent, links connected, managers held.

    ``start_timeout_s``: an agent task not connected after this long no longer counts as on its
    way; ``idle_s``: a free node no job can use keeps its agents this long; ``max_failures``:
    agent tasks failing in a row that fail every job (:attr:`EndedTask.too_many_failures`);
    ``warm``: agents import and prepare while the controller decides
    (:class:`~parsl_malleable.controller.node_agent.AgentSpec`).
    """

    def __init__(
        self,
        executor: HighThroughputExecutor,
        host: str,
        secret: str,
        ranks_per_node: int,
        lock: threading.RLock,
        *,
        start_timeout_s: float,
        idle_s: float,
        max_failures: int,
        warm: bool,
    ) -> None:
        self.executor = executor
        self.host = host
        self.ranks_per_node = ranks_per_node
        self.start_timeout_s = start_timeout_s
        self.idle_s = idle_s
        self.max_failures = max_failures
        self.warm = warm
        self.links: dict[str, AgentLink] = {}  # agent id -> its connection
        self.server: AgentServer | None = None
        self._secret = secret  # the agent link's: never logged, out of every repr
        self._lock = lock
        self._tasks: dict[str, tuple[AppFuture, float]] = {}  # agent id -> task, sent when
        self._ran: dict[str, str] = {}  # agent id -> the job it last ran ranks of
        self._failures = 0  # agent tasks failed in a row
        self._idle_since: dict[str, float] = {}  # node -> free since
        self._gone: set[str] = set()  # connected once, now disconnected, task unfinished
        self._held_blocks: set[str] = set()  # Parsl block ids whose managers were held
        self._held_managers: set[str] = set()
        self._agent_app = python_app(run_agent, executors=[executor.label])

    # ------------------------------------------------------------------ the link server

    def serve(self, on_hello: OnHello, on_report: OnReport, on_gone: OnGone) -> AgentServer:
        """Start serving agents on ``host`` (a free port)."""
        self.server = AgentServer((self.host, 0), self._secret, on_hello, on_report, on_gone)
        self.server.start()
        return self.server

    def close(self) -> None:
        """Stop serving: every agent connection is dropped (the agents then end)."""
        if self.server is not None:
            self.server.close()

    # ------------------------------------------------------------------ links

    def heard_from(self) -> None:
        """An agent said hello: agent tasks do run on the workers."""
        self._failures = 0

    def arrive(
        self, hello: AgentHello, block_key: str, block_nodes: Sequence[str] = ()
    ) -> AgentLink:
        """Add the agent that said ``hello`` from block ``block_key``, whose scheduler job
        holds ``block_nodes`` (when known): a node the agent could only name by its host is
        named by the block's node at its ``node_index`` (PBS's vnodes)."""
        link = AgentLink(
            agent_id=hello.agent,
            node_id=hello.pool or "",
            node_name=node_name(hello, block_nodes),
            block_key=block_key,
            parsl_block=hello.block or "",
            local_rank=hello.local_rank,
            local_size=max(1, hello.local_size),
            jobs=frozenset(hello.jobs),
        )
        self.links[link.agent_id] = link
        return link

    def node_links(self, node_id: str) -> list[AgentLink]:
        """The agents connected on ``node_id``, by local rank."""
        return sorted(
            (lk for lk in self.links.values() if lk.node_id == node_id),
            key=lambda lk: lk.local_rank,
        )

    def node_free(self, node_id: str) -> bool:
        """Whether no agent on ``node_id`` runs a rank."""
        return all(p.job is None for p in self.node_links(node_id))

    def assign(self, link: AgentLink, job: str) -> str:
        """``link`` is to run a rank of ``job``: its new member id."""
        link.job, link.member = job, uuid.uuid4().hex[:12]
        self._ran[link.agent_id] = job
        return link.member

    def rank_ended(self, link: AgentLink) -> str | None:
        """The rank ``link`` ran has ended: the job it was of (it cannot bring rank 0's value
        any more)."""
        job, link.job, link.member = link.job, None, None
        self._ran.pop(link.agent_id, None)
        return job

    def disconnected(self, link: AgentLink) -> None:
        """``link``'s connection closed. Its task may stay unfinished for a while (HTEX notices
        a dead pool only when its heartbeats time out): it is not an agent on its way to a
        node."""
        self.links.pop(link.agent_id, None)
        self._gone.add(link.agent_id)

    def running(self, job: str) -> bool:
        """Whether an agent runs a rank of ``job``."""
        return any(lk.job == job for lk in self.links.values())

    def member_nodes(self) -> dict[str, str]:
        """Member id -> the node its rank runs on."""
        return {lk.member: lk.node_name for lk in self.links.values() if lk.member}

    def rank0_pending(self, job: str) -> bool:
        """Whether an agent that ran ranks of ``job`` may still bring its result."""
        return any(
            not future.done()
            for agent, (future, _) in self._tasks.items()
            if self._ran.get(agent) == job
        )

    # ------------------------------------------------------------------ tasks

    def collect(self) -> list[EndedTask]:
        """The agent tasks that are done since the last call, forgotten here."""
        ended = []
        for agent_id, (future, _) in list(self._tasks.items()):
            if not future.done():
                continue
            del self._tasks[agent_id]
            self._gone.discard(agent_id)
            ran = self._ran.pop(agent_id, None)
            error = future.exception()
            if error is None:
                self._failures = 0
                ended.append(EndedTask(agent_id, ran, exit=future.result()))
            elif isinstance(error, ManagerLost | WorkerLost):
                logger.info("agent %s lost with its worker: %s", agent_id, error)
                ended.append(EndedTask(agent_id, ran, error=error))
            else:
                self._failures += 1
                logger.warning("agent task %s failed: %r", agent_id, error)
                failing = self._failures >= self.max_failures
                ended.append(EndedTask(agent_id, ran, error=error, too_many_failures=failing))
        return ended

    def wanted_slots(self, nodes_wanted: int, ready_nodes: Iterable[str]) -> tuple[int, int]:
        """Agents to send for ``nodes_wanted`` more nodes, and how many are on their way.

        On their way: tasks sent less than ``start_timeout_s`` ago, not yet connected; and the
        agents of a node whose other rank slots have not connected yet (not in
        ``ready_nodes``).
        """
        now = time.monotonic()
        pending = [
            a
            for a, (f, t) in self._tasks.items()
            if a not in self.links
            and a not in self._gone
            and not f.done()
            and now - t < self.start_timeout_s
        ]
        ready = set(ready_nodes)
        partial = sum(1 for lk in self.links.values() if lk.node_id not in ready)
        return nodes_wanted * self.ranks_per_node - len(pending) - partial, len(pending)

    def top_up(self, slots_wanted: int, starting: int, catalogue: dict[str, JobPayload]) -> None:
        """Send up to ``slots_wanted`` agents carrying ``catalogue``, one per idle worker not
        already taken by the ``starting`` agents (call it without the lock)."""
        if slots_wanted <= 0:
            return
        try:
            managers = self.executor.connected_managers()
        except Exception as exc:
            logger.debug("cannot list managers: %s", exc)
            return
        idle = sum(
            max(0, int(m["worker_count"]) - int(m["tasks"]))
            for m in managers
            if m.get("active", True)  # held managers are inactive
        )
        count = min(idle - starting, slots_wanted)
        logger.debug(
            "agents: %d idle workers, %d agents starting, %d slots wanted -> %d new",
            idle,
            starting,
            slots_wanted,
            max(0, count),
        )
        if count <= 0:
            return
        address = self.server.server_address if self.server is not None else None
        if address is None:
            return
        for _ in range(count):
            spec = AgentSpec(
                self.host, int(address[1]), self._secret, uuid.uuid4().hex[:12], self.warm
            )
            future = self._agent_app(spec, catalogue)
            with self._lock:
                self._tasks[spec.agent_id] = (future, time.monotonic())

    # ------------------------------------------------------------------ letting nodes go

    def release_idle(self, core: ControllerCore, now: float, surplus: int) -> None:
        """Let agents go from free nodes that are being left, or that no job can use
        (``surplus``: usable nodes beyond what the jobs want)."""
        for node in list(core.nodes.values()):
            if node.job is not None:
                self._idle_since.pop(node.node_id, None)
                continue
            since = self._idle_since.setdefault(node.node_id, now)
            usable = core.usable(node, now)
            if usable and not (surplus > 0 and now - since >= self.idle_s):
                continue
            for lk in self.node_links(node.node_id):
                lk.orders.put(ExitOrder(reason="no job wants this node"))
            core.node_gone(node.node_id, now)
            self._idle_since.pop(node.node_id, None)
            surplus -= int(usable)

    def hold_managers(self, manager_ids: set[str]) -> None:
        """Put these HTEX managers on hold (no task is sent to them again)."""
        for manager_id in manager_ids - self._held_managers:
            try:
                self.executor._hold_manager(manager_id)
            except Exception as exc:
                logger.debug("hold of manager %s: %s", manager_id, exc)
                continue
            self._held_managers.add(manager_id)

    def hold_blocks(self, parsl_blocks: Iterable[str]) -> None:
        """Put the HTEX managers of blocks being left on hold: no task is sent there again.

        By manager, not by Parsl block id: a BackfillProvider slot reuses its block id for
        the next scheduler job, whose managers must get work.
        """
        wanted = set(parsl_blocks) - self._held_blocks
        if not wanted:
            return
        try:
            managers = self.executor.connected_managers()
        except Exception as exc:
            logger.debug("cannot list managers to hold: %s", exc)
            return
        self.hold_managers(
            {str(m.get("manager")) for m in managers if str(m.get("block_id")) in wanted}
        )
        self._held_blocks |= wanted

    def hold_leaving(self, leaving: set[str]) -> None:
        """Hold the managers of the blocks ``leaving``, and forget the holds of other blocks: a
        slot's next scheduler job reuses the Parsl block id, and its managers may be held
        anew."""
        self.hold_blocks(leaving)
        self._held_blocks &= leaving


__all__ = ["AgentPool", "EndedTask"]
