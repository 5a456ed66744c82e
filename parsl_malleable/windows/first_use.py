"""When will the scheduler first need each idle node? The simulator's own kernel answers.

The snapshot becomes the initial state of :func:`parsl_malleable.sim.engine.run_schedule`
(running jobs on the node ids they hold, the pending queue in priority order, all "submitted"
now) and the simulator plays the future forward with the site's policy. Plans use the limits,
exactly as the scheduler does; the *actual* durations are a separate input, so the same call
answers both "everything ends at its limit" (the naive planner) and "running jobs end at these
sampled times" (one Monte-Carlo draw of the early-end correction). The first time a job is
placed on an idle node is the end of that node's window. Nodes are numbered in snapshot order
and taken lowest id first, the simulator's rule.

A pending job with ``allowed_nodes`` is placed only there: when any job has such a set the
plan runs the masked kernel (:func:`parsl_malleable.sim.masked_engine.run_schedule_masked`),
whose reservations count the nodes each job may use; without one it runs the plain kernel, at
the plain kernel's cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from parsl_malleable.sim.eligibility import ANY, Eligibility, eligibility
from parsl_malleable.sim.engine import CONSERVATIVE, POLICIES, run_schedule
from parsl_malleable.sim.masked_engine import run_schedule_masked
from parsl_malleable.sim.trace_replay import MIN_PLAN_SECONDS
from parsl_malleable.windows.arrivals import Arrivals
from parsl_malleable.windows.runtime_model import JobKey
from parsl_malleable.windows.validate import CheckedSnapshot

# Conservative backfill books reservations per atom (nodes in the same allowed sets); its
# profile costs time and memory in proportion to the atoms. Beyond this many, the plan does not
# guess: every idle node is taken to be needed now (no window), which never delays a job.
MAX_ATOMS = 64


@dataclass
class PlanInput:
    """A checked snapshot as arrays for the simulator kernel.

    Jobs ``0 .. n_pre-1`` are the running ones (durations counted from ``now``), the rest the
    pending queue in priority order. ``idle_ids`` are the ids of the idle nodes, named
    ``idle_names``; ``cap`` is each idle node's latest possible window end (a reservation).
    ``eligibility``: the nodes each job may use, when a pending job may use only some (None:
    every job may use any node).
    """

    now: float
    policy: int
    n_nodes: int
    n_pre: int
    k: np.ndarray
    est: np.ndarray
    pre_ptr: np.ndarray
    pre_ids: np.ndarray
    idle_ids: np.ndarray
    idle_names: list[str]
    cap: np.ndarray
    running_keys: list[JobKey]
    running_starts: np.ndarray
    running_limits: np.ndarray
    pending_keys: list[JobKey]
    pending_limits: np.ndarray
    eligibility: Eligibility | None = None

    @property
    def blind(self) -> bool:
        """Whether the node sets are too many to plan (:data:`MAX_ATOMS`)."""
        elig = self.eligibility
        return elig is not None and self.policy == CONSERVATIVE and elig.n_atoms > MAX_ATOMS

    def keep_pending(self, keep: np.ndarray) -> PlanInput:
        """The same plan with only the pending jobs where ``keep`` is true."""
        every = np.concatenate([np.ones(self.n_pre, dtype=bool), np.asarray(keep, dtype=bool)])
        elig = self.eligibility
        return replace(
            self,
            k=self.k[every],
            est=self.est[every],
            eligibility=None if elig is None else elig.with_classes(elig.job_class[every]),
            pending_keys=[key for key, ok in zip(self.pending_keys, keep, strict=True) if ok],
            pending_limits=self.pending_limits[np.asarray(keep, dtype=bool)],
        )

    def naive_run(self) -> np.ndarray:
        """Actual durations when every job runs to its limit."""
        return self.est.copy()

    def run_from_ends(self, running_ends: np.ndarray, pending_runtimes: np.ndarray) -> np.ndarray:
        """Actual durations from absolute end times of running jobs and pending runtimes."""
        pre = np.maximum(np.asarray(running_ends, dtype=float) - self.now, 0.0)
        return np.concatenate([pre, np.asarray(pending_runtimes, dtype=float)])


def plan_input(checked: CheckedSnapshot) -> PlanInput:
    """Arrays for :func:`first_use` from a checked snapshot."""
    snap = checked.snapshot
    now = float(snap.now)
    ids = {name: i for i, name in enumerate(checked.usable)}
    k: list[int] = []
    est: list[float] = []
    pre_ids: list[int] = []
    pre_ptr = [0]
    keys: list[JobKey] = []
    starts: list[float] = []
    limits: list[float] = []
    for job, limit in zip(checked.running, checked.running_limits, strict=True):
        held = [ids[n] for n in job.nodes if n in ids]
        if not held:  # only on down nodes: it frees nothing the plan could use
            continue
        pre_ids.extend(held)
        pre_ptr.append(len(pre_ids))
        k.append(len(held))
        est.append(max(job.start + limit - now, MIN_PLAN_SECONDS))
        keys.append(JobKey(len(job.nodes), job.partition, job.user))
        starts.append(job.start)
        limits.append(limit)
    n_pre = len(k)
    pending_keys: list[JobKey] = []
    allowed: list[np.ndarray | None] = [None] * n_pre
    # a queue's jobs share one set: map each distinct set to node ids once
    known: dict[frozenset[str], np.ndarray] = {}
    for queued, limit in zip(checked.pending, checked.pending_limits, strict=True):
        k.append(queued.num_nodes)
        est.append(max(limit, MIN_PLAN_SECONDS))
        pending_keys.append(JobKey(queued.num_nodes, queued.partition, queued.user))
        names = queued.allowed_nodes
        if names is not None and names not in known:
            known[names] = np.array([ids[n] for n in names if n in ids], dtype=np.int64)
        allowed.append(None if names is None else known[names])
    elig = _eligibility(checked, allowed)
    idle_names = [n for n in checked.idle if n in ids]
    cap = np.array([checked.reserved_from.get(n, math.inf) for n in idle_names], dtype=float)
    return PlanInput(
        now=now,
        policy=POLICIES[snap.backfill],
        n_nodes=len(checked.usable),
        n_pre=n_pre,
        k=np.asarray(k, dtype=np.int64),
        est=np.asarray(est, dtype=np.float64),
        pre_ptr=np.asarray(pre_ptr, dtype=np.int64),
        pre_ids=np.asarray(pre_ids, dtype=np.int64),
        idle_ids=np.asarray([ids[n] for n in idle_names], dtype=np.int64),
        idle_names=idle_names,
        cap=cap,
        running_keys=keys,
        running_starts=np.asarray(starts, dtype=float),
        running_limits=np.asarray(limits, dtype=float),
        pending_keys=pending_keys,
        pending_limits=np.asarray([max(x, MIN_PLAN_SECONDS) for x in checked.pending_limits]),
        eligibility=elig,
    )


def _eligibility(checked: CheckedSnapshot, allowed: list[np.ndarray | None]) -> Eligibility | None:
    """The jobs' node sets as the masked kernel takes them; None when no job is restricted
    (the plain kernel then runs, at its own cost)."""
    if all(ids is None for ids in allowed):
        return None
    elig = eligibility(len(checked.usable), allowed)
    if not elig.restricted:
        return None
    if POLICIES[checked.snapshot.backfill] == CONSERVATIVE and elig.n_atoms > MAX_ATOMS:
        checked.notes.append(
            f"pending jobs' node sets split the nodes into {elig.n_atoms} groups, more than "
            f"the {MAX_ATOMS} that conservative planning handles: no idle node is offered"
        )
    return elig


def first_use(plan: PlanInput, run: np.ndarray, arrivals: Arrivals | None = None) -> np.ndarray:
    """Absolute time at which the schedule first places a job on each idle node (``inf``:
    never), when the jobs actually last ``run`` seconds from now (pending: from their start)
    and ``arrivals`` are submitted later; capped by reservations. A node taken *now* gets
    ``now``: it is not a hole."""
    return first_use_and_starts(plan, run, arrivals)[0]


def first_use_and_starts(
    plan: PlanInput, run: np.ndarray, arrivals: Arrivals | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`first_use`, and the planned start of every job of ``plan`` (``inf``: never)."""
    if plan.n_nodes == 0 or len(plan.idle_ids) == 0:
        return np.full(len(plan.idle_ids), math.inf), np.full(len(plan.k), math.inf)
    if plan.blind:
        return np.full(len(plan.idle_ids), plan.now), np.full(len(plan.k), plan.now)
    submit = np.full(len(plan.k), plan.now)
    run = np.asarray(run, dtype=np.float64)
    est, k = plan.est, plan.k
    if arrivals is not None and len(arrivals):
        fits = (arrivals.nodes <= plan.n_nodes) & (arrivals.submit >= plan.now)
        submit = np.concatenate([submit, arrivals.submit[fits]])
        run = np.concatenate([run, arrivals.runtime[fits]])
        est = np.concatenate([est, np.maximum(arrivals.walltime[fits], MIN_PLAN_SECONDS)])
        k = np.concatenate([k, arrivals.nodes[fits].astype(np.int64)])
    n, policy, n_pre, pre_ptr, pre_ids, now = (
        plan.n_nodes, plan.policy, plan.n_pre, plan.pre_ptr, plan.pre_ids, plan.now
    )  # fmt: skip
    if plan.eligibility is None:
        out = run_schedule(n, policy, submit, run, est, k, n_pre, pre_ptr, pre_ids, now, est)
    else:
        elig = plan.eligibility
        # jobs that arrive later (sampled submissions) may use any node
        job_class = np.full(len(k), ANY, dtype=np.int64)
        job_class[: len(elig.job_class)] = elig.job_class
        out = run_schedule_masked(
            n, policy, submit, run, est, k, n_pre, pre_ptr, pre_ids, now, est, job_class,
            elig.class_mask, elig.class_ptr, elig.class_atoms, elig.node_atom, elig.atom_mask,
        )  # fmt: skip
    start, run_off, run_cnt, run_first, run_len = out[0], out[4], out[5], out[6], out[7]
    idle_first, idle_count, idle_s, idle_e = out[8], out[9], out[10], out[11]
    taken = np.full(plan.n_nodes, math.inf)
    # a hole that began at `now` belongs to a node idle at `now`: its end is the first use
    for h in np.flatnonzero(idle_s == plan.now):
        f, c = int(idle_first[h]), int(idle_count[h])
        np.minimum(taken[f : f + c], idle_e[h], out=taken[f : f + c])
    for j in np.flatnonzero(start[plan.n_pre :] == plan.now) + plan.n_pre:
        for r in range(run_off[j], run_off[j] + run_cnt[j]):
            taken[run_first[r] : run_first[r] + run_len[r]] = plan.now
    starts = np.where(np.isnan(start[: len(plan.k)]), math.inf, start[: len(plan.k)])
    return np.minimum(taken[plan.idle_ids], plan.cap), starts
