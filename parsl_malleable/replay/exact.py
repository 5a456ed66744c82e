"""The exact optimum of samples trained on a small replay instance, as a MILP.

What it solves. Given an idle timeline and a few jobs (:class:`ReplayJob`), the most samples
that any schedule can train by ``timeline.t1`` under the replay engine's physics
(:mod:`parsl_malleable.replay.engine`):

* a job holding a set of ``n`` nodes trains at ``job.curve(n)`` samples/s, ``n`` in
  ``[min_nodes, max_nodes]`` (or 0 nodes, training nothing), and only from its submit time;
* a node serves at most one job, and only while it is idle; when its idle interval ends it is
  taken from its job at once;
* what a change of a job's node set costs is the engine's ``physics``
  (:class:`~parsl_malleable.replay.workload.Physics`, below); nothing else costs time (no
  lead time, no noise).

**Runtime physics** (``physics.model == "runtime"``, the engine's default), with ``S`` a
node's start-up, ``R`` the regroup and ``D`` the leave pause (:meth:`Physics.costs`). A change
at a change point ``t`` that keeps ``m`` of the job's nodes, gains some and so holds ``c``:
the kept nodes train at ``curve(m)`` (nothing below ``min_nodes``) from ``t`` (from ``t + D``
if it also lost nodes) to ``t + S``, when the new nodes are up; then the whole job pauses ``R``
and trains at ``curve(c)`` from ``t + S + R``. A change that only loses nodes pauses the job
``D`` (nothing if it keeps none). This needs ``D <= S + R`` (checked: the loss's pause then
ends before the regroup's), and the kept count is exact: a binary per node for "held in both
intervals", McCormick on binaries. The cost of a change follows from the node sets alone, so
there is one pause rule (``pauses`` is FreeTrain's only).

**FreeTrain physics** (``"freetrain"``): every change of a job's node set that leaves it some
nodes pauses the whole job (it holds its nodes and trains nothing): ``scale_down_s`` when it
lost nodes, ``scale_up_s`` when it gained (a start included), both when both happened in one
step. A job that loses all its nodes pays nothing (it holds none); its next start pays
``scale_up_s``. Overlapping pauses overlap (the engine's rule once a later pause no longer
cuts an earlier one short).

**What the optimum ranges over.** The *change points* are ``t0``, ``t1``, every start and end
of an idle interval and every submit inside ``[t0, t1]``. Between two consecutive change points
the idle node set and the submitted jobs are constant, and the optimum holds one node set per
job there (binaries ``x[job, node, interval]``, and one binary per node count the job may run
at, so its rate is exact at any curve, concave or not). A job's node set changes only at
change points, and its pause there costs training at the rate of the count it then holds:
that product of the change indicators with the count binaries is linearized exactly (McCormick
on binaries). Node identity is kept, not just counts: a job whose node is taken back and who
gets an arriving one in its place has changed its node set and pays, as in the engine.

**Which pauses** (``pauses``, FreeTrain physics):

* ``"split"`` (the default): the least the engine's physics charges for going from one node set
  to another at one instant. The engine charges ``scale_down_s + scale_up_s`` when one step both
  drains and starts, but a policy may first drain *all* the job's nodes (free: it then holds
  none) and start the new set in a later step at the same instant (``scale_up_s``), so any change
  that gains nodes costs ``scale_up_s`` and one that only loses costs
  ``min(scale_down_s, scale_up_s)``. This is what bounds the policies from above.
* ``"step"``: each job's change at a change point is made in one step, as the replay's own
  policies usually do it (``scale_down_s`` / ``scale_up_s`` / their sum). At most ``"split"``.

**Attained.** The optimum is a schedule the engine can run: played through the engine by a
script (drains first, and for ``"split"`` the starts in a second pass at the same instant),
it trains exactly the MILP's samples, job by job (tested on random instances).

**Why changes only at change points.** The replay's policies may decide between change points
(``ours`` debounces 0.5 s after an event, and every policy may act after a throughput report).
Within an interval ``[a, b)`` nothing the schedule sees changes; with the other changes held,
the samples trained are piecewise linear in the time ``s`` of one change there, so the best
``s`` is at a breakpoint: ``a``, ``b``, or where its pause meets another pause or ``b``. Moving
the change to ``a`` (when the new node set trains faster) or to ``b`` (when slower) trains at
least as much: the pause is the same length, and it is charged at the rate the job then holds,
so it stays where training is slowest. Two changes that meet at one instant are one change,
which under ``"split"`` costs no more than the longer of their pauses. That is an argument, not
a proof: ``tests/replay/test_exact_optimum.py`` checks on random instances that no policy (nor
the scavenger baseline) trains more. It holds only under the engine's fixed pause rule, where a
later pause never shortens one in progress: where a later, shorter pause replaces an earlier
one, a job could grow (``scale_up_s``) and at once drop a node it did not need
(``scale_down_s``, shorter) to pay only the shorter pause, which this model does not allow.

**Instances** (:func:`check_instance` raises :class:`ValueError` otherwise):

* every interval between change points, except the last, lasts at least the longest pause
  (``scale_down_s + scale_up_s``, or ``S + R + D`` under the runtime physics, of any job), so
  no pause or start-up begun at a change point runs past the next one (the last interval's
  pauses are cut at ``t1``, which is exact);
* no job can finish by ``t1`` (``samples`` at least its best rate times the time from its submit
  to ``t1``; ``math.inf`` is fine): a job that finishes frees its nodes between change points,
  which this model does not follow;
* small: a MILP with a binary per job, node and interval. A few nodes, jobs and change points
  solve in well under a second; the size limits below keep it that way.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pulp

from parsl_malleable.allocate.solve import make_solver
from parsl_malleable.replay.idle import IdleTimeline
from parsl_malleable.replay.workload import Physics, ReplayJob

PauseRule = Literal["split", "step"]

# Beyond these the MILP stops being "small" (and the optimum stops being cheap to check).
MAX_JOBS = 6
MAX_NODES = 8
MAX_INTERVALS = 60
# A solve that runs this long is no longer "small"; it fails rather than return a non-optimum.
SOLVE_LIMIT_S = 600.0


@dataclass(frozen=True)
class ExactOptimum:
    """The optimum of one instance: samples ``trained`` in all and per job, the change points
    ``edges`` (``len(edges) - 1`` intervals) and an optimal schedule: per job, the node names
    it holds in each interval."""

    trained: float
    per_job: dict[str, float]
    edges: tuple[float, ...]
    schedule: dict[str, tuple[frozenset[str], ...]]
    pauses: PauseRule
    physics: Physics


def change_points(timeline: IdleTimeline, jobs: Sequence[ReplayJob]) -> tuple[float, ...]:
    """``t0``, ``t1`` and every idle interval's start and end and every submit in between,
    sorted and unique: between two of them nothing a schedule sees changes."""
    t0, t1 = timeline.t0, timeline.t1
    times = {t0, t1, *timeline.start.tolist(), *timeline.end.tolist()}
    times.update(job.submit for job in jobs)
    return tuple(sorted(float(t) for t in times if t0 <= t <= t1))


def check_instance(
    timeline: IdleTimeline, jobs: Sequence[ReplayJob], physics: Physics | None = None
) -> None:
    """Raise :class:`ValueError` unless the instance is one the MILP solves exactly (module
    docstring, "Instances")."""
    physics = physics or Physics()
    if not jobs:
        raise ValueError("no job")
    if len(jobs) > MAX_JOBS or timeline.nodes > MAX_NODES:
        raise ValueError(
            f"{len(jobs)} jobs on {timeline.nodes} nodes: the exact optimum is for at most "
            f"{MAX_JOBS} jobs on {MAX_NODES} nodes"
        )
    if len({job.name for job in jobs}) < len(jobs):
        raise ValueError("two jobs share a name")
    edges = change_points(timeline, jobs)
    if len(edges) - 1 > MAX_INTERVALS:
        raise ValueError(f"{len(edges) - 1} intervals; the exact optimum takes {MAX_INTERVALS}")
    costs = [physics.costs(job) for job in jobs]
    longest = max(c.startup_s + c.up_s + c.down_s for c in costs)
    if physics.model == "runtime":
        for job, c in zip(jobs, costs, strict=True):
            if c.down_s > c.startup_s + c.up_s:
                raise ValueError(
                    f"job {job.name!r}: its leave pause ({c.down_s:g} s) is longer than its "
                    f"start-up and regroup ({c.startup_s + c.up_s:g} s); the exact optimum "
                    "assumes it is not"
                )
    for a, b in itertools.pairwise(edges[:-1]):
        if b - a < longest:
            raise ValueError(
                f"the interval [{a:g}, {b:g}) is shorter than the longest pause ({longest:g} s): "
                "a pause started at a change point would run past the next one"
            )
    for job in jobs:
        best = max(job.curve(n) for n in range(job.min_nodes, job.max_nodes + 1))
        span = timeline.t1 - max(job.submit, timeline.t0)
        if span > 0 and job.samples < best * span:
            raise ValueError(
                f"job {job.name!r} could finish by t1 ({job.samples:g} samples < "
                f"{best:g}/s x {span:g} s); the exact optimum assumes none does"
            )


def _idle_sets(timeline: IdleTimeline, edges: Sequence[float]) -> list[list[int]]:
    """The nodes idle throughout each interval (intervals never straddle a change point, so
    the midpoint decides)."""
    sets = []
    for a, b in itertools.pairwise(edges):
        mid = 0.5 * (a + b)
        inside = (timeline.start <= mid) & (mid < timeline.end)
        sets.append(sorted({int(v) for v in timeline.node[inside]}))
    return sets


def _pause_costs(
    job: ReplayJob, length: float, pauses: PauseRule, physics: Physics
) -> tuple[float, float, float]:
    """Seconds the job trains nothing at the rate of the count it holds, in an interval of
    ``length`` after a change that only lost, only gained, or both lost and gained nodes
    (module docstring, "Runtime physics" and "Which pauses")."""
    costs = physics.costs(job)
    down, up = costs.down_s, costs.up_s
    if physics.model == "runtime":
        # Gained: the new nodes start, then the whole job regroups (the kept nodes' training
        # meanwhile is priced apart); a loss's pause ends before that (D <= S + R).
        lead = costs.startup_s + costs.up_s
        return min(down, length), min(lead, length), min(lead, length)
    if pauses == "split":
        lost, both = min(down, up), up
    else:
        lost, both = down, down + up
    # The last interval ends at t1: a pause is cut there (earlier ones are long enough).
    return min(lost, length), min(up, length), min(both, length)


def _kept_terms(
    prob: pulp.LpProblem,
    var: Callable[..., pulp.LpVariable],
    x: dict[tuple[int, int, int], pulp.LpVariable],
    j: int,
    k: int,
    job: ReplayJob,
    before: list[int],
    now: list[int],
    length: float,
) -> Callable[[pulp.LpVariable, pulp.LpVariable, Physics], list[pulp.LpAffineExpression]]:
    """The runtime physics' kept nodes: their count in interval ``k`` (nodes the job holds in
    ``k - 1`` and ``k``), exact; returns what builds their training while gained nodes start
    (module docstring, "Runtime physics")."""
    unit = pulp.LpContinuous
    both = [v for v in now if v in before and (j, v, k - 1) in x]
    kept = []
    for v in both:
        # p = x[k-1] AND x[k], exact for binaries.
        p = var(f"p_{j}_{v}_{k}", unit)
        prob += p <= x[j, v, k - 1]
        prob += p <= x[j, v, k]
        prob += p >= x[j, v, k - 1] + x[j, v, k] - 1
        kept.append(p)
    counts = range(0, min(job.max_nodes, len(both)) + 1)
    u = {m: var(f"u_{j}_{m}_{k}") for m in counts}
    prob += pulp.lpSum(u.values()) == 1
    prob += pulp.lpSum(kept) == pulp.lpSum(m * u[m] for m in counts)

    def build(gained: pulp.LpVariable, lost: pulp.LpVariable, physics: Physics) -> list:
        costs = physics.costs(job)
        # Kept nodes train from the change (from the loss's pause's end) until the new ones
        # are up, or the interval's end.
        span = min(costs.startup_s, length)
        short = min(span, costs.down_s)  # what a loss's pause takes from it
        terms = []
        for m in counts:
            if m < max(1, job.min_nodes):
                continue
            rate = job.curve(m)
            if rate <= 0:
                continue
            a = var(f"ka_{j}_{m}_{k}", unit)  # u[m] AND gained
            b = var(f"kb_{j}_{m}_{k}", unit)  # u[m] AND gained AND lost
            prob.addConstraint(a <= u[m])
            prob.addConstraint(a <= gained)
            prob.addConstraint(a >= u[m] + gained - 1)
            prob.addConstraint(b <= a)
            prob.addConstraint(b <= lost)
            prob.addConstraint(b >= a + lost - 1)
            terms.append(rate * (span * a - short * b))
        return terms

    return build


def _solver() -> pulp.LpSolver:
    # Optimality matters here, not speed: no gap, and a limit no small instance comes near.
    # The allocator's own factory, because HiGHS keeps one thread pool per process and a solve
    # asking for another thread count than the last fails at once: it rebuilds the pool.
    name = "highs" if pulp.HiGHS().available() else "cbc"
    return make_solver(name, time_limit=SOLVE_LIMIT_S, gap_rel=0.0, threads=1)


def exact_optimum(
    timeline: IdleTimeline,
    jobs: Sequence[ReplayJob],
    *,
    pauses: PauseRule = "split",
    physics: Physics | None = None,
) -> ExactOptimum:
    """The most samples any schedule trains on ``timeline`` by ``timeline.t1`` under the
    engine's ``physics`` (default: the engine's default; module docstring); raises
    :class:`ValueError` for an instance outside its assumptions."""
    if pauses not in ("split", "step"):
        raise ValueError(f"pauses must be 'split' or 'step', got {pauses!r}")
    physics = physics or Physics()
    runtime = physics.model == "runtime"
    check_instance(timeline, jobs, physics)
    edges = change_points(timeline, jobs)
    idle = _idle_sets(timeline, edges)
    intervals = range(len(edges) - 1)
    prob = pulp.LpProblem("exact_replay_optimum", pulp.LpMaximize)
    binary, unit = pulp.LpBinary, pulp.LpContinuous

    def var(name: str, cat: str = binary) -> pulp.LpVariable:
        return prob.add_variable(name, 0, 1, cat=cat)

    x: dict[tuple[int, int, int], pulp.LpVariable] = {}
    y: dict[tuple[int, int, int], pulp.LpVariable] = {}
    objective: list[pulp.LpAffineExpression] = []
    trained: dict[int, list[pulp.LpAffineExpression]] = {j: [] for j in range(len(jobs))}
    for j, job in enumerate(jobs):
        for k in intervals:
            if job.submit > edges[k]:  # not submitted yet (submits are change points)
                continue
            length = edges[k + 1] - edges[k]
            for v in idle[k]:
                x[j, v, k] = var(f"x_{j}_{v}_{k}")
            counts = [0, *range(job.min_nodes, min(job.max_nodes, len(idle[k])) + 1)]
            for c in counts:
                y[j, c, k] = var(f"y_{j}_{c}_{k}")
            prob += pulp.lpSum(y[j, c, k] for c in counts) == 1
            prob += pulp.lpSum(x[j, v, k] for v in idle[k]) == pulp.lpSum(
                c * y[j, c, k] for c in counts
            )
            # Change indicators: any node held before and not now (lost), or now and not
            # before (gained). A node whose interval ended counts as lost.
            before = idle[k - 1] if k > 0 else []
            lost, gained = var(f"L_{j}_{k}"), var(f"G_{j}_{k}")
            for v in before:
                if (j, v, k - 1) in x:
                    prob += lost >= x[j, v, k - 1] - x.get((j, v, k), 0)
            for v in idle[k]:
                prob += gained >= x[j, v, k] - x.get((j, v, k - 1), 0)
            p_lost, p_gained, p_both = _pause_costs(job, length, pauses, physics)
            if runtime and k > 0:
                terms_kept = _kept_terms(prob, var, x, j, k, job, before, idle[k], length)
                kept_gain = terms_kept(gained, lost, physics)
                trained[j].extend(kept_gain)
                objective.extend(kept_gain)
            terms = []
            for c in counts:
                rate = job.curve(c) if c else 0.0
                if rate <= 0:
                    continue
                sel = y[j, c, k]
                # z = sel AND lost, w = sel AND gained, zw = sel AND lost AND gained: exact
                # for binaries, so the pause costs the rate of the count actually held.
                z, w, zw = (var(f"{n}_{j}_{c}_{k}", unit) for n in ("zl", "zg", "zb"))
                for prod, ind in ((z, lost), (w, gained)):
                    prob += prod <= sel
                    prob += prod <= ind
                    prob += prod >= sel + ind - 1
                prob += zw <= z
                prob += zw <= w
                prob += zw >= z + w - sel
                # A change that both lost and gained pauses p_both, not p_lost + p_gained.
                saved = p_lost + p_gained - p_both
                terms.append(rate * (length * sel - p_lost * z - p_gained * w + saved * zw))
            trained[j].extend(terms)
            objective.extend(terms)
    for k in intervals:
        for v in idle[k]:
            holders = [x[j, v, k] for j in range(len(jobs)) if (j, v, k) in x]
            if len(holders) > 1:
                prob += pulp.lpSum(holders) <= 1
    prob += pulp.lpSum(objective)
    solver = _solver()
    status = prob.solve(solver)
    if pulp.LpStatus[status] != "Optimal" or getattr(solver, "time_limited", False):
        raise RuntimeError(f"the exact MILP ended {pulp.LpStatus[status]}, not proved optimal")
    names = timeline.names
    schedule = {
        job.name: tuple(
            frozenset(
                names[v] for v in idle[k] if (j, v, k) in x and (x[j, v, k].value() or 0) > 0.5
            )
            for k in intervals
        )
        for j, job in enumerate(jobs)
    }
    per_job = {
        job.name: float(pulp.value(pulp.lpSum(trained[j])) or 0.0) for j, job in enumerate(jobs)
    }
    return ExactOptimum(
        trained=float(sum(per_job.values())),
        per_job=per_job,
        edges=edges,
        schedule=schedule,
        pauses=pauses,
        physics=physics,
    )


def random_instance(
    rng: np.random.Generator,
    *,
    nodes: int = 4,
    jobs: int = 3,
    changes: int = 5,
    step_s: float = 100.0,
) -> tuple[IdleTimeline, list[ReplayJob]]:
    """A random small instance that :func:`exact_optimum` takes: up to ``nodes`` nodes, one
    to ``jobs`` jobs with unlimited samples, change points on a grid of ``step_s`` seconds
    (FreeTrain's pauses at most ``step_s / 2``, the runtime's start-up, regroup and leave at
    most ``3 step_s / 4`` together), about ``changes`` of them. For tests and benchmarks."""
    from parsl_malleable.allocate.curve import ScalingCurve

    slots = changes + 2
    t1 = slots * step_s
    node, start, end = [], [], []
    for v in range(nodes):
        # One or two idle intervals per node, on the grid.
        cuts = sorted(rng.choice(np.arange(slots + 1), size=4, replace=False).tolist())
        spans = [(cuts[0], cuts[1]), (cuts[2], cuts[3])]
        for a, b in spans[: int(rng.integers(1, 3))]:
            node.append(v)
            start.append(a * step_s)
            end.append(b * step_s)
    names = tuple(f"n{v}" for v in range(nodes))
    timeline = IdleTimeline.build(
        names, np.array(node), np.array(start), np.array(end), "random", 0.0, t1
    )
    out = []
    for i in range(int(rng.integers(1, jobs + 1))):
        one = float(rng.uniform(5.0, 20.0))
        # Speedups from sublinear to superlinear-then-flat: concave and non-concave curves.
        rates = np.cumsum(one * rng.uniform(0.2, 1.3, size=nodes))
        curve = ScalingCurve(tuple(range(nodes + 1)), (0.0, *(float(r) for r in rates)))
        lo = int(rng.integers(1, 3))
        hi = int(rng.integers(lo, nodes + 1))
        down = float(rng.uniform(0.0, step_s / 4))
        up = float(rng.uniform(0.0, step_s / 4))
        submit = float(rng.integers(0, slots // 2 + 1)) * step_s
        # The runtime physics' costs: a start-up, a regroup and a leave no longer than both.
        startup = float(rng.uniform(0.0, step_s / 4))
        regroup = float(rng.uniform(0.0, step_s / 8))
        leave = float(rng.uniform(0.0, startup + regroup))
        out.append(
            ReplayJob(
                f"j{i}",
                curve,
                lo,
                hi,
                up,
                down,
                math.inf,
                submit,
                startup_s=startup,
                regroup_s=regroup,
                leave_s=leave,
            )
        )
    return timeline, out


__all__ = [
    "ExactOptimum",
    "PauseRule",
    "change_points",
    "check_instance",
    "exact_optimum",
    "random_instance",
]
