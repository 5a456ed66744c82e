"""The scavenger baseline: what a user harvests idle nodes with today, without this project.

Fixed-size training jobs go to a preemptable ("scavenger") Slurm partition with requeue, as
submitit's requeue-on-preemption sets them up. The replay models exactly that, over the same
idle-node timeline and with the same physics as :mod:`parsl_malleable.replay.engine`:

* **Fixed size.** A job always runs on ``k`` nodes: ``nodes_per_job`` if given, else 1; either
  way clamped to the job's ``[min_nodes, max_nodes]`` (so a job that needs more than one node
  gets its own minimum). It never grows or shrinks.
* **FCFS, no backfill.** Jobs wait in order of submit time (ties: by name, as the engine
  orders them); only submitted jobs are eligible. Whenever at least ``k`` idle nodes are
  unused, the head job starts on ``k`` of them; a head job that does not fit blocks those
  behind it (strict first come first served; when every job has one size, the default,
  backfill could start nothing more anyway).
* **Which nodes.** Nobody knows when a node's idle interval ends, so the choice uses only the
  past: the nodes idle the longest (earliest start of their current idle interval; ties: the
  lower node number): if idle times are heavy-tailed, one idle for long tends to stay idle
  longer. On Summit the choice barely matters: taking the most recently idle nodes instead
  changed samples trained and starts by under 0.5 % (a day of 1,000 nodes, two weeks of all).
* **Scheduling delay.** Slurm starts a pending job at its next scheduling pass, not the
  instant nodes are free: every start holds the nodes ``schedule_delay_s`` (default
  :data:`SCHEDULE_DELAY_S`) before the job's start-up begins.
* **Start-up.** Every start (the first and each restart) then costs ``startup_s`` seconds: a
  cold start of a batch job (launch, imports, data, restoring the last checkpoint). Default:
  the job's ``startup_s`` if it has one, else :data:`STARTUP_S`, measured live. The job holds
  its nodes during it and trains nothing.
* **Preemption.** When an idle interval of one of its nodes ends, the native job takes the
  node back at once: the training job is preempted. It keeps what it trained up to its last
  checkpoint: every ``checkpoint_s`` seconds of a run's training (default
  :data:`CHECKPOINT_S`; 0: a checkpoint at the signal, nothing lost), less
  ``lost_on_preempt_s`` more seconds (default 0). It is requeued with its remaining samples
  and keeps its place in the queue (a requeued Slurm job keeps its job id, so its place under
  FIFO priority), which puts it ahead of every job that never started; but Slurm holds a
  requeued job ``requeue_hold_s`` (default :data:`REQUEUE_HOLD_S`: its begin time is set that
  far ahead) and jobs behind it may start meanwhile. Its other nodes are free at once.
* **Completion.** A job that has trained its samples ends; its nodes are free at once.
  ``samples`` may be ``math.inf`` (an unlimited backlog): then jobs never finish and the
  figure that matters is samples trained.

* **Marks** (optional, ``marks``: :class:`~parsl_malleable.replay.engine.Marks`). A running
  job is looked at when its samples reach each count the caller names (an epoch's end, where a
  search's trial reports and its pruner may stop it, :mod:`parsl_malleable.replay.sweep`);
  a mark's answer may end the job at once: it frees its nodes and is not requeued.

The replay ends when the last job finishes or at the timeline's end (jobs still running then
keep what they trained; nothing is lost for a preemption that nobody sees). It is event driven
(idle starts and ends, completions, submits) with heaps, so two weeks of Summit replay in
seconds.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from parsl_malleable.errors import ConfigError
from parsl_malleable.replay.bounds import replay_bounds
from parsl_malleable.replay.engine import DONE_TOLERANCE, Marks
from parsl_malleable.replay.idle import IdleTimeline
from parsl_malleable.replay.result import JobOutcome, ReplayResult
from parsl_malleable.replay.workload import ReplayJob

# States of an idle interval (one node's idle period).
_PENDING, _FREE, _HELD, _ENDED = 0, 1, 2, 3

# A batch job's cold start, launch to first step: a campaign's first trial trains 18.2-27.9 s
# after its start, median 23.2 s over the 8 undisturbed runs of docs/benchmarks.md "Early
# stopping" (the worker, the rank's imports, the model; a site that imports torch from a shared
# filesystem pays 30-120 s).
STARTUP_S = 23.0
# Slurm sets a requeued job's begin time this far ahead (its requeue hold).
REQUEUE_HOLD_S = 120.0
# Pending job -> running once nodes are free: "submitted -> running (Slurm)" p90 0.42 s on the
# local cluster (docs/benchmarks.md "Node idle to first training step"); a busy site's
# backfill pass runs every 30 s (bf_interval) and costs more.
SCHEDULE_DELAY_S = 0.5
# Training between two checkpoints: one every 10 minutes (about one epoch of FreeTrain's
# ShuffleNet job on one node, 7.7 min); what a run trained since its last one is lost.
CHECKPOINT_S = 600.0


@dataclass
class _Job:
    """A job's state in the replay."""

    job: ReplayJob
    k: int
    rate: float  # samples/s on k nodes
    startup: float  # scheduling delay and start-up: held, not training
    done: float = 0.0
    node_seconds: float = 0.0
    paused_s: float = 0.0
    starts: int = 0
    first_start: float | None = None
    finished: float | None = None
    began: float | None = None  # start of the current run; None: not running
    held: list[int] = field(default_factory=list)  # idle intervals held by the current run

    def completion(self) -> float:
        """When the current run trains the last sample (inf: never)."""
        assert self.began is not None
        left = self.job.samples - self.done
        if self.rate <= 0 or math.isinf(left):
            return math.inf
        return self.began + self.startup + left / self.rate

    def stop(self, t: float, lost_s: float, checkpoint_s: float = 0.0) -> None:
        """Account the current run up to ``t``: its training to its last checkpoint (every
        ``checkpoint_s`` of it; 0: all of it), less ``lost_s`` seconds."""
        assert self.began is not None
        held = t - self.began
        working = max(0.0, held - self.startup)
        self.node_seconds += self.k * held
        self.paused_s += held - working
        kept = working - math.fmod(working, checkpoint_s) if checkpoint_s > 0 else working
        self.done = min(self.job.samples, self.done + self.rate * max(0.0, kept - lost_s))
        self.began = None

    def outcome(self) -> JobOutcome:
        """The job's line of the result."""
        return JobOutcome(
            name=self.job.name,
            submit=self.job.submit,
            admitted=self.first_start,
            first_start=self.first_start,
            finished=self.finished,
            samples=self.job.samples,
            trained=self.done,
            # What the held node-time gives at k nodes with no start-up (the engine's ideal).
            ideal=self.node_seconds / self.k * self.rate,
            node_seconds=self.node_seconds,
            single_node_rate=self.job.curve(1),
            rescales=max(0, self.starts - 1),
            paused_s=self.paused_s,
        )


class _Scavenger:
    """One replay; :meth:`run` returns its end time."""

    def __init__(
        self,
        timeline: IdleTimeline,
        jobs: list[_Job],
        lost_on_preempt_s: float,
        marks: Marks | None = None,
        *,
        checkpoint_s: float = 0.0,
        requeue_hold_s: float = 0.0,
    ) -> None:
        self.tl = timeline
        self.marks = marks
        self.mark_events: list[tuple[float, int, int]] = []  # (time, job, run); lazy
        self.stopped: dict[str, float] = {}  # job -> when a mark ended it
        self.jobs = jobs
        self.lost_s = lost_on_preempt_s
        self.checkpoint_s = checkpoint_s
        self.hold_s = requeue_hold_s
        self.requeued: list[tuple[float, int]] = []  # (eligible again, job): held by Slurm
        self.interval_start: list[float] = timeline.start.tolist()
        self.interval_node: list[int] = timeline.node.tolist()
        count = len(self.interval_start)
        self.state = [_PENDING] * count
        self.owner = [-1] * count  # job index holding an interval
        self.free: list[tuple[float, int, int]] = []  # (idle since, node, interval); lazy
        self.free_count = 0
        self.waiting: list[int] = []  # heap of job indices: jobs are in FCFS order
        self.completions: list[tuple[float, int, int]] = []  # (time, job, run); lazy
        self.finished = 0

    # ------------------------------------------------------------------ nodes

    def _release(self, interval: int) -> None:
        self.state[interval] = _FREE
        self.owner[interval] = -1
        key = (self.interval_start[interval], self.interval_node[interval], interval)
        heapq.heappush(self.free, key)
        self.free_count += 1

    def _take(self, k: int) -> list[int]:
        taken: list[int] = []
        while len(taken) < k:
            interval = heapq.heappop(self.free)[2]
            if self.state[interval] == _FREE:  # else it ended while free: a stale entry
                taken.append(interval)
        self.free_count -= k
        return taken

    # ------------------------------------------------------------------- jobs

    def _start(self, index: int, t: float) -> None:
        run = self.jobs[index]
        run.held = self._take(run.k)
        for interval in run.held:
            self.state[interval] = _HELD
            self.owner[interval] = index
        run.began = t
        run.starts += 1
        if run.first_start is None:
            run.first_start = t
        done_at = run.completion()
        if math.isfinite(done_at):
            heapq.heappush(self.completions, (done_at, index, run.starts))
        self._push_mark(index)

    # ------------------------------------------------------------------ marks

    def _push_mark(self, index: int) -> None:
        """Queue when job ``index``'s current run reaches its next mark, if it has one."""
        run = self.jobs[index]
        if self.marks is None or run.began is None or run.rate <= 0:
            return
        mark = self.marks.next_mark(run.job.name)
        if mark <= run.job.samples:  # a mark past the end never comes
            left = max(0.0, mark - run.done)
            heapq.heappush(
                self.mark_events, (run.began + run.startup + left / run.rate, index, run.starts)
            )

    def _marks_until(self, t: float) -> None:
        assert self.marks is not None
        while self.mark_events and self.mark_events[0][0] <= t:
            _, index, run_number = heapq.heappop(self.mark_events)
            run = self.jobs[index]
            if run.began is None or run.starts != run_number:
                continue  # preempted or ended since
            if self.marks.reached(run.job.name, t):
                self.stopped[run.job.name] = t
                run.stop(t, 0.0)
                for interval in run.held:
                    if self.state[interval] == _HELD:
                        self._release(interval)
                run.held = []
                self.finished += 1  # ended: not requeued
            else:
                self._push_mark(index)

    def _end_run(self, index: int, t: float, lost_s: float, preempted: bool = False) -> None:
        """Stop job ``index`` at ``t``; finished if its samples are trained, else requeued
        (held ``requeue_hold_s`` after a preemption)."""
        run = self.jobs[index]
        run.stop(t, lost_s, self.checkpoint_s if preempted else 0.0)
        for interval in run.held:
            if self.state[interval] == _HELD:
                self._release(interval)
        run.held = []
        # Rounding of rate x time may leave a sliver when a completion meets an idle end.
        if run.done >= run.job.samples * (1 - DONE_TOLERANCE):
            run.done = run.job.samples
            run.finished = t
            self.finished += 1
        elif preempted and self.hold_s > 0:
            heapq.heappush(self.requeued, (t + self.hold_s, index))
        else:
            heapq.heappush(self.waiting, index)

    def _schedule(self, t: float) -> None:
        while self.waiting and self.free_count >= self.jobs[self.waiting[0]].k:
            self._start(heapq.heappop(self.waiting), t)

    # ------------------------------------------------------------------- loop

    def _complete_until(self, t: float) -> None:
        while self.completions and self.completions[0][0] <= t:
            _, index, run_number = heapq.heappop(self.completions)
            run = self.jobs[index]
            if run.began is not None and run.starts == run_number:  # else preempted since
                self._end_run(index, t, 0.0)

    def _idle_ends(self, interval: int, t: float) -> None:
        state = self.state[interval]
        self.state[interval] = _ENDED
        if state == _FREE:
            self.free_count -= 1
        elif state == _HELD:
            self._end_run(self.owner[interval], t, self.lost_s, preempted=True)

    def run(self) -> float:
        """Replay until every job is done or the timeline ends; returns when it ended."""
        tl, jobs = self.tl, self.jobs
        if not jobs:
            return tl.t0
        by_start = np.argsort(tl.start, kind="stable")
        by_end = np.argsort(tl.end, kind="stable")
        start_t, start_i = tl.start[by_start].tolist(), by_start.tolist()
        end_t, end_i = tl.end[by_end].tolist(), by_end.tolist()
        submit_t = [run.job.submit for run in jobs]
        si = ei = qi = 0
        inf = math.inf
        while True:
            t = min(
                tl.t1,
                start_t[si] if si < len(start_t) else inf,
                end_t[ei] if ei < len(end_t) else inf,
                submit_t[qi] if qi < len(jobs) else inf,
                self.completions[0][0] if self.completions else inf,
                self.mark_events[0][0] if self.mark_events else inf,
                self.requeued[0][0] if self.requeued else inf,
            )
            # A job's last mark comes before its completion at the same time.
            if self.marks is not None:
                self._marks_until(t)
            # A job done exactly when its node leaves has finished: completions come first.
            self._complete_until(t)
            if self.finished == len(jobs):
                return t
            if t >= tl.t1:
                break
            while ei < len(end_t) and end_t[ei] <= t:
                self._idle_ends(end_i[ei], t)
                ei += 1
            if self.finished == len(jobs):  # the last one, by rounding at a preemption
                return t
            while si < len(start_t) and start_t[si] <= t:
                if self.state[start_i[si]] == _PENDING:
                    self._release(start_i[si])
                si += 1
            while qi < len(jobs) and submit_t[qi] <= t:
                heapq.heappush(self.waiting, qi)
                qi += 1
            while self.requeued and self.requeued[0][0] <= t:
                heapq.heappush(self.waiting, heapq.heappop(self.requeued)[1])
            self._schedule(t)
        for run in jobs:
            if run.began is not None:
                # The replay stops watching; the run keeps what it trained.
                run.stop(tl.t1, 0.0)
                run.held = []
        return tl.t1


def _check(nodes_per_job: int | None, **values: float | None) -> None:
    if nodes_per_job is not None and (
        isinstance(nodes_per_job, bool) or not isinstance(nodes_per_job, int) or nodes_per_job < 1
    ):
        raise ConfigError(
            f"scavenger: nodes_per_job must be a whole number >= 1, got {nodes_per_job!r}"
        )
    for name, value in values.items():
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise ConfigError(f"scavenger: {name} must be a finite number >= 0, got {value!r}")


def _size(job: ReplayJob, nodes_per_job: int | None) -> int:
    wanted = 1 if nodes_per_job is None else nodes_per_job
    return min(max(wanted, job.min_nodes), job.max_nodes)


def scavenger_replay(
    timeline: IdleTimeline,
    jobs: Sequence[ReplayJob],
    *,
    nodes_per_job: int | None = None,
    startup_s: float | None = None,
    lost_on_preempt_s: float = 0.0,
    marks: Marks | None = None,
    stopped: dict[str, float] | None = None,
    checkpoint_s: float = CHECKPOINT_S,
    requeue_hold_s: float = REQUEUE_HOLD_S,
    schedule_delay_s: float = SCHEDULE_DELAY_S,
) -> ReplayResult:
    """Replay ``jobs`` as fixed-size requeued jobs of a preemptable partition (module docstring).

    ``nodes_per_job``: the size of every job (default 1), clamped to each job's bounds;
    ``startup_s``: seconds each start costs (start-up and checkpoint restore; default each
    job's ``startup_s``, else :data:`STARTUP_S`); ``checkpoint_s``: a run checkpoints every
    that many seconds of training, and a preemption loses what it trained since its last one
    (0: a checkpoint at the signal); ``lost_on_preempt_s``: seconds of training lost at each
    preemption besides; ``requeue_hold_s``: a preempted job is eligible again that long after;
    ``schedule_delay_s``: each start holds its nodes that long before its start-up begins;
    ``marks``: sample counts at which a running job is looked at, and perhaps ended (module
    docstring); ``stopped``, if given, gets each job a mark ended and when. A negative or
    non-finite value raises :class:`~parsl_malleable.errors.ConfigError`.
    """
    _check(
        nodes_per_job,
        startup_s=startup_s,
        lost_on_preempt_s=lost_on_preempt_s,
        checkpoint_s=checkpoint_s,
        requeue_hold_s=requeue_hold_s,
        schedule_delay_s=schedule_delay_s,
    )
    began = time.perf_counter()
    ordered = sorted(jobs, key=lambda j: (j.submit, j.name))
    runs = []
    for job in ordered:
        k = _size(job, nodes_per_job)
        own = job.startup_s if job.startup_s is not None else STARTUP_S
        cost = (own if startup_s is None else startup_s) + schedule_delay_s
        runs.append(_Job(job, k, job.curve(k), float(cost)))
    scavenger = _Scavenger(
        timeline,
        runs,
        lost_on_preempt_s,
        marks,
        checkpoint_s=checkpoint_s,
        requeue_hold_s=requeue_hold_s,
    )
    end = scavenger.run()
    if stopped is not None:
        stopped.update(scavenger.stopped)
    wall_s = time.perf_counter() - began
    size = nodes_per_job
    # Its own start cost is the offline bound's lead: the least a node waits here.
    bounds = replay_bounds(
        timeline, [replace(run.job, scale_up_s=run.startup) for run in runs], end
    )
    return ReplayResult(
        policy="scavenger" if size is None else f"scavenger ({size} node{'s' * (size != 1)})",
        source=timeline.source,
        t0=timeline.t0,
        t1=end,
        idle_node_seconds=bounds.idle_node_seconds,
        jobs=[run.outcome() for run in runs],
        decisions=sum(run.starts for run in runs),
        decision_s=0.0,
        fallbacks=0,
        wall_s=wall_s,
        upper_bound=bounds.upper,
        offline_bound=bounds.offline,
    )


__all__ = [
    "CHECKPOINT_S",
    "REQUEUE_HOLD_S",
    "SCHEDULE_DELAY_S",
    "STARTUP_S",
    "scavenger_replay",
]
