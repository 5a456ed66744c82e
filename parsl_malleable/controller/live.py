"""``Controller``: the live loop joining blocks, jobs, the allocator and the ranks.

One controller per harvesting executor, in the user's process. It ties together the block
source, the decisions of :class:`~parsl_malleable.controller.core.ControllerCore`, the agents
on the workers (:class:`~parsl_malleable.controller.agent_pool.AgentPool`) and the registered
jobs (:class:`~parsl_malleable.controller.job_book.JobBook`). Every ``tick_s`` (and at once
when woken by a yield or an agent) it:

1. collects ended agent tasks (a rank 0 that finished a job brings its result);
2. reads the block source into the core (appeared, deadline, yielding, gone) and puts the
   managers of blocks being left on hold in HTEX, so no task goes there again;
3. feeds throughput and rescale pauses measured by the jobs' coordinators to the profiler;
4. ends jobs that finished or failed;
5. runs :meth:`ControllerCore.step` and carries out its orders: ``StartRanks`` sends each agent
   on the node an order to run a rank of the job, ``DrainRanks`` asks the job's coordinator to
   let the ranks there leave at their next commit;
6. tops up agent tasks to the idle workers, and lets agents go when no job wants their nodes.
"""

from __future__ import annotations

import logging
import secrets
import statistics
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import parsl
from parsl.executors import HighThroughputExecutor

from parsl_malleable.controller.address import controller_address, workers_per_node
from parsl_malleable.controller.agent_link import (
    TERMINATED,
    AgentHello,
    AgentLink,
    AgentReport,
    RefreshOrder,
    RunRank,
)
from parsl_malleable.controller.agent_pool import AgentPool
from parsl_malleable.controller.blocks import (
    BlockDiff,
    BlockSource,
    BlockView,
    ProviderBlocks,
    block_key,
)
from parsl_malleable.controller.core import ControllerCore, CoreSettings
from parsl_malleable.controller.driver_cleanup import track_executor
from parsl_malleable.controller.job_book import ControlledJob, JobBook
from parsl_malleable.controller.model import DrainRanks, JobSpec, StartRanks
from parsl_malleable.controller.node_agent import coordinator_token
from parsl_malleable.controller.phases import BlockPhase, EpochReader, MemberPlace, PhaseLog
from parsl_malleable.errors import ConfigError
from parsl_malleable.harvest.controller_link import HarvestingProvider
from parsl_malleable.inputs import safe_name
from parsl_malleable.watchdog import Watchdog, driver_watchdog

logger = logging.getLogger(__name__)

_ATTRIBUTE = "_malleable_controller"
# The start-up told to the provider is the median of this many latest nodes.
STARTUP_WINDOW = 20
# A block an agent came from that its provider has not recorded after this long is not one of
# its blocks (or its record was lost): its start is no longer looked for.
UNLISTED_FORGET_S = 600.0


def stop_before_shutdown(executor: HighThroughputExecutor, stop: Callable[[], None]) -> None:
    """Make ``executor.shutdown()`` call ``stop`` first.

    The controller's thread asks the interchange for its managers on HTEX's command channel,
    which blocks until the interchange answers. Parsl's shutdown terminates the interchange and
    then closes that channel from its own thread; a request in flight then never returns, and
    closing the socket under it left ``zmq_context.term()`` waiting for ever (a CI run hung 600 s
    there). Parsl offers no hook before an executor's shutdown, so the controller wraps this
    one executor's method and leaves the channel before it closes.
    """
    original = executor.shutdown

    def shutdown(*args: Any, **kwargs: Any) -> Any:
        try:
            stop()
        except Exception:  # the executor must still shut down
            logger.exception("stopping the controller before the executor's shutdown failed")
        return original(*args, **kwargs)

    executor.shutdown = shutdown  # type: ignore[method-assign]


class Controller:
    """Blocks + registered jobs + profiled curves -> allocator -> ranks, enforced.

    Made by :func:`controller_for` at the first ``@malleable_app`` call on an executor.
    ``settings`` time and shape decisions (:class:`CoreSettings`); ``source`` is where blocks
    come from (default: the executor's provider if it is a BackfillProvider); ``host`` is the
    address to serve agents and ranks on (default: :func:`controller_address`). The agent
    options are :class:`~parsl_malleable.controller.agent_pool.AgentPool`'s.
    """

    def __init__(
        self,
        executor: HighThroughputExecutor,
        *,
        settings: CoreSettings | None = None,
        source: BlockSource | None = None,
        host: str | None = None,
        tick_s: float = 0.25,
        agent_start_timeout_s: float = 120.0,
        agent_idle_s: float = 10.0,
        max_agent_failures: int = 3,
        warm_agents: bool = True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        safe_name(executor.label, "executor label")  # in thread, log and file names
        self.executor = executor
        self.host = host or controller_address(executor)
        self.core = ControllerCore(settings or site_settings(executor.provider))
        self.ranks_per_node = workers_per_node(executor)
        self.tick_s = tick_s
        self.clock = clock
        if source is None and isinstance(executor.provider, HarvestingProvider):
            source = ProviderBlocks(executor.provider)
        self.source = source
        # The agent link's secret; each job's coordinator token is derived from it. Kept out of
        # every repr, log line and file: whoever holds it can act as an agent or a rank.
        self._secret = secrets.token_hex(16)
        self._lock = threading.RLock()
        self.jobs = JobBook()
        self.agents = AgentPool(
            executor,
            self.host,
            self._secret,
            self.ranks_per_node,
            self._lock,
            start_timeout_s=agent_start_timeout_s,
            idle_s=agent_idle_s,
            max_failures=max_agent_failures,
            warm=warm_agents,
        )
        self._seen_blocks: dict[str, str] = {}  # block key -> Parsl block id
        # Blocks an agent said hello from that the source has not listed yet, with when: one
        # that started and ended between two of the provider's polls is never listed, and its
        # submission and start are then read from the provider's records of ended blocks.
        self._unlisted: dict[str, float] = {}
        self._unlisted_looks = -1  # the provider's poll count at the last such read
        # Block key -> the nodes its scheduler job holds (the last read of the source).
        self._block_nodes: dict[str, tuple[str, ...]] = {}
        self._blocks = BlockDiff()
        self.phases = PhaseLog()
        self._places: dict[str, MemberPlace] = {}  # member id -> where its rank runs
        self._readers: dict[str, EpochReader] = {}  # job -> its coordinator events, read so far
        self._first_steps = 0  # nodes that reached a first step, when last counted
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._watchdog: Watchdog | None = None  # this process's, once started
        self._dfk = parsl.dfk()
        if self.source is not None:
            self.source.attach(self._wake.set)
        if isinstance(executor.provider, HarvestingProvider):
            executor.provider.use_demand(self.demand)

    # ------------------------------------------------------------------ public API

    def start(self) -> None:
        """Serve agents and start the loop (idempotent)."""
        with self._lock:
            if self._thread is not None:
                return
            # Nothing this executor started may outlive the driver, whatever its provider.
            self._watchdog = driver_watchdog()
            track_executor(self._watchdog, self.executor)
            server = self.agents.serve(self._on_hello, self._on_report, self._on_gone)
            self._thread = threading.Thread(
                target=self._run, name=f"controller-{self.executor.label}", daemon=True
            )
            self._thread.start()
            stop_before_shutdown(
                self.executor, lambda: self.close("the Parsl executor is shutting down")
            )
        logger.info(
            "controller for executor %s serving agents on %s:%d (%d rank(s) per node)",
            self.executor.label,
            self.host,
            server.server_address[1],
            self.ranks_per_node,
        )

    def job_token(self, name: str) -> str:
        """The coordinator token of job ``name`` (agents derive the same from their spec)."""
        return coordinator_token(self._secret, name)

    def register(self, job: ControlledJob, spec: JobSpec) -> None:
        """Schedule ``job`` (called by ``@malleable_app``)."""
        with self._lock:
            self.core.add_job(spec, self.clock())
            self.jobs.add(spec.name, job)
        job.coordinator.start()
        if isinstance(self.executor.provider, HarvestingProvider):
            # Else the provider sees the new demand only at its next poll (5 s at most here).
            self.executor.provider.demand_changed()
        logger.info(
            "job %s registered: %d-%d nodes, priority %g, curve %s",
            spec.name,
            spec.min_nodes,
            spec.max_nodes,
            spec.priority,
            "given" if spec.curve is not None else "to be profiled",
        )
        self.start()
        self._wake.set()

    def revalue(self, name: str, *, priority: float, grow: bool) -> None:
        """Job ``name``'s worth changed: see :meth:`ControllerCore.revalue`."""
        with self._lock:
            changed = self.core.revalue(name, self.clock(), priority=priority, grow=grow)
        if changed:
            logger.info(
                "job %s revalued: priority %g, %s", name, priority, "may grow" if grow else "held"
            )
            self._wake.set()

    def drain_blocks(self, parsl_blocks: Iterable[str], reason: str = "drained") -> list[str]:
        """Leave these Parsl blocks: ranks there leave at their next commit, nothing new goes
        there. Returns the block keys affected."""
        wanted = {str(b) for b in parsl_blocks}
        now = self.clock()
        with self._lock:
            keys = [k for k, b in self._seen_blocks.items() if b in wanted]
            for key in keys:
                block = self.core.blocks.get(key)
                self.core.block_update(
                    key,
                    now,
                    deadline=block.deadline if block else None,
                    yielding=True,
                    reason=reason,
                )
            self.agents.hold_blocks(wanted)
        self._wake.set()
        return keys

    def demand(self, context: object = None) -> int:
        """Nodes the registered jobs could use (the provider's demand callable)."""
        with self._lock:
            return self._wanted_nodes()

    def state(self) -> dict[str, Any]:
        """Jobs (nodes, target, measured throughput, world size), agents, last decision."""
        with self._lock:
            state = self.core.state()
            where = self.agents.member_nodes()
            for name, info in state["jobs"].items():
                job = self.jobs.get(name)
                if job is not None:
                    members = job.coordinator.current_members()
                    info["world_size"] = len(members)
                    info["rank_nodes"] = sorted({where.get(m.member_id, "?") for m in members})
                    info["step"] = job.coordinator.last_step()
            state["agents"] = len(self.agents.links)
            state["ended_jobs"] = sorted(self.jobs.ended)
            return state

    # The agent options, read-only here (the pool holds them).
    @property
    def agent_start_timeout_s(self) -> float:
        return self.agents.start_timeout_s

    @property
    def agent_idle_s(self) -> float:
        return self.agents.idle_s

    @property
    def max_agent_failures(self) -> int:
        return self.agents.max_failures

    @property
    def warm_agents(self) -> bool:
        return self.agents.warm

    @property
    def decisions(self) -> list[Any]:
        """Every decision so far (see :class:`~parsl_malleable.controller.model.Decision`)."""
        with self._lock:
            return list(self.core.decisions)

    def wait_for(self, predicate: Callable[[Controller], bool], timeout_s: float) -> bool:
        """Block until ``predicate(self)`` holds (checked each tick); False on timeout."""
        deadline = time.monotonic() + timeout_s
        while not predicate(self):
            if time.monotonic() > deadline:
                return False
            time.sleep(self.tick_s)
        return True

    def close(self, why: str = "the controller was closed before the job finished") -> None:
        """Stop: abort unfinished jobs (``why``), release every agent, stop serving."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(10)
        with self._lock:
            self.jobs.fail_all(why)
        self.agents.close()

    # ------------------------------------------------------------------ agent channel

    def _on_hello(self, hello: AgentHello) -> AgentLink | None:
        node_id = hello.pool or ""
        key = block_key(hello.block or "", hello.job_id)
        now = self.clock()
        with self._lock:
            self.agents.heard_from()
            block = self.core.blocks.get(key)
            if self._stop.is_set() or (block is not None and block.yielding):
                return None
            link = self.agents.arrive(hello, key, self._block_nodes.get(key, ()))
            self._seen_blocks.setdefault(key, link.parsl_block)
            if key not in self._blocks.listed:
                self._unlisted.setdefault(key, now)
            peers = self.agents.node_links(node_id)
            if len(peers) >= link.local_size and all(p.job is None for p in peers):
                self.core.node_ready(node_id, key, now, name=link.node_name)
                self.phases.record(key, BlockPhase.WORKER, now, link.node_name)
        self._wake.set()
        return link

    def _on_report(self, link: AgentLink, report: AgentReport) -> None:
        now = self.clock()
        with self._lock:
            job = self.agents.rank_ended(link)
            if report.status == "failed":
                logger.warning("rank of job %s failed: %s", job, report.reason)
                if job is not None:
                    self.jobs.rank_failed(job, report.reason, report.traceback)
            if report.status == TERMINATED:
                # Its worker pool got SIGTERM (a preemption): HTEX lists the pool until its
                # heartbeats time out, and an agent sent there meanwhile would be lost with it.
                logger.info("node %s is being taken (its agent got SIGTERM)", link.node_name)
                self.agents.hold_managers({link.node_id})
            if self.agents.node_free(link.node_id):
                self.core.ranks_left(link.node_id, now)
        self._wake.set()

    def _on_gone(self, link: AgentLink) -> None:
        with self._lock:
            self.agents.disconnected(link)
            self.core.node_gone(link.node_id, self.clock())
        self._wake.set()

    # ------------------------------------------------------------------ the loop

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.tick_s)
            self._wake.clear()
            if getattr(self._dfk, "cleanup_called", False):
                logger.info("the DataFlowKernel is shutting down: controller stops")
                self._stop.set()
                with self._lock:
                    self.jobs.fail_all("the Parsl DataFlowKernel is shutting down")
                break
            try:
                # Before the tick: the watchdog must know of a block as soon as it exists.
                if self._watchdog is not None:
                    track_executor(self._watchdog, self.executor)
                self.tick()
            except Exception:  # the loop must survive anything one tick meets
                logger.exception("controller tick failed")
        self.agents.close()

    def tick(self) -> None:
        """One pass of the loop (see the module docstring)."""
        now = self.clock()
        with self._lock:
            self._collect_agents()
            self._sync_blocks(now)
            self._feed_measurements()
            self._read_phases(now)
            self._end_jobs(now)
            for action in self.core.step(now):
                if isinstance(action, StartRanks):
                    self._start_ranks(action)
                elif isinstance(action, DrainRanks):
                    self._drain_ranks(action)
            self.agents.release_idle(self.core, now, self._usable_nodes(now) - self._wanted_nodes())
        self._top_up_agents()

    def _collect_agents(self) -> None:
        for ended in self.agents.collect():
            if ended.error is not None and ended.ran is not None:
                self.jobs.agent_failed(ended.ran, ended.error)
            if ended.exit is not None:
                self.jobs.agent_exited(ended.exit)
            if ended.too_many_failures:
                self.jobs.fail_all(f"agent tasks fail on the workers: {ended.error!r}")

    def _sync_blocks(self, now: float) -> None:
        if self.source is None:
            return
        views = self.source.blocks()
        self._block_nodes = {view.key: view.nodes for view in views}
        for view in views:
            self._seen_blocks[view.key] = view.parsl_block
            self._stamp_start(view)
            self._unlisted.pop(view.key, None)
        self._stamp_unlisted(now)
        for key in self._blocks.apply(views, self.core, now):
            ended_at = getattr(self.source, "ended_at", None)
            self.phases.record(key, BlockPhase.ENDED, (ended_at and ended_at(key)) or now)
        for key in [k for k in self._seen_blocks if k not in self.core.blocks]:
            del self._seen_blocks[key]
        leaving = {
            self._seen_blocks[k]
            for k, b in self.core.blocks.items()
            if b.yielding and k in self._seen_blocks
        }
        self.agents.hold_leaving(leaving)

    def _stamp_start(self, view: BlockView) -> None:
        if view.submitted_at is not None:
            self.phases.record(view.key, BlockPhase.SUBMITTED, view.submitted_at)
        if view.started_at is not None:
            # Slurm gives whole seconds: a start in the second of the submission is not
            # before it.
            started = max(view.started_at, view.submitted_at or view.started_at)
            self.phases.record(view.key, BlockPhase.RUNNING, started)

    def _stamp_unlisted(self, now: float) -> None:
        """Submission and start of blocks the source never listed, from its records of ended
        blocks; read once per provider poll (its records change only then)."""
        looks = getattr(self.source, "looks", None)
        ended_blocks = getattr(self.source, "ended_blocks", None)
        if not self._unlisted or looks is None or ended_blocks is None:
            self._unlisted.clear()
            return
        if looks == self._unlisted_looks:
            return
        self._unlisted_looks = looks
        for key, view in ended_blocks(set(self._unlisted)).items():
            self._stamp_start(view)
            del self._unlisted[key]
        for key in [k for k, t in self._unlisted.items() if now - t > UNLISTED_FORGET_S]:
            del self._unlisted[key]  # never recorded by this provider: another's, or lost

    def _feed_measurements(self) -> None:
        for name, job in self.jobs.running.items():
            rates, pauses = job.coordinator.take_measurements()
            for world_size, rate in rates:
                self.core.report_throughput(name, max(1, world_size // self.ranks_per_node), rate)
            for kind, seconds in pauses:
                self.core.report_rescale(name, kind, seconds)

    def _read_phases(self, now: float) -> None:
        """Turn the coordinators' new events into phase events and training time."""
        for name, job in self.jobs.running.items():
            reader = self._readers.get(name)
            if reader is None:
                reader = self._readers[name] = EpochReader(name, self.phases, self._places)
            reader.feed(job.coordinator.events_since(reader.fed))
            reader.flush(now)
        stepped = self.phases.first_steps()
        if stepped != self._first_steps:
            self._first_steps = stepped
            self._tell_startup()

    def _tell_startup(self) -> None:
        """Give the provider the measured start-up (median block submitted -> first step of
        the last ``STARTUP_WINDOW`` nodes), which sizes its blocks (``min_block_s: auto``)."""
        recent = [
            s.first_step - s.submitted
            for s in self.phases.startups()[-STARTUP_WINDOW:]
            if s.submitted is not None
        ]
        provider = self.executor.provider
        if recent and isinstance(provider, HarvestingProvider):
            provider.measured_startup(statistics.median(recent))

    def _end_jobs(self, now: float) -> None:
        for name, job in self.jobs.items():
            if not self.jobs.settle(name, job, self.agents.rank0_pending):
                continue
            self.core.end_job(name, now)
            if self.agents.running(name):
                continue
            self.jobs.retire(name)
            reader = self._readers.pop(name, None)
            if reader is not None:
                reader.feed(job.coordinator.events_since(reader.fed))
            for member in [m for m, p in self._places.items() if p.job == name]:
                del self._places[member]

    def _start_ranks(self, action: StartRanks) -> None:
        job = self.jobs.get(action.job)
        links = self.agents.node_links(action.node)
        if job is None or not links:
            self.core.ranks_left(action.node, self.clock())
            return
        if any(action.job not in lk.jobs for lk in links):
            # These agents were sent before the job existed: replace them.
            for lk in links:
                lk.orders.put(RefreshOrder())
            self.core.node_gone(action.node, self.clock())
            return
        host, port = job.coordinator.address
        for lk in links:
            member = self.agents.assign(lk, action.job)
            self._places[member] = MemberPlace(lk.block_key, lk.node_name, action.job)
            lk.orders.put(RunRank(job=action.job, member=member, host=host, port=port))

    def _drain_ranks(self, action: DrainRanks) -> None:
        job = self.jobs.get(action.job)
        members = [lk.member for lk in self.agents.node_links(action.node) if lk.member]
        logger.info(
            "job %s leaves node %s (%s)",
            action.job,
            self.core.nodes[action.node].name if action.node in self.core.nodes else action.node,
            action.reason,
        )
        if job is not None and members:
            job.coordinator.drain(member_ids=members)

    def _wanted_nodes(self) -> int:
        return sum(spec.max_nodes for spec in self.core.jobs.values())

    def _usable_nodes(self, now: float) -> int:
        return sum(1 for n in self.core.nodes.values() if self.core.usable(n, now))

    def _top_up_agents(self) -> None:
        with self._lock:
            if not self.core.jobs:
                return
            nodes_wanted = self._wanted_nodes() - self._usable_nodes(self.clock())
            slots_wanted, starting = self.agents.wanted_slots(nodes_wanted, self.core.nodes)
            catalogue = self.jobs.catalogue()
        self.agents.top_up(slots_wanted, starting, catalogue)


def site_settings(provider: object) -> CoreSettings:
    """Default settings, with the drain margin of the provider's site profile if it has one."""
    margin = provider.drain_margin_s if isinstance(provider, HarvestingProvider) else None
    return CoreSettings() if margin is None else CoreSettings(drain_margin_s=margin)


def controller_for(executor: HighThroughputExecutor) -> Controller:
    """The controller of ``executor``, made with default settings on first use."""
    controller = getattr(executor, _ATTRIBUTE, None)
    if controller is None or controller._stop.is_set():
        controller = Controller(executor)
        setattr(executor, _ATTRIBUTE, controller)
    return controller


def configure(executor: HighThroughputExecutor, **options: Any) -> Controller:
    """Make the controller of ``executor`` with ``options`` (see :class:`Controller`).

    Call it after ``parsl.load`` and before the first malleable app runs on the executor;
    without it the first app makes one with default settings.
    """
    current = getattr(executor, _ATTRIBUTE, None)
    if current is not None and not current._stop.is_set():
        raise ConfigError(
            f"executor {executor.label!r} already has a controller (configure() must come "
            f"before the first malleable app call)"
        )
    controller = Controller(executor, **options)
    setattr(executor, _ATTRIBUTE, controller)
    return controller


__all__ = [
    "Controller",
    "configure",
    "controller_address",
    "controller_for",
    "site_settings",
    "workers_per_node",
]
