"""``BackfillProvider``: a Parsl ExecutionProvider that runs blocks in a scheduler's idle holes.

Each poll takes one snapshot of the machine (two scheduler queries on Slurm), brings the book of
our blocks up to date, yields every block that now stands in the way of a queued native job
(asks its ranks to leave, then cancels it), and fills waiting Parsl blocks with new scheduler
jobs of k nodes whose walltime ends a safety margin before the window does, after confirming
with ``sbatch --test-only`` that they start at once.

Who owns block counts: the provider. A Parsl block is a *slot* that the provider fills with one
scheduler job after another as windows open and close; Parsl sees it PENDING while it waits and
RUNNING while it holds nodes. ``init_blocks = min_blocks = max_blocks = slots``, so every Parsl
strategy ('none', 'simple', 'htex_auto_scale') leaves the count alone after the first scale-out
and never scales in a block that runs a long rank task. The provider polls in its own thread
at the profile's interval; Parsl's ``status()`` calls read the book and run no commands. See
docs/provider.md.
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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from parsl.executors import HighThroughputExecutor
from parsl.jobs.states import JobState as ParslState
from parsl.jobs.states import JobStatus as ParslStatus
from parsl.providers.base import ExecutionProvider
from parsl.utils import RepresentationMixin

from parsl_malleable.allocate.result import BlockRequest
from parsl_malleable.errors import MalleableError, StartRefused
from parsl_malleable.harvest.demand import DemandContext, DemandFn
from parsl_malleable.harvest.error_handler import backfill_error_handler
from parsl_malleable.harvest.launch import write_block_files
from parsl_malleable.harvest.ledger import BlockInfo, JobRecord, Phase, Slot
from parsl_malleable.harvest.listen_address import listen_address
from parsl_malleable.harvest.planning import (
    block_destination,
    block_nodes,
    harvest_windows,
    plan_blocks,
)
from parsl_malleable.harvest.profile import SiteProfile, load_profile
from parsl_malleable.harvest.reconcile import (
    CONFIRM_POLLS,
    cancel_retry_in,
    match_blocks,
)
from parsl_malleable.harvest.sites import (
    BlockScheduler,
    make_scheduler,
    snapshot_signature,
)
from parsl_malleable.harvest.states import CancelReason, end_state, is_failure
from parsl_malleable.harvest.submission import block_name, provider_tag, submit_block
from parsl_malleable.harvest.warmup import load_planner
from parsl_malleable.harvest.yielding import (
    DEFAULT_TOLERANCE_S,
    blocks_in_the_way,
    blocks_on_unavailable_nodes,
    reservation_in_the_way,
)
from parsl_malleable.inputs import safe_name
from parsl_malleable.schedulers.records import JobState
from parsl_malleable.snapshot import NodeState, Snapshot
from parsl_malleable.windows.predict import WindowPredictor

logger = logging.getLogger(__name__)

_BLOCK_IN_NAME = re.compile(r"block-([A-Za-z0-9_.-]+)")
_SAFE_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_DIGITS = re.compile(r"\d+")
YieldHook = Callable[[BlockInfo], None]
#: How long closing the provider may retry failed cancels (close() and Parsl's shutdown).
WIND_DOWN_S = 30.0


@dataclass
class PollReport:
    """What one poll did (for logs, tests and the overhead benchmark)."""

    started: float
    error: str = ""
    ended: list[str] = field(default_factory=list)
    yielded: list[str] = field(default_factory=list)
    submitted: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    queries: int = 0


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
        self.demand = demand
        self.on_yield = on_yield
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
        # Parsl's own type (ExecutionProvider.resources); the keys are our slot ids
        self.resources: dict[object, Any] = {}
        self.cores_per_node = None
        self.mem_per_node = None
        self.autostart = autostart
        self.clock = clock
        self._lock = threading.RLock()
        self._poll_lock = threading.Lock()
        self._slots: dict[str, Slot] = {}
        self._jobs: dict[str, JobRecord] = {}
        self._ids = itertools.count()
        # Every job's name is unique (tag + block + sequence): found again by name whatever
        # the submit command printed, and told apart from another driver's blocks.
        self._tag = provider_tag(self._label)
        self._job_seq = itertools.count()
        self.faults: Counter[str] = Counter()
        self._submit_failures = 0  # in a row
        self._failures = 0
        self._gave_up = ""
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._beat_thread: threading.Thread | None = None
        self.planner_load_s: float | None = None
        self._said: set[str] = set()
        self.polls = 0
        self.last_error = ""
        self.last_report: PollReport | None = None
        self.last_snapshot: Snapshot | None = None

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
        slot = Slot(slot_id, block_id, command, job_name, self.clock())
        with self._lock:
            self._slots[slot_id] = slot
            self.resources[slot_id] = {"job_id": slot_id, "block_id": block_id, "status": None}
        logger.info("slot %s opened for Parsl block %s", slot_id, block_id)
        if self.autostart:
            self.start()
            self._wake.set()
        return slot_id

    def status(self, job_ids: Sequence[object]) -> list[ParslStatus]:
        """Each slot's state from the book: PENDING, RUNNING, or how it ended."""
        out = []
        with self._lock:
            for job_id in job_ids:
                slot = self._slots.get(str(job_id))
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
                slot = self._slots.get(str(job_id))
                if slot is None or slot.closed:
                    continue
                slot.closed = True
                if slot.job is not None and slot.job.active:
                    slot.job.cancel_reason = CancelReason.PARSL
                    to_cancel.append(slot.job)
        # A failed cancel is retried by the poll thread, with backoff (_send_due_cancels).
        ok = self._cancel_now(to_cancel) if to_cancel else True
        if all(s.closed for s in self._slots.values()) and not self._stop.is_set():
            # Parsl's shutdown ends here (it never calls close): leave nothing behind.
            self._wind_down(WIND_DOWN_S)
            self._stop.set()
            self._wake.set()
        return [ok if str(j) in self._slots else False for j in job_ids]

    # ---------------------------------------------------------------- controller interface

    def blocks(self) -> list[BlockInfo]:
        """Our live blocks: nodes, deadline and phase of every job not yet ended."""
        with self._lock:
            return [
                BlockInfo.of(r)
                for r in self._jobs.values()
                if r.active and r.cancel_reason is not CancelReason.STRAY
            ]

    @property
    def min_block_s(self) -> float:
        """The shortest walltime worth a block now: the profile's ``min_block_s``, or with
        ``auto`` a multiple of the measured start-up (:attr:`startup_s`)."""
        return self.profile.block_floor_s(self.startup_s)

    def history(self) -> list[JobRecord]:
        """Copies of every job record, in submission order."""
        with self._lock:
            return [replace(r) for r in self._jobs.values()]

    def ended_as(self, slot_id: str) -> ParslState | None:
        """How the last job of slot ``slot_id`` ended (None: it has not ended or had none)."""
        with self._lock:
            slot = self._slots.get(str(slot_id))
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
        return self._tag

    # ------------------------------------------------------------------------ poll thread

    def start(self) -> None:
        """Start the poll thread and the heartbeat (done by the first ``submit``)."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop.clear()
            self.beat()
            self._beat_thread = threading.Thread(
                target=self._beat_loop, name=f"backfill-{self.label}-heartbeat", daemon=True
            )
            self._beat_thread.start()
            self._thread = threading.Thread(
                target=self._loop, name=f"backfill-{self.label}", daemon=True
            )
            self._thread.start()

    @property
    def heartbeat_file(self) -> Path:
        """The dead-man switch's file: blocks end when it is older than the profile's
        ``heartbeat_timeout_s`` (see :mod:`parsl_malleable.harvest.launch`)."""
        return Path(self.script_dir or "backfill_scripts") / f"{self.label}.heartbeat"

    def beat(self) -> None:
        """Touch the heartbeat file: the driver is alive (the heartbeat thread does this)."""
        path = self.heartbeat_file
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)  # an existing file gets the current time

    def _beat_loop(self) -> None:
        # Its own thread: a poll stuck on a hung scheduler command must not stop the beat.
        period = min(5.0, self.profile.heartbeat_timeout_s / 6)
        while not self._stop.wait(period):
            try:
                self.beat()
            except OSError as exc:  # a full or lost file system: the blocks will end
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
            open_slots = [s.slot_id for s in self._slots.values() if not s.closed]
            if open_slots:
                self.cancel(open_slots)
            elif not self._stop.is_set():
                self._wind_down(timeout)
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
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
                    next_watch = time.monotonic() + watch if watch else math.inf
                self._send_due_cancels()
                due = self._next_cancel_in()
            except Exception:  # nothing may end the thread: blocks would stop yielding
                logger.exception("backfill poll failed")
                next_poll = time.monotonic() + self.profile.poll_interval_s
                due = None
            wait = min(next_poll, next_watch) - time.monotonic()
            wait = min(wait, due if due is not None else 1e9)
            self._wake.wait(max(0.05, wait))

    def _queue_changed(self) -> bool:
        """Whether a native job arrived or ended since the last snapshot (a watch query)."""
        snap = self.last_snapshot
        if snap is None or not self._has_running_blocks():
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
            return any(r.phase is Phase.RUNNING for r in self._jobs.values())

    def poll_once(self) -> PollReport:
        """One poll: snapshot, book-keeping, yields, withdrawals, new blocks."""
        with self._poll_lock:
            before = sum(self.scheduler.queries.values())
            report = PollReport(started=self.clock())
            with self._lock:
                idle = all(
                    s.closed or s.final is not None for s in self._slots.values()
                ) and not any(r.active for r in self._jobs.values())
            if idle:
                return report  # nothing open, nothing running: no query
            self.polls += 1
            try:
                snap = self.scheduler.snapshot()
                self.last_snapshot = snap
                self._reconcile(snap, report)
                self._yield(snap, report)
                self._send_due_cancels()
                self._withdraw_stuck(report)
                self.last_error = ""
                self._launch(snap, report)  # a failed submit says so in last_error
            except (MalleableError, OSError) as exc:
                # A hung, failing or garbled scheduler command costs this poll, nothing more:
                # blocks keep their state and the next poll tries again.
                report.error = str(exc)
                self.last_error = report.error
                logger.warning("backfill poll %d: %s", self.polls, exc)
            report.queries = sum(self.scheduler.queries.values()) - before
            self.last_report = report
            return report

    # ------------------------------------------------------------------------ poll stages

    def _reconcile(self, snap: Snapshot, report: PollReport) -> None:
        with self._lock:
            found = match_blocks([r for r in self._jobs.values() if r.active], snap, self._tag)
            for old, new in found.renamed:
                self._correct_id(old, new)
            for job_id, job in found.running.items():
                rec = self._jobs[_renamed(job_id, found.renamed)]
                rec.missing_polls = 0
                self._mark_running(rec, job.nodes, job.start, job.time_limit)
            for job_id in found.pending:
                self._jobs[_renamed(job_id, found.renamed)].missing_polls = 0
            missing = [self._jobs[j] for j in found.missing]
        if found.strays:
            self._cancel_strays(found.strays, report)
        if missing:
            self._settle_missing(missing, report)

    def _correct_id(self, old: str, new: str) -> None:
        """The scheduler shows the block recorded as ``old`` as job ``new`` (its submit
        printed a wrong id): re-key the record. Called with the lock held."""
        rec = self._jobs.pop(old)
        rec.job_id = new
        self._jobs[new] = rec
        slot = self._slots.get(rec.slot_id)
        if slot is not None:
            slot.jobs = [new if j == old else j for j in slot.jobs]
            self.resources[slot.slot_id]["scheduler_job_id"] = new
        self.faults["id_corrected"] += 1
        logger.warning(
            "block %s was recorded as job %s but the scheduler shows it as job %s: corrected",
            rec.name,
            old,
            new,
        )

    def _cancel_strays(self, job_ids: list[str], report: PollReport) -> None:
        """Take jobs of ours that no record holds into the book, and cancel them."""
        now = self.clock()
        strays = []
        with self._lock:
            for job_id in job_ids:
                if job_id in self._jobs and self._jobs[job_id].active:
                    continue
                rec = JobRecord(
                    job_id=job_id,
                    slot_id="",
                    block_id="",
                    nodes_requested=0,
                    walltime_s=0.0,
                    planned_nodes=(),
                    window_end=now,
                    submitted_at=now,
                    phase=Phase.YIELDING,
                    cancel_reason=CancelReason.STRAY,
                )
                self._jobs[job_id] = rec
                strays.append(rec)
        if not strays:
            return
        self.faults["strays_cancelled"] += len(strays)
        logger.warning(
            "jobs %s carry this provider's name (%s) but no block holds them: cancelling",
            ", ".join(r.job_id for r in strays),
            self._tag,
        )
        report.skipped.extend(f"{r.job_id}: stray job of ours, cancelled" for r in strays)
        self._cancel_now(strays)

    def _settle_missing(self, missing: list[JobRecord], report: PollReport) -> None:
        """Records the snapshot did not list: ended when the scheduler says so, kept while a
        second query says they live, dropped (and cancelled, in case) only when neither query
        knows them for :data:`CONFIRM_POLLS` polls in a row."""
        statuses = self.scheduler.status([r.job_id for r in missing])
        unknown = [
            r
            for r in missing
            if r.job_id in statuses and statuses[r.job_id].state is JobState.UNKNOWN
        ]
        if unknown:
            # Asked another way (Slurm: scontrol): an empty squeue must not end a live block.
            statuses.update(self.scheduler.confirm_gone([r.job_id for r in unknown]))
        dropped: list[JobRecord] = []
        with self._lock:
            for rec in unknown:
                st = statuses.get(rec.job_id)
                if st is None or st.state is not JobState.UNKNOWN:
                    if st is not None and not st.state.finished:
                        self.faults["missing_kept"] += 1
                        self._say_once(
                            f"job {rec.job_id}",
                            "the job query does not list it but the scheduler says "
                            f"{st.raw_state or st.state.value}: kept",
                            level=logging.WARNING,
                        )
                    continue
                rec.missing_polls += 1
                if rec.missing_polls < CONFIRM_POLLS:
                    statuses.pop(rec.job_id)  # not yet: ask again at the next poll
                else:
                    dropped.append(rec)
        if dropped:
            self.faults["missing_dropped"] += len(dropped)
            try:  # it may live on where no query sees it; cancelling a gone job is harmless
                self.scheduler.cancel([r.job_id for r in dropped])
            except MalleableError as exc:
                logger.warning("cancel of vanished blocks %s: %s", [r.job_id for r in dropped], exc)
        ended = [
            r
            for r in missing
            if r.job_id in statuses
            and (statuses[r.job_id].state is JobState.UNKNOWN or statuses[r.job_id].state.finished)
        ]
        preempted = self._preempted_by_site(ended, statuses)
        now = self.clock()
        with self._lock:
            for rec in missing:
                st = statuses.get(rec.job_id)
                if st is None:
                    continue
                if st.state is JobState.UNKNOWN or st.state.finished:
                    state = JobState.PREEMPTED if rec.job_id in preempted else st.state
                    self._end(rec, state, now, st.end_limit)
                    report.ended.append(rec.job_id)
                elif st.state in (JobState.RUNNING, JobState.COMPLETING) and st.start is not None:
                    limit = (st.end_limit - st.start) if st.end_limit is not None else None
                    self._mark_running(rec, st.nodes, st.start, limit)

    def _mark_running(
        self, rec: JobRecord, nodes: tuple[str, ...], start: float, limit: float | None
    ) -> None:
        if rec.phase is Phase.PENDING:
            rec.phase = Phase.RUNNING
            logger.info("block job %s running on %s", rec.job_id, ",".join(nodes))
        rec.nodes = nodes or rec.nodes
        rec.start = start
        rec.deadline = start + (limit if limit is not None else rec.walltime_s)

    def _end(self, rec: JobRecord, state: JobState, now: float, end_limit: float | None) -> None:
        parsl_state, why = end_state(
            state,
            cancel_reason=rec.cancel_reason,
            end_limit=rec.deadline if rec.deadline is not None else end_limit,
            now=now,
            seen_running=rec.start is not None,
        )
        rec.phase = Phase.ENDED
        rec.end_state = parsl_state
        rec.message = f"job {rec.job_id}: {why} ({state.value})"
        rec.ended_at = now
        logger.info("block %s", rec.message)
        slot = self._slots.get(rec.slot_id)
        if is_failure(parsl_state):
            self._failures += 1
            if self._failures >= self.profile.max_consecutive_failures:
                self._give_up(f"{self._failures} blocks failed in a row; last: {rec.message}")
        elif rec.start is not None:
            self._failures = 0
        if slot is None or slot.closed or slot.final is not None:
            return
        if not self.recycle and rec.cancel_reason is not CancelReason.NOT_STARTED:
            slot.final, slot.final_message = parsl_state, rec.message

    def _preempted_by_site(self, ended: list[JobRecord], states: dict[str, Any]) -> set[str]:
        """The ended blocks Slurm preempted (preemption mode). A preempted block whose workers
        left within the grace time ends with their exit status (FAILED, COMPLETED), not
        PREEMPTED, and a preemption must not count towards giving up."""
        if self.profile.preemption == "none":
            return set()
        candidates = [
            r.job_id
            for r in ended
            if r.cancel_reason is None
            and r.start is not None
            and states[r.job_id].state not in (JobState.PREEMPTED, JobState.TIMEOUT)
        ]
        return self.scheduler.preempted(candidates) if candidates else set()

    def _give_up(self, message: str) -> None:
        self._gave_up = message
        logger.error("backfill provider stops launching: %s", message)
        for slot in self._slots.values():
            if not slot.closed and slot.final is None:
                slot.final, slot.final_message = ParslState.FAILED, message

    def _yield(self, snap: Snapshot, report: PollReport) -> None:
        with self._lock:
            live = {r.job_id: r for r in self._jobs.values() if r.phase is Phase.RUNNING}
        in_snapshot = {j.job_id for j in snap.running}
        deadlines = {
            job_id: rec.deadline
            for job_id, rec in live.items()
            if rec.deadline is not None and job_id in in_snapshot
        }
        reasons = {
            job_id: f"its node is out of service ({why})"
            for job_id, why in blocks_on_unavailable_nodes(snap, set(live)).items()
        }
        # In preemption mode Slurm takes a block back for a native job itself, and chooses
        # which. A yield of ours for a queued native job guessed the block from a plan that
        # does not know the job's node constraints, and cancelled a block Slurm then did not
        # need (measured by benchmarks/bench_block_start.py): the ranks get Slurm's SIGTERM as
        # their notice instead. A reservation is still ours to yield to, within the next poll.
        preempting = self.profile.preemption != "none"
        soon = (
            snap.now + self.profile.poll_interval_s + self.profile.yield_grace_s
            if preempting
            else math.inf
        )
        for job_id, when in blocks_in_the_way(snap, deadlines).items():
            if job_id in reasons or when > soon:
                continue
            rec = live[job_id]
            res = reservation_in_the_way(snap, rec.nodes, deadlines[job_id])
            if res is not None and res.start <= when + DEFAULT_TOLERANCE_S:
                reasons[job_id] = (
                    f"reservation {res.name} takes its nodes at {res.start:.0f}, "
                    f"before its end at {deadlines[job_id]:.0f}"
                )
            elif not preempting:
                reasons[job_id] = (
                    f"a queued job could use its nodes at {when:.0f}, "
                    f"before its end at {deadlines[job_id]:.0f}"
                )
        if not reasons:
            return
        now = self.clock()
        victims = [live[j] for j in reasons]
        with self._lock:
            for rec in victims:
                rec.phase = Phase.YIELDING
                rec.cancel_reason = CancelReason.YIELD
                rec.cancel_at = now + self.profile.yield_grace_s
                rec.yield_poll = self.polls
                rec.yield_reason = reasons[rec.job_id]
                report.yielded.append(rec.job_id)
        for rec in victims:
            logger.info("block job %s yields: %s", rec.job_id, rec.yield_reason)
            if self.on_yield is not None:
                try:
                    self.on_yield(BlockInfo.of(rec))
                except Exception:  # the controller's trouble must not keep the nodes
                    logger.exception("on_yield hook failed for block %s", rec.block_id)
        if self.profile.yield_grace_s > 0:
            try:
                self.scheduler.signal_batch([r.job_id for r in victims], "USR1")
            except MalleableError as exc:
                logger.info("USR1 to yielding blocks: %s", exc)

    def _send_due_cancels(self) -> None:
        now = self.clock()
        with self._lock:
            due = [
                r
                for r in self._jobs.values()
                if r.active and r.cancel_at is not None and r.cancel_at <= now
            ]
        if due:
            self._cancel_now(due)

    def _cancel_now(self, records: list[JobRecord]) -> bool:
        """Cancel these jobs now; whether the scheduler took the cancel. A failed cancel is
        retried after 1, 2, 4 ... s and given up loudly (an ERROR naming the command to run by
        hand) after :data:`~parsl_malleable.harvest.reconcile.CANCEL_ATTEMPTS`; the record
        stays in the book until the scheduler says the job ended."""
        now = self.clock()
        with self._lock:
            for rec in records:
                rec.cancel_at = None
                rec.cancel_poll = self.polls
                rec.cancel_sent_at = now
        try:
            self.scheduler.cancel([r.job_id for r in records])
        except MalleableError as exc:
            self._cancel_failed(records, now, exc)
            return False
        return True

    def _cancel_failed(self, records: list[JobRecord], now: float, exc: MalleableError) -> None:
        self.faults["cancel_failed"] += 1
        given_up = []
        with self._lock:
            for rec in records:
                rec.cancel_attempts += 1
                retry_in = cancel_retry_in(rec.cancel_attempts)
                if retry_in is None:
                    rec.cancel_given_up = True
                    given_up.append(rec.job_id)
                else:
                    rec.cancel_at = now + retry_in
        if given_up:
            self.faults["cancel_given_up"] += len(given_up)
            logger.error(
                "gave up cancelling jobs %s after %d attempts (last: %s); they hold their "
                "nodes until their walltime: cancel them by hand (%s)",
                ", ".join(given_up),
                max(r.cancel_attempts for r in records),
                exc,
                " ".join(self.scheduler_cancel_hint(given_up)),
            )
        retrying = [r.job_id for r in records if r.cancel_at is not None]
        if retrying:
            logger.warning(
                "cancel of %s failed, retrying in %.0f s: %s",
                ", ".join(retrying),
                min(r.cancel_at for r in records if r.cancel_at is not None) - now,
                exc,
            )

    def scheduler_cancel_hint(self, job_ids: list[str]) -> list[str]:
        """The command a person would run to cancel these jobs."""
        argv = getattr(self.scheduler, "cancel_argv", None)
        return list(argv(job_ids)) if callable(argv) else ["cancel", *job_ids]

    def _next_cancel_in(self) -> float | None:
        with self._lock:
            due = [r.cancel_at for r in self._jobs.values() if r.active and r.cancel_at is not None]
        return min(due) - self.clock() if due else None

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
                with self._lock:
                    active = [r for r in self._jobs.values() if r.active]
                found = match_blocks(active, snap, self._tag)
                self._cancel_strays(found.strays, PollReport(started=self.clock()))
        while True:
            self._send_due_cancels()
            wait = self._next_cancel_in()
            if wait is None or time.monotonic() + wait > deadline:
                break
            time.sleep(max(0.05, wait))  # a backoff: nothing else can say the cancel works
        with self._lock:
            left = [
                r.job_id
                for r in self._jobs.values()
                if r.active and (r.cancel_at is not None or r.cancel_given_up)
            ]
        if left:
            logger.error(
                "closing with jobs %s not cancelled; cancel them by hand (%s)",
                ", ".join(left),
                " ".join(self.scheduler_cancel_hint(left)),
            )

    def _withdraw_stuck(self, report: PollReport) -> None:
        now = self.clock()
        with self._lock:
            stuck = [
                r
                for r in self._jobs.values()
                if r.phase is Phase.PENDING
                and r.cancel_reason is None
                and now - r.submitted_at > self.profile.start_timeout_s
            ]
            for rec in stuck:
                rec.cancel_reason = CancelReason.NOT_STARTED
        if stuck:
            # A block that waits in the queue could start later at a worse time: withdraw it.
            self._cancel_now(stuck)
            report.skipped.extend(f"{r.job_id}: not started, withdrawn" for r in stuck)

    def _launch(self, snap: Snapshot, report: PollReport) -> None:
        with self._lock:
            if self._gave_up:
                return
            waiting = [s for s in self._slots.values() if s.waiting]
            active = [r for r in self._jobs.values() if r.active]
        if not waiting:
            return
        held = sum(len(r.nodes) or r.nodes_requested for r in active)
        busy = {n for r in active for n in (r.nodes or r.planned_nodes)}
        windows = harvest_windows(
            snap, self.profile, self.predictor, exclude=busy, min_block_s=self.min_block_s
        )
        cap_left = self.profile.max_nodes - held
        if self.demand is not None:
            ctx = DemandContext(snap, windows, self.blocks(), held, self.profile.max_nodes)
            want = int(self.demand(ctx)) - held
        else:
            want = len(waiting) * self.profile.max_nodes_per_block
        want = min(want, cap_left)
        requests = plan_blocks(
            snap, want, self.profile, self.predictor, windows=windows, min_block_s=self.min_block_s
        )
        requests = requests[: len(waiting)]
        if not requests:
            self._explain_no_window(snap, busy)
        if self.profile.test_start:
            requests = self._tested(requests, report)
        for slot, req in zip(waiting, requests, strict=False):
            self._submit_job(slot, req.nodes, req.walltime_s, req.node_ids, req.window_s, report)

    def _tested(self, requests: list[BlockRequest], report: PollReport) -> list[BlockRequest]:
        """The requests the scheduler would start now. Every block is tested before any is
        submitted: a block just submitted is queued ahead of the next test and would make it
        report a later start."""
        starts: list[float | None] = []
        refused: list[str] = []
        for req in requests:
            try:
                starts.append(self.scheduler.test_start(req.nodes, req.walltime_s, req.node_ids))
            except StartRefused as exc:
                starts.append(math.inf)
                refused.append(f"{req.nodes} nodes x {req.walltime_s:.0f} s: {exc.reason}")
        topic = "a block waits: the scheduler's start test says"
        for why in refused:
            report.skipped.append(why)
            self.faults["start_refused"] += 1
            # A WARNING: a refusal is often the site saying no to every block (a bad account,
            # partition or user), which an INFO line once hid.
            self._say_once(topic, why, logging.WARNING)
        latest = self.clock() + self.profile.start_tolerance_s
        for req, start in zip(requests, starts, strict=True):
            if start is not None and latest < start < math.inf:
                late = f"{req.nodes} nodes x {req.walltime_s:.0f} s would start at {start:.0f}"
                report.skipped.append(late)
                self._say_once(topic, late)
        return [
            r for r, start in zip(requests, starts, strict=True) if start is None or start <= latest
        ]

    def _explain_no_window(self, snap: Snapshot, busy: set[str]) -> None:
        """Say (once each) which reservation keeps idle nodes from holding a block, and when
        no idle node may run the blocks' partition or queue at all."""
        horizon = snap.now + self.min_block_s + self.profile.safety_margin_s
        idle = {n.name for n in snap.nodes if n.state is NodeState.IDLE} - busy
        usable = block_nodes(snap, self.profile)
        if idle and usable is not None and not idle & usable:
            where = block_destination(snap, self.profile)
            self._say_once(
                f"blocks to {where}",
                f"{len(idle)} idle node(s), none of which {where} may use (bound to another "
                "queue or partition, or outside its restrictions)",
            )
        for res in snap.reservations:
            hit = idle & set(res.nodes)
            if hit and res.start < horizon:
                self._say_once(
                    f"reservation {res.name}",
                    f"takes {len(hit)} idle node(s) from {res.start:.0f} to {res.end:.0f}: "
                    f"no block of {self.min_block_s:.0f} s + "
                    f"{self.profile.safety_margin_s:.0f} s margin fits before it",
                )

    def _say_once(self, topic: str, words: str, level: int = logging.INFO) -> None:
        """Log a reason a slot waits the first time it is seen (times and ids aside), so a
        condition that lasts a hundred polls is one line, and a new one is a new line."""
        key = topic + _DIGITS.sub("#", words)
        if key in self._said:
            return
        self._said.add(key)
        logger.log(level, "%s: %s", topic, words)

    def _submit_job(
        self,
        slot: Slot,
        nodes: int,
        walltime_s: float,
        node_ids: tuple[str, ...],
        window_s: float,
        report: PollReport,
    ) -> None:
        directory = Path(self.script_dir or "backfill_scripts")
        script = write_block_files(
            directory,
            slot_id=slot.slot_id,
            block_id=slot.block_id,
            command=slot.command,
            walltime_s=walltime_s,
            launcher=self.profile.launcher,
            worker_init=self.profile.worker_init,
            self_signal_s=(
                None if self.scheduler.signals_before_walltime else self.profile.signal_margin_s
            ),
            heartbeat_file=self.heartbeat_file,
            heartbeat_timeout_s=self.profile.heartbeat_timeout_s,
        )
        name = block_name(self._tag, slot.block_id, next(self._job_seq))
        now = self.clock()
        with self._lock:
            taken = {r.job_id for r in self._jobs.values() if r.active}
        outcome = submit_block(
            self.scheduler,
            script,
            name=name,
            nodes=nodes,
            walltime_s=walltime_s,
            node_ids=node_ids,
            taken=taken,
            faults=self.faults,
        )
        if outcome.job_id is None:
            self._submit_failed(name, outcome.error, report)
            return
        self._submit_failures = 0
        job_id = outcome.job_id
        rec = JobRecord(
            job_id=job_id,
            slot_id=slot.slot_id,
            block_id=slot.block_id,
            nodes_requested=nodes,
            walltime_s=walltime_s,
            planned_nodes=tuple(node_ids),
            window_end=now + window_s,
            submitted_at=now,
            name=name,
        )
        with self._lock:
            self._jobs[job_id] = rec
            slot.job = rec
            slot.jobs.append(job_id)
            self.resources[slot.slot_id]["scheduler_job_id"] = job_id
            # Parsl may have closed the slot while this poll was submitting: do not leak it.
            orphan = slot.closed
            if orphan:
                rec.cancel_reason = CancelReason.PARSL
        report.submitted.append(job_id)
        if orphan:
            self._cancel_now([rec])
            return
        logger.info(
            "slot %s: job %s, %d nodes x %.0f s (window %.0f s)",
            slot.slot_id,
            job_id,
            nodes,
            walltime_s,
            window_s,
        )

    def _submit_failed(self, name: str, error: str, report: PollReport) -> None:
        """No job came of a submit: a WARNING with the scheduler's words, the first time and
        then every tenth time in a row (a broken account or partition fails every poll)."""
        self._submit_failures += 1
        report.skipped.append(f"{name}: submit failed: {error}")
        self.last_error = error
        streak = self._submit_failures
        if streak == 1 or streak % 10 == 0:
            logger.warning(
                "block submit failed%s: %s",
                f" ({streak} times in a row)" if streak > 1 else "",
                error,
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


def _renamed(job_id: str, renamed: list[tuple[str, str]]) -> str:
    """The id a record is kept under after :meth:`BackfillProvider._correct_id`."""
    return dict(renamed).get(job_id, job_id)


def harvest_executor(
    provider: BackfillProvider, label: str = "harvest", **htex_options: Any
) -> HighThroughputExecutor:
    """A HighThroughputExecutor set up for ``provider`` and the malleable-app controller.

    Defaults, each overridable through ``htex_options``: one worker per rank and
    ``ranks_per_node`` ranks per node (one per GPU, pinned with ``available_accelerators``),
    the :func:`~parsl_malleable.harvest.error_handler.backfill_error_handler`, and heartbeats
    of 2 s / 10 s so that a lost node is noticed in seconds, not minutes. The interchange
    listens on one address, where compute nodes reach this host (the controller serves ranks
    there too): see :func:`~parsl_malleable.harvest.listen_address.listen_address`.
    """
    safe_name(label, "executor label")  # Parsl puts it into run directories and log names
    profile = provider.profile
    options: dict[str, Any] = {
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
