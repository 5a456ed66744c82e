"""The emulated site: a batch system inside the user's process, with virtual nodes.

:class:`EmulatedSite` is a :class:`~parsl_malleable.schedulers.base.BlockScheduler` (snapshot,
start test, submit, status, cancel, signal) over ``nodes`` virtual nodes of this machine. The
native load is a trace replayed through the simulator (:mod:`.native_load`): every native
job starts and ends exactly when the simulation says, so no native job is ever delayed. A
starting native job takes nodes no native holds, preferring nodes no block of ours holds; when
those do not suffice it *reclaims* nodes from our blocks: each such block is killed (state
PREEMPTED) and counted in :attr:`EmulatedSite.reclaims`. A reclaim is a yield the provider
*missed* only when the queue the site last showed it already allowed that start; one that an
arrival or an early end made possible after the provider's last look, within one poll of the
start, is *unforeseeable* (:meth:`EmulatedSite._foresight`). Blocks run their batch script
once per node as real processes (:mod:`.blocks`), each node under a wrapper that kills its
process group when this process dies. A daemon thread keeps time, so walltime kills and
reclaims happen on time even when nobody calls; every call also brings the site up to date
first. See docs/schedulers.md.
"""

from __future__ import annotations

import atexit
import contextlib
import heapq
import itertools
import logging
import os
import shutil
import signal
import tempfile
import threading
import time
import weakref
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from parsl_malleable.errors import ConfigError, SchedulerCommandError
from parsl_malleable.schedulers.base import OURS_PREFIX, BlockScheduler, Script, SiteDestination
from parsl_malleable.schedulers.emulated.blocks import EmulatedBlock
from parsl_malleable.schedulers.emulated.native_load import (
    NativeJob,
    NativeSchedule,
    native_schedule,
)
from parsl_malleable.schedulers.emulated.settings import EmulatedSettings
from parsl_malleable.schedulers.records import JobState, JobStatus
from parsl_malleable.snapshot import Node, NodeState, PendingJob, RunningJob, Snapshot

logger = logging.getLogger(__name__)

IDLE_TICK_S = 1.0  # the thread's longest sleep when no block runs
BLOCK_TICK_S = 0.2  # ... and while blocks run (their processes may exit at any time)
#: Limits and ends are floats mapped from whole trace seconds: a native that ran to its limit
#: may end a rounding error before it, which is not an early end.
LIMIT_TOLERANCE_S = 1e-3
#: Recent gaps between snapshots kept: the longest is the provider's poll as the site sees it.
LOOK_GAPS = 8
#: A poll's length varies by its own work (a submit, a cancel): a look this fraction later
#: than the longest recent gap is still on time.
LOOK_SLACK = 0.25


@dataclass(frozen=True)
class Reclaim:
    """A block of ours killed because a native job needed its nodes at ``at``.

    ``foreseeable``: the last snapshot before ``at`` already showed that native queued, with
    enough nodes free by ``at`` by the running natives' limits (a yield the provider missed);
    False when an arrival or an early end after that snapshot, less than one poll before
    ``at``, made the start possible. ``why`` says which, with the times.
    """

    native_id: str
    block_id: str
    nodes: tuple[str, ...]
    at: float
    foreseeable: bool = True
    why: str = ""


@dataclass(frozen=True)
class NativeRun:
    """A native job that started on the site: its nodes and simulated start and end."""

    job_id: str
    nodes: tuple[str, ...]
    start: float
    end: float


@dataclass(frozen=True)
class NodeCounts:
    """Nodes held by native jobs, by blocks of ours, and idle, now."""

    native: int
    ours: int
    idle: int


BLOCK_TMP_PREFIX = "pm-"
"""The name of the blocks' private temporary folder (``/tmp/pm-XXXXXXXX``, short: a pool's
socket path under it must fit AF_UNIX's 107 bytes, see campaign/tmpdir_check.py)."""
_SUN_PATH_MAX = 107  # bytes of an AF_UNIX socket path (Linux's sun_path, less its NUL)
_POOL_SOCKET_BELOW_TMP = len("/pm-XXXXXXXX/pymp-XXXXXXXX/listener-XXXXXXXX")


def _private_tmp_fits(folder: str) -> bool:
    """Whether a pool's socket still fits AF_UNIX's limit under a private folder in ``folder``."""
    return len(os.fsencode(folder)) + _POOL_SOCKET_BELOW_TMP <= _SUN_PATH_MAX


class EmulatedSite(BlockScheduler):
    """A batch system with ``settings.nodes`` virtual nodes and a replayed native load.

    ``signal_margin_s``: USR1 to each node's batch shell this long before a block's walltime
    (Slurm's ``--signal=B:USR1@margin``; 0: none). ``pin_nodes``: a block must get the nodes it
    asks for (else any idle nodes, the asked ones first). ``env`` is added to every block's
    environment. ``ours_prefix``: blocks whose name starts with it are ``ours`` in snapshots.
    ``schedule``: the native jobs (default: simulated from ``settings`` now).
    """

    def __init__(
        self,
        settings: EmulatedSettings,
        *,
        signal_margin_s: float = 0.0,
        pin_nodes: bool = True,
        env: Mapping[str, str] | None = None,
        ours_prefix: str = OURS_PREFIX,
        schedule: NativeSchedule | None = None,
    ) -> None:
        self.settings = settings
        self.node_names = settings.node_names()
        self.signal_margin_s = signal_margin_s
        self.pin_nodes = pin_nodes
        # The blocks' temporary folder, private to this site and removed when it closes: a
        # pool's multiprocessing makes a pymp-* folder there and, killed with its block (as
        # yields and cancels do), never removes it; in the user's TMPDIR they piled up, several
        # per run. A TMPDIR given in ``env`` is the caller's to keep; under a TMPDIR too long
        # for one more level (the pools' sockets would not fit), the blocks use it as it is.
        self.env = dict(env or {})
        self._tmp: str | None = None
        if "TMPDIR" not in self.env and _private_tmp_fits(tempfile.gettempdir()):
            self._tmp = tempfile.mkdtemp(prefix=BLOCK_TMP_PREFIX)
            self.env["TMPDIR"] = self._tmp
        self.ours_prefix = ours_prefix
        self.schedule = schedule if schedule is not None else native_schedule(settings)
        if self.schedule.nodes != settings.nodes:
            raise ValueError(f"schedule for {self.schedule.nodes} nodes, site has {settings.nodes}")
        self.queries: Counter[str] = Counter()
        self.reclaims: list[Reclaim] = []
        self.native_runs: list[NativeRun] = []  # every native start so far, in start order
        self._natives = self.schedule.jobs  # by start
        self._next_start = 0
        self._ends: list[tuple[float, str]] = []
        self._running: dict[str, tuple[NativeJob, tuple[str, ...]]] = {}
        self._native_on: dict[str, str] = {}  # node -> native job id
        self._block_on: dict[str, str] = {}  # node -> block job id
        self._blocks: dict[str, EmulatedBlock] = {}
        self._ids = itertools.count(1)
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._closed = False
        # When snapshots were served (the provider's looks at the queue): a reclaim is judged
        # against the last one before it (see _foresight).
        self._last_look: float | None = None
        self._look_gaps: list[float] = []
        # The lifeline: every node wrapper holds the read end; when this process dies the
        # write end closes and the wrappers kill their groups.
        self._life_r, self._life_w = os.pipe()
        self._advance(time.time())
        self._thread = threading.Thread(target=self._keep_time, name="emulated-site", daemon=True)
        self._thread.start()
        atexit.register(_close_ref, weakref.ref(self))

    @classmethod
    def from_profile(
        cls, profile: SiteDestination, env: Mapping[str, str] | None = None
    ) -> EmulatedSite:
        """The emulated site of ``profile.emulated`` (simulates its native load first), with
        the profile's signal margin and node pinning; ``env`` is added to every block's
        environment."""
        if profile.emulated is None:
            raise ConfigError(f"{profile.name}: emulated: required with scheduler: emulated")
        return cls(
            profile.emulated,
            signal_margin_s=profile.signal_margin_s,
            pin_nodes=profile.pin_nodes,
            env=env,
        )

    # ------------------------------------------------------------------ BlockScheduler

    def snapshot(self) -> Snapshot:
        """Nodes, running natives and blocks, pending natives (with their simulated start)."""
        with self._lock:
            self.queries["snapshot"] += 1
            now = time.time()
            self._advance(now)  # a reclaim in here is judged against the previous look
            self._look(now)
            nodes = [
                Node(n, NodeState.ALLOCATED if self._holder(n) else NodeState.IDLE)
                for n in self.node_names
            ]
            running = [
                RunningJob(job.job_id, held, job.start, job.limit_s, user=job.user)
                for job, held in self._running.values()
            ]
            running += [
                RunningJob(b.job_id, b.nodes, b.start, b.walltime_s, ours=b.ours, name=b.name)
                for b in self._blocks.values()
                if b.running
            ]
            pending = [
                PendingJob(
                    job.job_id,
                    job.size,
                    job.limit_s,
                    job.queued,
                    user=job.user,
                    expected_start=job.start,
                )
                for job in self._natives[self._next_start :]
                if job.queued <= now
            ]
        pending.sort(key=lambda j: (j.submit, j.expected_start or 0.0))
        return Snapshot(now=now, nodes=nodes, running=running, pending=pending, backfill="easy")

    def test_start(
        self, nodes: int, walltime_s: float, node_ids: Sequence[str] = ()
    ) -> float | None:
        """When a block of ``nodes`` (on ``node_ids`` if pinned) would start: now when they
        are idle, else when their holders' limits end (pending natives are not counted)."""
        with self._lock:
            self.queries["test_start"] += 1
            now = time.time()
            self._advance(now)
            free_at = {n: self._free_at(n, now) for n in self.node_names}
            if self.pin_nodes and node_ids:
                return max(free_at[n] for n in node_ids) if set(node_ids) <= set(free_at) else None
            times = sorted(free_at.values())
            return times[nodes - 1] if 0 < nodes <= len(times) else None

    def submit(
        self,
        script: Script,
        *,
        nodes: int,
        walltime_s: float,
        node_ids: Sequence[str] = (),
        name: str | None = None,
    ) -> str:
        """Start ``script`` (a path) once per node now; the block's job id. The emulated site
        has no queue for blocks: nodes that are not idle are an error (the provider tests
        first)."""
        if not isinstance(script, str | os.PathLike):
            raise ValueError("the emulated site runs a batch script path, not an argv")
        name = name or self.ours_prefix
        with self._lock:
            self.queries["submit"] += 1
            if self._closed:
                raise SchedulerCommandError(["emulated", "submit", name], "the site is closed")
            now = time.time()
            self._advance(now)
            chosen = self._choose(nodes, node_ids, name)
            job_id = f"b{next(self._ids)}"
            block = EmulatedBlock(
                job_id, name, chosen, now, float(walltime_s), name.startswith(self.ours_prefix)
            )
            if 0 < self.signal_margin_s < walltime_s:
                block.usr1_at = block.deadline - self.signal_margin_s
            block.launch(Path(script), self._life_r, self.env)
            self._blocks[job_id] = block
            for node in chosen:
                self._block_on[node] = job_id
        logger.info(
            "emulated block %s (%s) on %s for %.0f s", job_id, name, ",".join(chosen), walltime_s
        )
        self._wake.set()
        return job_id

    def status(self, job_ids: Sequence[str]) -> dict[str, JobStatus]:
        """Blocks and native jobs by id; an id the site never had is UNKNOWN."""
        with self._lock:
            self.queries["status"] += 1
            now = time.time()
            self._advance(now)
            return {j: self._status(j, now) for j in job_ids}

    def cancel(self, job_ids: Sequence[str]) -> None:
        """End blocks (CANCELLED): TERM to each node's group now, KILL after the grace."""
        with self._lock:
            self.queries["cancel"] += 1
            now = time.time()
            self._advance(now)
            for job_id in job_ids:
                block = self._blocks.get(job_id)
                if block is not None and block.running:
                    self._end_block(block, JobState.CANCELLED, now, "cancelled", now)
        self._wake.set()

    def signal_batch(self, job_ids: Sequence[str], signal: str) -> None:
        """Send ``signal`` (``"USR1"``) to the batch shell of each node of running blocks."""
        signum = _signal_number(signal)
        with self._lock:
            self.queries["signal"] += 1
            self._advance(time.time())
            for job_id in job_ids:
                block = self._blocks.get(job_id)
                if block is not None and block.running:
                    block.signal_shells(signum)

    # ----------------------------------------------------------------------- reporting

    @property
    def reclaim_count(self) -> int:
        """Blocks killed because a native job needed their nodes (missed or unforeseeable)."""
        return len(self.reclaims)

    @property
    def missed_count(self) -> int:
        """Reclaims the provider could have prevented: yields it missed."""
        return sum(r.foreseeable for r in self.reclaims)

    @property
    def unforeseeable_count(self) -> int:
        """Reclaims no yield could have prevented: the start became possible after the last
        snapshot, less than one poll before it (on a real machine the native would have waited
        for the yield instead, within the provider's documented bound)."""
        return len(self.reclaims) - self.missed_count

    def node_counts(self) -> NodeCounts:
        """How many nodes natives hold, blocks hold, and are idle, now."""
        with self._lock:
            self._advance(time.time())
            return NodeCounts(
                native=len(self._native_on),
                ours=len(self._block_on),
                idle=len(self.node_names) - len(self._native_on) - len(self._block_on),
            )

    def block(self, job_id: str) -> EmulatedBlock | None:
        """The block ``job_id`` (its processes, output files, state), if there is one."""
        with self._lock:
            return self._blocks.get(job_id)

    def close(self, timeout_s: float | None = None) -> None:
        """Kill every block (TERM, KILL after the grace), wait for their processes, stop the
        clock. Native jobs need no cleanup: they are virtual. Idempotent."""
        grace = self.settings.kill_grace_s if timeout_s is None else timeout_s
        with self._lock:
            if self._closed:
                return
            self._closed = True
            now = time.time()
            live = [b for b in self._blocks.values() if b.procs]
            for block in live:
                if block.running:
                    self._end_block(block, JobState.CANCELLED, now, "site closed", now)
                else:
                    block.signal_groups(signal.SIGTERM)
            procs = [p for b in live for p in b.procs.values()]
        until = time.monotonic() + grace
        while time.monotonic() < until and any(p.poll() is None for p in procs):
            time.sleep(0.05)
        for proc in procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.poll()
        self._wake.set()
        self._thread.join(5)
        for fd in (self._life_w, self._life_r):
            os.close(fd)
        if self._tmp is not None:  # every block process is gone: nothing writes there now
            shutil.rmtree(self._tmp, ignore_errors=True)

    # ------------------------------------------------------------------------- the clock

    def _keep_time(self) -> None:
        while not self._closed:
            with self._lock:
                if self._closed:
                    return
                now = time.time()
                self._advance(now)
                tick = BLOCK_TICK_S if any(b.procs for b in self._blocks.values()) else IDLE_TICK_S
                upcoming = self._next_event()
            wait = tick if upcoming is None else min(tick, max(0.0, upcoming[0] - time.time()))
            self._wake.wait(wait)
            self._wake.clear()

    def _next_event(self) -> tuple[float, int, str] | None:
        """The earliest pending event: ``(time, order, key)``; at one instant native ends go
        first, then block walltimes, native starts, USR1 and KILL."""
        events: list[tuple[float, int, str]] = []
        if self._ends:
            events.append((self._ends[0][0], 0, self._ends[0][1]))
        for block in self._blocks.values():
            if block.running:
                events.append((block.deadline, 1, block.job_id))
                if block.usr1_at is not None:
                    events.append((block.usr1_at, 3, block.job_id))
            if block.kill_at is not None:
                events.append((block.kill_at, 4, block.job_id))
        if self._next_start < len(self._natives):
            events.append((self._natives[self._next_start].start, 2, ""))
        return min(events) if events else None

    def _advance(self, now: float) -> None:
        """Bring the site to ``now``: exits first (they happened by now), then every event
        up to ``now`` in time order."""
        self._reap(now)
        while (event := self._next_event()) is not None and event[0] <= now:
            when, kind, key = event
            if kind == 0:
                heapq.heappop(self._ends)
                _job, held = self._running.pop(key)
                for node in held:
                    del self._native_on[node]
            elif kind == 1:
                block = self._blocks[key]
                self._end_block(block, JobState.TIMEOUT, when, "walltime reached", now)
            elif kind == 2:
                self._start_native(self._natives[self._next_start], now)
                self._next_start += 1
            elif kind == 3:
                block = self._blocks[key]
                block.usr1_at = None
                block.signal_shells(signal.SIGUSR1)
            else:
                block = self._blocks[key]
                block.kill_at = None
                block.signal_groups(signal.SIGKILL)

    def _reap(self, now: float) -> None:
        for block in self._blocks.values():
            if not block.procs:
                continue
            codes = block.exit_codes()
            if any(code is None for code in codes.values()):
                continue
            if block.running:
                failed = {n: c for n, c in codes.items() if c != 0}
                state = JobState.FAILED if failed else JobState.COMPLETED
                why = f"exit status {failed}" if failed else "exit status 0"
                self._end_block(block, state, now, why, now)
            block.signal_groups(signal.SIGKILL)  # anything the shells left behind
            block.kill_at = None
            block.procs.clear()

    def _start_native(self, job: NativeJob, now: float) -> None:
        free = [n for n in self.node_names if n not in self._native_on]
        if len(free) < job.size:  # the simulation never overfills the machine
            logger.error("native job %s needs %d nodes, %d free", job.job_id, job.size, len(free))
        spare = [n for n in free if n not in self._block_on]
        taken = spare[: job.size]
        if len(taken) < job.size:
            foreseeable, why = self._foresight(job)
            victims = sorted(
                {self._block_on[n] for n in free if n in self._block_on},
                key=lambda j: (self._blocks[j].deadline, j),
            )
            for job_id in victims:
                if len(taken) >= job.size:
                    break
                block = self._blocks[job_id]
                self.reclaims.append(
                    Reclaim(job.job_id, job_id, block.nodes, job.start, foreseeable, why)
                )
                logger.warning(
                    "native job %s reclaims nodes %s: block %s killed (%s: %s)",
                    job.job_id,
                    ",".join(block.nodes),
                    job_id,
                    "a yield the provider missed" if foreseeable else "unforeseeable",
                    why,
                )
                reason = f"reclaimed by native job {job.job_id}"
                self._end_block(block, JobState.PREEMPTED, job.start, reason, now)
                taken += [n for n in block.nodes if n not in taken][: job.size - len(taken)]
        held = tuple(sorted(taken, key=self.node_names.index))
        self._running[job.job_id] = (job, held)
        self.native_runs.append(NativeRun(job.job_id, held, job.start, job.end))
        for node in held:
            self._native_on[node] = job.job_id
        heapq.heappush(self._ends, (job.end, job.job_id))

    def _end_block(
        self, block: EmulatedBlock, state: JobState, at: float, reason: str, now: float
    ) -> None:
        for node in block.nodes:
            if self._block_on.get(node) == block.job_id:
                del self._block_on[node]
        block.finish(state, at, reason, now + self.settings.kill_grace_s)
        logger.info("emulated block %s: %s (%s)", block.job_id, state.value, reason)

    # ------------------------------------------------------------------------ foresight

    def _look(self, now: float) -> None:
        if self._last_look is not None:
            self._look_gaps = [*self._look_gaps[1 - LOOK_GAPS :], now - self._last_look]
        self._last_look = now

    def _allowed_at(self, job: NativeJob, at: float) -> bool:
        """Whether the queue as shown at ``at`` allowed ``job`` to start by its start: it was
        queued, and the natives running then, each held to its limit, left enough nodes.

        Queued natives ahead of it are not planned in, and our blocks' nodes count as free
        (a yield frees them): both make a start look allowed sooner, so a reclaim is called
        unforeseeable only when no plan from that queue could have started the job in time.
        """
        if job.queued > at:
            return False
        held = sum(
            o.size
            for o in self._natives
            if o is not job
            and o.start <= at < o.end
            and o.start + o.limit_s > job.start + LIMIT_TOLERANCE_S
        )
        return self.settings.nodes - held >= job.size

    def _foresight(self, job: NativeJob) -> tuple[bool, str]:
        """Could a yield have freed ``job``'s nodes in time? ``(foreseeable, why)``.

        Foreseeable when the last snapshot before the start (the provider's last look) already
        allowed it (:meth:`_allowed_at`), or when that look is older than the provider's poll
        (the longest of the recent gaps between looks: a poll that came late missed it); with
        no look at all, when the queue just before the start allowed it. Otherwise an arrival
        or an early end after the last look, less than one poll before the start, made it
        possible: no poll could have seen it before the native needed the nodes.
        """
        start = job.start
        look = self._last_look
        at = look if look is not None else start - LIMIT_TOLERANCE_S
        if self._allowed_at(job, at):
            seen = f"snapshot at {at - start:+.2f} s" if look is not None else "its queue"
            return True, (
                f"the {seen} showed it queued with {job.size} node(s) free by its start "
                "(running natives held to their limits)"
            )
        poll = max(self._look_gaps, default=0.0)
        if look is not None and start - look > poll * (1 + LOOK_SLACK) + LIMIT_TOLERANCE_S:
            return True, (
                f"no snapshot in the {start - look:.2f} s before its start, longer than a "
                f"poll ({poll:.2f} s)"
            )
        causes = []
        if look is None or job.queued > look:
            causes.append(f"it was queued {start - job.queued:.2f} s before its start")
        for o in self._natives:
            limit_end = o.start + o.limit_s
            if at < o.end <= start + LIMIT_TOLERANCE_S and o.end < limit_end - LIMIT_TOLERANCE_S:
                causes.append(
                    f"native job {o.job_id} ended {start - o.end:.2f} s before this start, "
                    f"{limit_end - o.end:.2f} s before its limit"
                )
        when = (
            f"after the last snapshot ({start - at:.2f} s before its start), which showed no "
            "room for it by its start"
            if look is not None
            else "with no snapshot taken before it"
        )
        return False, f"{'; '.join(causes) or 'the queue changed'}, {when}"

    # ------------------------------------------------------------------------- helpers

    def _holder(self, node: str) -> str | None:
        return self._native_on.get(node) or self._block_on.get(node)

    def _free_at(self, node: str, now: float) -> float:
        if node in self._native_on:
            job, _held = self._running[self._native_on[node]]
            return max(now, job.start + job.limit_s)
        if node in self._block_on:
            return max(now, self._blocks[self._block_on[node]].deadline)
        return now

    def _choose(self, nodes: int, node_ids: Sequence[str], name: str) -> tuple[str, ...]:
        argv = ["emulated", "submit", name]
        unknown = [n for n in node_ids if n not in self.node_names]
        if unknown:
            raise SchedulerCommandError(argv, f"no such nodes: {','.join(unknown)}")
        idle = [n for n in self.node_names if self._holder(n) is None]
        if self.pin_nodes and node_ids:
            busy = [n for n in node_ids if n not in idle]
            if busy or len(node_ids) != nodes:
                why = f"nodes not idle: {','.join(busy)}" if busy else "node count mismatch"
                raise SchedulerCommandError(argv, why)
            return tuple(node_ids)
        order = [n for n in node_ids if n in idle] + [n for n in idle if n not in node_ids]
        if len(order) < nodes:
            raise SchedulerCommandError(argv, f"{nodes} nodes asked, {len(order)} idle")
        return tuple(sorted(order[:nodes], key=self.node_names.index))

    def _status(self, job_id: str, now: float) -> JobStatus:
        block = self._blocks.get(job_id)
        if block is not None:
            return block.status()
        if job_id in self._running:
            job, held = self._running[job_id]
            return JobStatus(
                job_id, JobState.RUNNING, "RUNNING", "", held, job.start, job.start + job.limit_s
            )
        for job in self._natives:
            if job.job_id == job_id:
                if job.end <= now:
                    return JobStatus(
                        job_id, JobState.COMPLETED, "COMPLETED", "", (), job.start, job.end
                    )
                if job.queued <= now:
                    return JobStatus(
                        job_id,
                        JobState.PENDING,
                        "PENDING",
                        "",
                        (),
                        job.start,
                        job.start + job.limit_s,
                    )
        return JobStatus(job_id, JobState.UNKNOWN, "UNKNOWN", "the emulated site has no such job")


def _signal_number(name: str) -> int:
    text = name.upper()
    text = text if text.startswith("SIG") else f"SIG{text}"
    try:
        return int(getattr(signal, text))
    except AttributeError:
        raise SchedulerCommandError(["emulated", "signal", name], "unknown signal") from None


def _close_ref(ref: weakref.ReferenceType[EmulatedSite]) -> None:
    site = ref()
    if site is not None:
        site.close()


__all__ = ["EmulatedSite", "NativeRun", "NodeCounts", "Reclaim"]
