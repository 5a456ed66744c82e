"""``BackfillProvider``: a Parsl ExecutionProvider that runs blocks in a scheduler's idle holes.

Each poll takes one snapshot of the machine (two scheduler queries on Slurm), brings the book of
our blocks up to date, cancels every block still running past its walltime plus a margin
(whatever the scheduler and the block's worker do), yields every block that now stands in the
way of a queued native job (asks its ranks to leave, then cancels it), and fills waiting Parsl
blocks with new scheduler jobs of k nodes whose walltime ends a safety margin before the window
does, after confirming with ``sbatch --test-only`` that they start at once.

Who owns block counts: the provider. A Parsl block is a *slot* that the provider fills with one
scheduler job after another as windows open and close; Parsl sees it PENDING while it waits and
RUNNING while it holds nodes. ``init_blocks = min_blocks = max_blocks = slots``, so every Parsl
strategy ('none', 'simple', 'htex_auto_scale') leaves the count alone after the first scale-out
and never scales in a block that runs a long rank task. The provider polls in its own thread
at the profile's interval; Parsl's ``status()`` calls read the book and run no commands. See
docs/provider.md.

This module holds Parsl's interface, the poll and heartbeat threads and closing down. The
provider is composed of parts, each owning its state and made here with what it needs: the
book of slots and jobs (:class:`~.harvest.block_book.BlockBook`), what a poll works against
(:class:`~.harvest.poll_context.PollContext`), and one part per stage of a poll:
:class:`~.harvest.book_keeping.BookKeeper`, :class:`~.harvest.walltime.WalltimeGuard`,
:class:`~.harvest.yield_step.Yielder`, :class:`~.harvest.cancelling.Canceller` and
:class:`~.harvest.launching.Launcher` (docs/architecture.md draws them).
"""

from __future__ import annotations

import itertools
import logging
import math
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from parsl.executors import HighThroughputExecutor
from parsl.executors.high_throughput.executor import DEFAULT_LAUNCH_CMD
from parsl.jobs.states import JobState as ParslState
from parsl.jobs.states import JobStatus as ParslStatus
from parsl.providers.base import ExecutionProvider
from parsl.utils import RepresentationMixin

from parsl_malleable.errors import MalleableError
from parsl_malleable.harvest.block_book import BlockBook
from parsl_malleable.harvest.book_keeping import BookKeeper
from parsl_malleable.harvest.cancelling import Canceller
from parsl_malleable.harvest.demand import DemandFn
from parsl_malleable.harvest.error_handler import backfill_error_handler
from parsl_malleable.harvest.launching import Launcher
from parsl_malleable.harvest.ledger import BlockInfo, JobRecord, Phase, PollReport, Slot
from parsl_malleable.harvest.listen_address import listen_address
from parsl_malleable.harvest.poll_context import PollContext, YieldHook
from parsl_malleable.harvest.quiet_interchange import launch_cmd as interchange_launch_cmd
from parsl_malleable.harvest.site_profile import SiteProfile, load_profile
from parsl_malleable.harvest.sites import (
    BlockScheduler,
    make_scheduler,
    snapshot_signature,
)
from parsl_malleable.harvest.states import CancelReason
from parsl_malleable.harvest.teardown import TeardownEstimate
from parsl_malleable.harvest.walltime import WalltimeGuard
from parsl_malleable.harvest.warmup import load_planner
from parsl_malleable.harvest.yield_step import Yielder
from parsl_malleable.inputs import safe_name
from parsl_malleable.snapshot import Snapshot
from parsl_malleable.windows.predict import WindowPredictor

logger = logging.getLogger(__name__)

_BLOCK_IN_NAME = re.compile(r"block-([A-Za-z0-9_.-]+)")
_SAFE_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
#: How long closing the provider may retry failed cancels (close() and Parsl's shutdown).
WIND_DOWN_S = 30.0


class BackfillProvider(ExecutionProvider, RepresentationMixin):
    """Parsl provider that harvests idle nodes without delaying any queued native job.

    ``profile``: a :class:`SiteProfile`, a profile name in ``providers/`` or a YAML path;
    keyword ``overrides`` change single settings. ``scheduler``: a
    :class:`~parsl_malleable.schedulers.base.BlockScheduler` (default: from the profile, with
    ``env`` added to every command). ``demand``: total nodes wanted, decided per poll (default:
    fill every waiting slot). ``on_yield``: called with a block's :class:`BlockInfo` when it has
    to leave, before it is cancelled (the controller drains its ranks). ``predictor``: a
    :class:`WindowPredictor` with a learned model (default: the naive planner). ``recycle``:
    slots take the next job when one ends (default); with False a slot ends with its job and
    Parsl sees the job's final state. ``slots``: Parsl blocks (default ``profile.max_blocks``).
    ``autostart``: the first ``submit`` starts the poll thread (False: the caller polls with
    :meth:`poll_once`); the heartbeat starts with the first ``submit`` either way, since it says
    that the driver lives, whoever polls.
    """

    def __init__(
        self,
        profile: SiteProfile | str | Path,
        *,
        label: str = "backfill",
        scheduler: BlockScheduler | None = None,
        env: dict[str, str] | None = None,
        demand: DemandFn | None = None,
        on_yield: YieldHook | None = None,
        predictor: WindowPredictor | None = None,
        recycle: bool = True,
        slots: int | None = None,
        script_dir: str | None = None,
        autostart: bool = True,
        clock: Callable[[], float] = time.time,
        **overrides: Any,
    ) -> None:
        base = profile if isinstance(profile, SiteProfile) else load_profile(profile)
        self.profile = base.with_overrides(**overrides) if overrides else base
        # The label goes into batch job names, block ids and script file names.
        self._label = safe_name(label, "BackfillProvider label")
        self.env = env
        self.scheduler = scheduler or make_scheduler(self.profile, env)
        # Node idle -> first training step; the controller measures it (``min_block_s: auto``).
        self.startup_s = self.profile.startup_s
        self.predictor = predictor or WindowPredictor(model=None, samples=0)
        self.recycle = recycle
        count = slots if slots is not None else self.profile.max_blocks
        self.slots = count
        # Equal counts make every Parsl strategy a no-op after the first scale-out.
        self.init_blocks = self.min_blocks = self.max_blocks = count
        self.nodes_per_block = self.profile.max_nodes_per_block
        self.parallelism = 1.0
        self.script_dir = script_dir
        self.cores_per_node = None
        self.mem_per_node = None
        self.autostart = autostart
        self.clock = clock
        # The parts, each with what it needs (docs/architecture.md, "The parts").
        self.book = BlockBook(self._label)
        self.ctx = PollContext(
            self.profile,
            self.scheduler,
            clock,
            faults=Counter(),
            teardown=TeardownEstimate(self.profile.teardown_s),
        )
        self.canceller = Canceller(self.book, self.ctx)
        self.keeper = BookKeeper(self.book, self.ctx, self.canceller, recycle)
        self.walltime = WalltimeGuard(self.book, self.ctx, self.canceller)
        self.yielder = Yielder(self.book, self.ctx, on_yield)
        self.launcher = Launcher(
            self.book,
            self.ctx,
            self.canceller,
            self.keeper,
            predictor=self.predictor,
            min_block_s=lambda: self.min_block_s,
            demand=demand,
            # Read at each submit: Parsl sets script_dir when its executor starts.
            heartbeat_file=lambda: self.heartbeat_file,
            script_dir=lambda: self.script_dir,
        )
        # Parsl's own type (ExecutionProvider.resources), kept by the book: the keys are slot ids.
        self.resources = self.book.resources
        self._lock = self.book.lock
        self._poll_lock = threading.Lock()
        self._ids = itertools.count()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._beat_thread: threading.Thread | None = None
        self.planner_load_s: float | None = None
        self.last_error = ""
        self.last_report: PollReport | None = None
        self.last_snapshot: Snapshot | None = None

    # ----------------------------------------------------------- what the parts keep

    @property
    def faults(self) -> Counter[str]:
        """Scheduler faults met and how each was handled (docs/provider.md lists them)."""
        return self.ctx.faults

    @property
    def teardown(self) -> TeardownEstimate:
        """How long a cancelled block takes to leave its nodes (measured)."""
        return self.ctx.teardown

    @property
    def polls(self) -> int:
        """Polls run so far."""
        return self.ctx.polls.number

    @property
    def demand(self) -> DemandFn | None:
        """What decides the nodes wanted (None: every waiting slot is filled)."""
        return self.launcher.demand

    @property
    def on_yield(self) -> YieldHook | None:
        """The hook given at construction for blocks that must leave."""
        return self.yielder.on_yield

    # ------------------------------------------------------------------ Parsl interface

    @property
    def label(self) -> str:
        return self._label

    @property
    def status_polling_interval(self) -> int:
        """Parsl may read status this often; it costs no scheduler query."""
        return max(1, round(self.profile.poll_interval_s))

    def submit(self, command: str, tasks_per_node: int, job_name: str = "parsl.backfill") -> str:
        """Open a slot (a Parsl block) that runs ``command`` once per node of each of its jobs.

        Returns at once with the slot id; the slot gets nodes at the next poll with a window.
        """
        n = next(self._ids)
        found = _BLOCK_IN_NAME.search(job_name)
        block_id = found.group(1) if found else str(n)
        if not _SAFE_ID.match(block_id):
            block_id = str(n)
        slot_id = f"{self.label}.{n}"
        self.book.open_slot(Slot(slot_id, block_id, command, job_name, self.clock()))
        logger.info("slot %s opened for Parsl block %s", slot_id, block_id)
        if self.autostart:
            self.start()
            self._wake.set()
        else:
            self._start_heartbeat()
        return slot_id

    def status(self, job_ids: Sequence[object]) -> list[ParslStatus]:
        """Each slot's state from the book: PENDING, RUNNING, or how it ended."""
        out = []
        with self._lock:
            for job_id in job_ids:
                slot = self.book.slots.get(str(job_id))
                st = self._slot_status(slot) if slot else ParslStatus(ParslState.UNKNOWN)
                if slot is not None:
                    self.resources[slot.slot_id]["status"] = st
                out.append(st)
        return out

    def cancel(self, job_ids: Sequence[object]) -> list[bool]:
        """Close slots and cancel their jobs (Parsl scale-in or shutdown)."""
        to_cancel: list[JobRecord] = []
        with self._lock:
            for job_id in job_ids:
                slot = self.book.slots.get(str(job_id))
                if slot is None or slot.closed:
                    continue
                slot.closed = True
                if slot.job is not None and slot.job.active:
                    slot.job.cancel_reason = CancelReason.PARSL
                    to_cancel.append(slot.job)
        # A failed cancel is retried by the poll thread, with backoff (Canceller.send_due).
        ok = self.canceller.cancel_now(to_cancel) if to_cancel else True
        if all(s.closed for s in self.book.slots.values()) and not self._stop.is_set():
            # Parsl's shutdown ends here (it never calls close): leave nothing behind.
            self._wind_down(WIND_DOWN_S)
            self._stop.set()
            self._wake.set()
        return [ok if str(j) in self.book.slots else False for j in job_ids]

    # ---------------------------------------------------------------- controller interface

    def blocks(self) -> list[BlockInfo]:
        """Our live blocks: nodes, deadline and phase of every job not yet ended."""
        return self.book.live_blocks()

    @property
    def min_block_s(self) -> float:
        """The shortest walltime worth a block now: the profile's ``min_block_s``, or with
        ``auto`` a multiple of the measured start-up (:attr:`startup_s`)."""
        return self.profile.block_floor_s(self.startup_s)

    @property
    def gave_up(self) -> str:
        """Why the provider stopped launching blocks (``max_consecutive_failures`` failed in a
        row); empty while it launches."""
        return self.keeper.gave_up

    # ------------------------------------------------ the controller link (HarvestingProvider)

    def add_yield_listener(self, listener: YieldHook) -> None:
        """Call ``listener`` (after ``on_yield``) whenever a block has to yield."""
        self.yielder.add_listener(listener)

    def use_demand(self, demand: DemandFn) -> bool:
        """Hold what ``demand`` asks for, unless a demand was given at construction (the
        user's wins); whether it was taken."""
        return self.launcher.use_demand(demand)

    def demand_changed(self) -> None:
        """Poll now: the controller's demand grew (see ``HarvestingProvider``). Wakes that
        come together are one poll."""
        self._wake.set()

    def measured_startup(self, seconds: float) -> None:
        """The start-up the controller measured (block submitted -> first step), which sizes
        blocks under ``min_block_s: auto``."""
        with self._lock:
            self.startup_s = seconds

    @property
    def drain_margin_s(self) -> float | None:
        """The site profile's drain margin, if it sets one."""
        return self.profile.drain_margin_s

    def history(self) -> list[JobRecord]:
        """Copies of every job record, in submission order."""
        with self._lock:
            return [replace(r) for r in self.book.jobs.values()]

    def ended_as(self, slot_id: str) -> ParslState | None:
        """How the last job of slot ``slot_id`` ended (None: it has not ended or had none)."""
        with self._lock:
            slot = self.book.slots.get(str(slot_id))
            if slot is None or slot.job is None:
                return None
            return slot.job.end_state

    def stats(self) -> dict[str, Any]:
        """Polls so far, the scheduler commands run (by command), and the scheduler faults
        met and how each was handled (``faults``; docs/provider.md lists them)."""
        return {
            "polls": self.polls,
            "queries": dict(self.scheduler.queries),
            "faults": dict(self.faults),
        }

    @property
    def tag(self) -> str:
        """The name prefix of this provider's jobs (``pm-block-<label>-<random>``)."""
        return self.book.tag

    # ------------------------------------------------------------------------ poll thread

    def start(self) -> None:
        """Start the poll thread and the heartbeat (done by the first ``submit``)."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop.clear()
            self._start_heartbeat()
            self._thread = threading.Thread(
                target=self._loop, name=f"backfill-{self.label}", daemon=True
            )
            self._thread.start()

    def _start_heartbeat(self) -> None:
        with self._lock:
            if self._beat_thread is not None and self._beat_thread.is_alive():
                return
            self.beat()
            self._beat_thread = threading.Thread(
                target=self._beat_loop, name=f"backfill-{self.label}-heartbeat", daemon=True
            )
            self._beat_thread.start()

    @property
    def heartbeat_file(self) -> Path:
        """The dead-man switch's file: blocks end when it is older than the profile's
        ``driver_timeout_s`` (see :mod:`parsl_malleable.harvest.block_script`)."""
        return Path(self.script_dir or "backfill_scripts") / f"{self.label}.heartbeat"

    def beat(self) -> None:
        """Touch the heartbeat file: the driver is alive (the heartbeat thread does this)."""
        # Through the script folder held open since its check, never following a link: a
        # folder swapped in by another user neither gets the beat nor redirects it.
        self.launcher.scripts().touch(self.heartbeat_file.name)

    def _beat_loop(self) -> None:
        # Its own thread: a poll stuck on a hung scheduler command must not stop the beat.
        period = min(5.0, self.profile.driver_timeout_s / 6)
        while not self._stop.wait(period):
            try:
                self.beat()
            # A full or lost file system, or a script folder now refused: the blocks will end.
            except (OSError, MalleableError) as exc:
                logger.warning("heartbeat %s not written: %s", self.heartbeat_file, exc)

    def load_planner(self) -> float:
        """Load (on a fresh install: compile) the window planner before the first poll, and
        log how long it took; seconds. A poll that paid this silently looked like a hang."""
        if self.planner_load_s is not None:
            return self.planner_load_s
        logger.info("loading the window planner (numba; a fresh install compiles it once)")
        self.planner_load_s = load_planner(self.profile, self.predictor)
        logger.info("window planner ready in %.1f s", self.planner_load_s)
        return self.planner_load_s

    def close(self, cancel: bool = True, timeout: float = WIND_DOWN_S) -> None:
        """Stop the poll thread; with ``cancel``, close every slot, cancel its job and any
        stray job of ours, retrying failed cancels for up to ``timeout`` seconds."""
        if cancel:
            open_slots = [s.slot_id for s in self.book.slots.values() if not s.closed]
            if open_slots:
                self.cancel(open_slots)
            elif not self._stop.is_set():
                self._wind_down(timeout)
        self._stop.set()
        self._wake.set()
        for thread in (self._thread, self._beat_thread):
            if thread is not None:
                thread.join(timeout)
        if not any(t is not None and t.is_alive() for t in (self._thread, self._beat_thread)):
            self.launcher.close()
        if cancel:
            # A scheduler that runs blocks itself (the emulated site) stops them here.
            closer = getattr(self.scheduler, "close", None)
            if callable(closer):
                closer()

    def _loop(self) -> None:
        try:
            self.load_planner()
        except Exception:  # the poll will raise it again, with its own log line
            logger.exception("loading the window planner failed")
        next_poll = 0.0
        watch = self.profile.watch_interval_s
        next_watch = math.inf
        while not self._stop.is_set():
            try:
                if watch and time.monotonic() >= next_watch:
                    next_watch = time.monotonic() + watch
                    if self._queue_changed():
                        self._wake.set()
                if time.monotonic() >= next_poll or self._wake.is_set():
                    self._wake.clear()
                    self.poll_once()
                    next_poll = time.monotonic() + self.profile.poll_interval_s
                    overdue_in = self.walltime.next_check_in()
                    if overdue_in is not None:
                        # A block's walltime end + margin falls before the next poll: the
                        # walltime step needs a snapshot taken then, not up to a poll later.
                        next_poll = min(next_poll, time.monotonic() + overdue_in)
                    next_watch = time.monotonic() + watch if watch else math.inf
                self.canceller.send_due()
                due = self.canceller.next_in()
            except Exception:  # nothing may end the thread: blocks would stop yielding
                logger.exception("backfill poll failed")
                next_poll = time.monotonic() + self.profile.poll_interval_s
                due = None
            wait = min(next_poll, next_watch) - time.monotonic()
            wait = min(wait, due if due is not None else 1e9)
            self._wake.wait(max(0.05, wait))

    def _queue_changed(self) -> bool:
        """Whether a native job arrived or ended since the last snapshot (a watch query).

        Asked while a block runs (an arrival may need its nodes) or while a slot waits for an
        idle window (an end may open one); otherwise no query."""
        snap = self.last_snapshot
        if snap is None or not (self._has_running_blocks() or self.launcher.waiting_for_window):
            return False
        try:
            now = self.scheduler.queue_signature()
        except MalleableError as exc:
            logger.debug("queue watch: %s", exc)
            return False
        changed = now is not None and now != snapshot_signature(snap)
        if changed:
            logger.debug("queue watch: the native queue changed; polling now")
        return changed

    def _has_running_blocks(self) -> bool:
        with self._lock:
            return any(r.phase is Phase.RUNNING for r in self.book.jobs.values())

    def poll_once(self) -> PollReport:
        """One poll: snapshot, book-keeping, blocks past their walltime, yields, withdrawals,
        new blocks."""
        with self._poll_lock:
            before = sum(self.scheduler.queries.values())
            report = PollReport(started=self.clock())
            with self._lock:
                idle = all(
                    s.closed or s.final is not None for s in self.book.slots.values()
                ) and not any(r.active for r in self.book.jobs.values())
            if idle:
                return report  # nothing open, nothing running: no query
            self.ctx.polls.tick()
            try:
                snap = self.scheduler.snapshot()
                self.last_snapshot = snap
                self.keeper.reconcile(snap, report)
                self.walltime.end_overdue(snap, report)
                self.yielder.yield_blocks(snap, report)
                self.canceller.send_due()
                self.canceller.withdraw_stuck(report)
                self.launcher.launch(snap, report)
                self.last_error = self.launcher.submit_error
            except (MalleableError, OSError) as exc:
                # A hung, failing or garbled scheduler command costs this poll, nothing more:
                # blocks keep their state and the next poll tries again.
                report.error = str(exc)
                self.last_error = report.error
                logger.warning("backfill poll %d: %s", self.polls, exc)
            report.queries = sum(self.scheduler.queries.values()) - before
            self.last_report = report
            return report

    # ---------------------------------------------------------------------------- closing

    def _wind_down(self, timeout_s: float) -> None:
        """The last slot closed: cancel every stray job of ours the scheduler shows and retry
        failed cancels for up to ``timeout_s``; an ERROR names what could not be cancelled."""
        deadline = time.monotonic() + timeout_s
        with self._poll_lock:
            try:
                snap = self.scheduler.snapshot()
            except MalleableError as exc:
                logger.warning("closing: the last look for stray jobs failed: %s", exc)
            else:
                self.keeper.sweep(snap, PollReport(started=self.clock()))
        while True:
            self.canceller.send_due()
            wait = self.canceller.next_in()
            if wait is None or time.monotonic() + wait > deadline:
                break
            time.sleep(max(0.05, wait))  # a backoff: nothing else can say the cancel works
        with self._lock:
            left = [
                r.job_id
                for r in self.book.jobs.values()
                if r.active and (r.cancel_at is not None or r.cancel_given_up or not r.checked)
            ]
        if left:
            logger.error(
                "closing with jobs %s not cancelled; cancel them by hand (%s)",
                ", ".join(left),
                " ".join(self.scheduler.cancel_hint(left)),
            )

    # --------------------------------------------------------------------------- helpers

    def _slot_status(self, slot: Slot) -> ParslStatus:
        if slot.closed:
            return ParslStatus(ParslState.CANCELLED, "cancelled by Parsl")
        if slot.final is not None:
            return ParslStatus(slot.final, slot.final_message)
        job = slot.job
        if job is not None and job.phase in (Phase.RUNNING, Phase.YIELDING):
            until = f" until {job.deadline:.0f}" if job.deadline else ""
            return ParslStatus(
                ParslState.RUNNING, f"job {job.job_id} on {','.join(job.nodes)}{until}"
            )
        if job is not None and job.phase is Phase.PENDING:
            return ParslStatus(ParslState.PENDING, f"job {job.job_id} starting")
        return ParslStatus(ParslState.PENDING, "waiting for an idle window")


# Parsl's pool command with the lighter launcher (harvest/worker_pool.py): same arguments.
POOL_LAUNCH_CMD = DEFAULT_LAUNCH_CMD.replace("process_worker_pool.py", "parsl-malleable-pool", 1)


def harvest_executor(
    provider: BackfillProvider, label: str = "harvest", **htex_options: Any
) -> HighThroughputExecutor:
    """A HighThroughputExecutor set up for ``provider`` and the malleable-app controller.

    Defaults, each overridable through ``htex_options``: the pool started by
    ``parsl-malleable-pool`` (:mod:`~parsl_malleable.harvest.worker_pool`: workers forked from
    a server that imported torch and Parsl once), one worker per rank and
    ``ranks_per_node`` ranks per node (one per GPU, pinned with ``available_accelerators``),
    the :func:`~parsl_malleable.harvest.error_handler.backfill_error_handler`, and heartbeats
    of 2 s / 10 s so that a lost node is noticed in seconds, not minutes. The interchange
    listens on one address, where compute nodes reach this host (the controller serves ranks
    there too): see :func:`~parsl_malleable.harvest.listen_address.listen_address`.
    """
    safe_name(label, "executor label")  # Parsl puts it into run directories and log names
    profile = provider.profile
    options: dict[str, Any] = {
        "launch_cmd": POOL_LAUNCH_CMD,
        # Parsl's interchange, its logging errors (a full disk) kept off the user's terminal,
        # ending with this process however it dies.
        "interchange_launch_cmd": interchange_launch_cmd(),
        "max_workers_per_node": profile.node_ranks,
        "block_error_handler": backfill_error_handler,
        "heartbeat_period": 2,
        "heartbeat_threshold": 10,
    }
    if profile.gpus_per_node:
        options["available_accelerators"] = profile.gpus_per_node
    options.update(htex_options)
    # Without an address Parsl's interchange listens on every interface of the login node.
    address, origin = listen_address(profile, options.get("address"))
    options["address"] = address
    logger.info("executor %s: the interchange listens on %s (%s)", label, address, origin)
    return HighThroughputExecutor(label=label, provider=provider, **options)


__all__ = ["BackfillProvider", "PollReport", "YieldHook", "harvest_executor"]
