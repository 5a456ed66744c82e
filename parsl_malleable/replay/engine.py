"""The replay: a simulated clock drives the controller's own code over an idle-node timeline.

Each idle interval of a node is a one-node block that the controller may use until the
interval ends; then the node is taken back at once (the native job starts on time: a replay
never delays it). Jobs are admitted first come first served, at most ``max_jobs`` at a time
(FreeTrain's replayer does the same). Between events a job trains at its true curve's rate for
the nodes it trains on. What a change of its node set costs is the ``physics``
(:class:`~parsl_malleable.replay.workload.Physics`):

* ``"runtime"`` (the default), as this project's runtime pays: a node the job gains starts
  (``startup_s``: block, worker, rank, first step) while the job's other nodes train on; once
  it is up, the whole job pauses ``regroup_s`` (its ranks meet at a new size). A job with no
  node training (a first start; a restart after it lost every node, which live stops the job
  and resumes it from its checkpoint) trains nothing until then, so it pays ``startup_s +
  regroup_s`` for all its nodes. A loss of a node that trains pauses the job ``leave_s`` if it
  keeps nodes that train (ranks leave at a commit, the rest regroup); a node lost while it
  starts costs nothing. The cost of a change follows from the nodes' states alone, not from
  how a policy splits it into steps: draining every node and starting a new set at the same
  instant is a restart (``startup_s + regroup_s``), never cheaper than keeping the nodes that
  stay. Below ``min_nodes`` nodes up, a job trains nothing.
* ``"freetrain"``: FreeTrain's model, which its published figures use: every change of the node
  set pauses the whole job (``scale_up_s`` when it gains or starts, ``scale_down_s`` when it
  loses nodes, by decision or reclaim; both when both happen in one step); a job that loses
  every node pays nothing, and its next start ``scale_up_s``.

A pause never shortens one in progress: a node lost during a start's pause does not let the job
train before the start is over. Jobs report noisy throughput every ``report_s`` seconds of
steady running, and their pauses, as ranks do live; the controller decides exactly as it does
live.

``block_walltime_s`` (optional) serves the nodes as the live provider does: each idle interval
is held by blocks of at most that walltime, one after another (:func:`~.idle.as_blocks`; a
new block is a new start for the job on it), and the controller plans with each block's
deadline, as it does live, where it cannot see when the native comes, instead of windows
predicted from the history of idle intervals.

A replay repeats exactly: the same inputs and seed give the same result on any machine under
any load, as long as no solve stops at its wall-clock limit (the policies stop solves at a
number of branch-and-bound nodes instead, :mod:`.policies`). The decisions it did stop are
counted (:attr:`Replay.time_limited`) and logged as a warning.

``marks`` (optional, :class:`Marks`) lets a caller act when a job's samples reach a count it
names (an epoch's end: :mod:`parsl_malleable.replay.sweep` reports a trial's metric there and
lets its pruner stop it): the replay stops the clock at each mark, and a mark's answer may end
the job at once (its nodes are free, as for a finished job; it never reads finished).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from parsl_malleable.allocate.solve import hit_wall_clock
from parsl_malleable.controller.core import ControllerCore, WindowSource
from parsl_malleable.controller.model import DrainRanks, JobSpec, StartRanks
from parsl_malleable.replay.bounds import replay_bounds
from parsl_malleable.replay.idle import IdleTimeline, as_blocks
from parsl_malleable.replay.policies import ReplayPolicy
from parsl_malleable.replay.predict import HistoryWindows, NodeAges
from parsl_malleable.replay.result import JobOutcome, ReplayResult
from parsl_malleable.replay.workload import JobCosts, Physics, ReplayJob

log = logging.getLogger(__name__)

# Samples short of the total that still count as done (float rounding of rate x time).
DONE_TOLERANCE = 1e-6
# Loop passes at one instant before the replay calls itself stuck: every pass there consumes an
# event, a decision or a report, so a real instant needs far fewer; a clock that never
# advances is a bug to report, not a run that never ends.
MAX_PASSES_AT_ONE_TIME = 100_000


class Marks(Protocol):
    """Sample counts at which a job is stopped to be looked at (see the module docstring)."""

    def next_mark(self, job: str) -> float:
        """The samples job ``job`` has trained at its next mark (past its samples: none)."""
        ...

    def reached(self, job: str, now: float) -> bool:
        """Job ``job`` has reached its next mark at ``now``; True ends it at once."""
        ...


@dataclass
class _Run:
    """A job's state in the replay's physics."""

    job: ReplayJob
    costs: JobCosts
    runtime: bool
    nodes: set[str] = field(default_factory=set)
    starting: dict[str, float] = field(default_factory=dict)  # node -> when it is up
    done: float = 0.0
    ideal: float = 0.0
    node_seconds: float = 0.0
    paused_until: float = -math.inf
    steady_since: float = math.inf
    admitted: float | None = None
    first_start: float | None = None
    finished: float | None = None
    rescales: int = 0
    paused_s: float = 0.0

    def up(self) -> int:
        """Nodes the job trains on (held and started)."""
        return len(self.nodes) - len(self.starting)

    def rate(self) -> float:
        if not self.runtime:
            return self.job.curve(len(self.nodes)) if self.nodes else 0.0
        up = self.up()
        return self.job.curve(up) if up >= max(1, self.job.min_nodes) else 0.0


class Replay:
    """One replay of ``jobs`` on ``timeline`` under ``policy``. :meth:`run` returns the result.

    A policy that plans with windows gets them from ``windows`` when given (job-trace mode:
    :class:`~parsl_malleable.replay.queue_windows.QueueWindows`), else from the history of
    idle intervals (:class:`~parsl_malleable.replay.predict.HistoryWindows`); with
    ``block_walltime_s``, from the blocks' deadlines only (see the module docstring).
    """

    def __init__(
        self,
        timeline: IdleTimeline,
        jobs: list[ReplayJob],
        policy: ReplayPolicy,
        *,
        max_jobs: int | None = 10,
        report_s: float = 60.0,
        noise: float = 0.05,
        seed: int = 0,
        windows: WindowSource | None = None,
        marks: Marks | None = None,
        physics: Physics | str = "runtime",
        block_walltime_s: float | None = None,
    ) -> None:
        self.physics = physics if isinstance(physics, Physics) else Physics(physics)  # type: ignore[arg-type]
        runtime = self.physics.model == "runtime"
        self.block_walltime_s = block_walltime_s
        if block_walltime_s is not None:
            timeline = as_blocks(timeline, block_walltime_s)
        self.timeline = timeline
        self.marks = marks
        self.stopped: dict[str, float] = {}  # job -> when a mark ended it
        self.policy = policy
        self.max_jobs = max_jobs
        self.report_s = report_s
        self.noise = noise
        self.rng = np.random.default_rng(seed)
        # Blocks carry deadlines (as live): no prediction from the history of idle intervals.
        history = policy.windows and windows is None and block_walltime_s is None
        self.history = HistoryWindows(policy.window_quantile) if history else None
        self.ages = NodeAges(self.history) if self.history is not None else None
        source = (windows if policy.windows else None) or self.ages
        self.core = ControllerCore(policy.core, windows=source)
        self.queue = sorted(jobs, key=lambda j: (j.submit, j.name))
        self.runs = {j.name: _Run(j, self.physics.costs(j), runtime) for j in self.queue}
        self.active: dict[str, _Run] = {}
        self.owner: dict[str, str] = {}  # node -> job running there
        self.now = timeline.t0

    # ----------------------------------------------------------------- physics

    def _advance(self, to: float) -> None:
        for run in self.active.values():
            if not run.nodes:
                continue
            held = to - self.now
            rate = run.rate()
            # A job with no node up trains nothing: its time counts as paused.
            working = max(0.0, to - max(self.now, run.paused_until)) if run.up() else 0.0
            run.ideal += run.job.curve(len(run.nodes)) * held
            run.node_seconds += len(run.nodes) * held
            run.paused_s += held - working
            run.done = min(run.job.samples, run.done + rate * working)
        self.now = to

    def _completion(self, run: _Run) -> float:
        rate = run.rate()
        if rate <= 0:
            return math.inf
        return max(self.now, run.paused_until) + (run.job.samples - run.done) / rate

    def _mark_time(self, run: _Run) -> float:
        """When ``run`` reaches its next mark (inf: no mark, or no nodes)."""
        assert self.marks is not None
        rate = run.rate()
        mark = self.marks.next_mark(run.job.name)
        if rate <= 0 or mark > run.job.samples:  # a mark past the end never comes
            return math.inf
        return max(self.now, run.paused_until) + max(0.0, mark - run.done) / rate

    def _reach_marks(self, t: float) -> None:
        """Tell the caller of every mark reached by ``t``; end the jobs it stops."""
        assert self.marks is not None
        for name, run in list(self.active.items()):
            while True:
                mark = self.marks.next_mark(name)
                if mark > run.job.samples or run.done < mark * (1 - DONE_TOLERANCE):
                    break
                if self.marks.reached(name, t):
                    self.stopped[name] = t
                    del self.active[name]
                    self.core.end_job(name, t)
                    break
                if self.marks.next_mark(name) <= mark:
                    raise ValueError(
                        f"job {name}: its next mark did not move past {mark:g} samples"
                    )

    def _spec(self, job: ReplayJob) -> JobSpec:
        given = self.policy.user_curves
        costs = self.runs[job.name].costs
        # The user's pauses are what the physics charges: a start's (a node's start-up and the
        # regroup) and a loss's. The controller's model pauses the whole job at both.
        return JobSpec(
            job.name,
            min_nodes=job.min_nodes,
            max_nodes=job.max_nodes,
            curve=job.curve if given else None,
            scale_up_s=costs.lead_s if given else None,
            scale_down_s=costs.down_s if given else None,
            samples=job.samples if math.isfinite(job.samples) else None,
            family=job.family if self.policy.share_families else None,
        )

    # ------------------------------------------------------------------ events

    def _node_leaves(self, name: str, lost: dict[str, bool]) -> None:
        self.core.block_gone(name, self.now)
        job = self.owner.pop(name, None)
        if job is not None:
            self._lose(self.active[job], name, lost)
        if self.ages is not None:
            self.ages.since.pop(name, None)

    def _node_arrives(self, name: str) -> None:
        deadline = None if self.block_walltime_s is None else self.now + self.block_walltime_s
        self.core.block_update(name, self.now, deadline=deadline)
        self.core.node_ready(name, name, self.now)
        if self.ages is not None:
            self.ages.since[name] = self.now

    @staticmethod
    def _lose(run: _Run, node: str, lost: dict[str, bool]) -> None:
        run.nodes.discard(node)
        # A node lost while it starts never joined: the job's ranks do not notice.
        if run.starting.pop(node, None) is None:
            lost[run.job.name] = True

    def _apply(self, actions: list, lost: dict[str, bool], gained: dict[str, bool]) -> None:
        for action in actions:
            run = self.active.get(action.job)
            if isinstance(action, StartRanks) and run is not None:
                run.nodes.add(action.node)
                self.owner[action.node] = action.job
                gained[action.job] = True
                if run.runtime:
                    run.starting[action.node] = self.now + run.costs.startup_s
            elif isinstance(action, DrainRanks):
                if self.owner.get(action.node) == action.job:
                    del self.owner[action.node]
                    if run is not None:
                        self._lose(run, action.node, lost)
                # Ranks leave at their next commit; the replay counts that time in the pause.
                self.core.ranks_left(action.node, self.now)

    def _next_up(self) -> float:
        """When the next starting node is up (inf: none starts)."""
        return min(
            (min(r.starting.values()) for r in self.active.values() if r.starting), default=math.inf
        )

    def _nodes_up(self, t: float) -> None:
        """Starting nodes up by ``t`` join their jobs: each such job regroups."""
        for name in sorted(self.active):
            run = self.active[name]
            ready = [node for node, when in run.starting.items() if when <= t]
            if not ready:
                continue
            restart = run.up() == 0  # nothing trained meanwhile: the whole start was a pause
            for node in ready:
                del run.starting[node]
            pause = run.costs.up_s
            self.core.report_rescale(name, "up", pause + (run.costs.startup_s if restart else 0))
            run.paused_until = max(run.paused_until, self.now + pause)
            run.steady_since = run.paused_until

    def _pause(self, lost: dict[str, bool], gained: dict[str, bool]) -> None:
        # Sorted: a set of names iterates in an order that changes between processes, and
        # the order reaches the profiler (jobs of one family share its measurements).
        for name in sorted(set(lost) | set(gained)):
            run = self.active.get(name)
            if run is None or not run.nodes:
                if run is not None:
                    run.steady_since = math.inf
                continue
            run.rescales += 1
            if run.first_start is None:
                run.first_start = self.now
            if run.runtime:
                # Gained nodes start without pausing the others (``_nodes_up`` regroups them);
                # a loss pauses the job only if nodes that train remain.
                if lost.get(name) and run.up() > 0:
                    pause = run.costs.down_s
                    self.core.report_rescale(name, "down", pause)
                    run.paused_until = max(run.paused_until, self.now + pause)
                    run.steady_since = run.paused_until
                continue
            pause = 0.0
            if lost.get(name):
                pause += run.costs.down_s
                self.core.report_rescale(name, "down", run.costs.down_s)
            if gained.get(name):
                pause += run.costs.up_s
                self.core.report_rescale(name, "up", run.costs.up_s)
            # A shorter pause (a lost node) during a longer one (a start) must not cut it
            # short: the ranks are still starting. ``_advance`` charges ``paused_s`` up to
            # whatever ``paused_until`` holds, so the accounting follows.
            run.paused_until = max(run.paused_until, self.now + pause)
            run.steady_since = run.paused_until

    def _report(self) -> float:
        """Throughput reports due now; returns when the next one is due."""
        due = math.inf
        for name, run in self.active.items():
            if not run.nodes or run.steady_since > self.now:
                due = min(due, run.steady_since + self.report_s)
                continue
            if self.now - run.steady_since >= self.report_s - 1e-9:
                # Live, the ranks that train report, at the size they train at.
                up = run.up() if run.runtime else len(run.nodes)
                if up == 0 or run.rate() <= 0:
                    run.steady_since = self.now
                    due = min(due, run.steady_since + self.report_s)
                    continue
                noisy = run.rate() * (1.0 + self.noise * self.rng.standard_normal())
                self.core.report_throughput(name, up, max(noisy, 1e-9))
                self.core.report_progress(name, run.done)
                run.steady_since = self.now
            due = min(due, run.steady_since + self.report_s)
        return due

    def _room(self) -> bool:
        """Whether another submitted job may be admitted (``max_jobs=None``: always; the
        allocator then decides which of them run, see docs/replay.md "Admission")."""
        return self.max_jobs is None or len(self.active) < self.max_jobs

    # -------------------------------------------------------------------- loop

    def run(self) -> ReplayResult:
        """Replay until every job is done or the timeline ends."""
        began = time.perf_counter()
        tl = self.timeline
        names = tl.names
        starts = np.argsort(tl.start, kind="stable")
        ends = np.argsort(tl.end, kind="stable")
        si = ei = qi = 0
        next_report = math.inf
        passes_here = 0
        while True:
            candidates = [tl.t1]
            if si < len(starts):
                candidates.append(tl.start[starts[si]])
            if ei < len(ends):
                candidates.append(tl.end[ends[ei]])
            if qi < len(self.queue) and self._room():
                candidates.append(max(self.now, self.queue[qi].submit))
            candidates.extend(self._completion(r) for r in self.active.values())
            candidates.append(self._next_up())
            if self.marks is not None:
                candidates.extend(self._mark_time(r) for r in self.active.values())
            due = self.core.next_due(self.now)
            if due is not None:
                candidates.append(due)
            candidates.append(next_report)
            t = max(self.now, min(candidates))
            passes_here = passes_here + 1 if t == self.now else 0
            if passes_here > MAX_PASSES_AT_ONE_TIME:
                raise RuntimeError(
                    f"replay {self.policy.name}: the clock has not moved from t={t} in "
                    f"{MAX_PASSES_AT_ONE_TIME} passes (a bug: please report it)"
                )
            self._advance(t)
            lost: dict[str, bool] = {}
            gained: dict[str, bool] = {}
            while ei < len(ends) and tl.end[ends[ei]] <= t:
                k = ends[ei]
                self._node_leaves(names[tl.node[k]], lost)
                if self.history is not None:
                    self.history.observe(float(tl.end[k] - tl.start[k]))
                ei += 1
            while si < len(starts) and tl.start[starts[si]] <= t:
                k = starts[si]
                if tl.end[k] > t:
                    self._node_arrives(names[tl.node[k]])
                si += 1
            self._nodes_up(t)
            if self.marks is not None:
                self._reach_marks(t)
            for name, run in list(self.active.items()):
                if run.done >= run.job.samples * (1 - DONE_TOLERANCE):
                    run.finished = t
                    run.done = run.job.samples
                    del self.active[name]
                    self.core.end_job(name, t)
            while qi < len(self.queue) and self._room():
                job = self.queue[qi]
                if job.submit > t:
                    break
                run = self.runs[job.name]
                run.admitted = t
                self.active[job.name] = run
                self.core.add_job(self._spec(job), t)
                qi += 1
            next_report = self._report()
            for _ in range(4):
                actions = self.core.step(t)
                if not actions:
                    break
                self._apply(actions, lost, gained)
            self._pause(lost, gained)
            finished = qi >= len(self.queue) and not self.active
            if t >= tl.t1 or finished:
                break
        if self.time_limited:
            log.warning(
                "replay %s: %d of %d decisions stopped at the solver's wall-clock limit: "
                "this replay depends on the machine's speed",
                self.policy.name,
                self.time_limited,
                len(self.core.decisions),
            )
        return self._result(time.perf_counter() - began)

    @property
    def time_limited(self) -> int:
        """Decisions so far whose solve its wall-clock limit stopped: 0 for a replay that
        repeats exactly (see the module docstring)."""
        return sum(hit_wall_clock(d.message) for d in self.core.decisions)

    def _result(self, wall_s: float) -> ReplayResult:
        end = self.now
        outcomes = [
            JobOutcome(
                name=r.job.name,
                submit=r.job.submit,
                admitted=r.admitted,
                first_start=r.first_start,
                finished=r.finished,
                samples=r.job.samples,
                trained=r.done,
                ideal=r.ideal,
                node_seconds=r.node_seconds,
                single_node_rate=r.job.curve(1),
                rescales=r.rescales,
                paused_s=r.paused_s,
            )
            for r in self.runs.values()
        ]
        decisions = self.core.decisions
        # The offline bound's lead is the least time a node waits under this physics.
        bounds = replay_bounds(self.timeline, self.physics.bound_jobs(self.queue), end)
        return ReplayResult(
            policy=self.policy.name,
            source=self.timeline.source,
            t0=self.timeline.t0,
            t1=end,
            idle_node_seconds=bounds.idle_node_seconds,
            jobs=outcomes,
            decisions=len(decisions),
            decision_s=sum(d.seconds for d in decisions),
            fallbacks=sum(d.fallback for d in decisions),
            wall_s=wall_s,
            time_limited=self.time_limited,
            upper_bound=bounds.upper,
            offline_bound=bounds.offline,
        )


def replay(
    timeline: IdleTimeline, jobs: list[ReplayJob], policy: ReplayPolicy, **options: object
) -> ReplayResult:
    """Run one replay (see :class:`Replay` for ``options``)."""
    return Replay(timeline, jobs, policy, **options).run()  # type: ignore[arg-type]


__all__ = ["Marks", "Replay", "replay"]
