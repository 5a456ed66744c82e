"""Plan a live queue with the simulator's code: planned starts, and when each free node is needed.

:func:`plan_queue` turns a scheduler snapshot (free nodes now, running jobs with expected ends,
the pending queue in priority order with time limits) into the same arrays the trace simulator
uses and runs the same event loop (:func:`parsl_malleable.sim.engine.run_schedule`) forward from
``now`` with every job lasting exactly its limit and no new arrivals. So "planned start" means
what the site's policy would do if every job used its full limit:

* ``"easy"``: jobs that fit start now; the first blocked job gets a reservation; later jobs
  backfill when they do not delay it; and so on at each planned end.
* ``"conservative"``: every job's reservation in priority order.
* ``"fcfs"``: strict order.

Nodes are handed out lowest id first in ``node_order`` (default: the free nodes in the order
given, then the running jobs' nodes in the order given), the simulator's rule, so a free node's
"time until needed" is the planned start of the first job placed on it.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from parsl_malleable.errors import SnapshotError
from parsl_malleable.sim.engine import POLICIES, run_schedule
from parsl_malleable.sim.trace_replay import MIN_PLAN_SECONDS, SimulationError


@dataclass(frozen=True)
class QueuePlan:
    """The plan for a pending queue, from :func:`plan_queue`.

    ``starts``/``ends``: absolute planned start/end per pending job, in the order given
    (``inf`` when the job never starts in the plan: it is larger than the machine, or waits
    behind nodes that are never freed). ``nodes``: planned node ids per job (empty when never).
    ``node_needed``: for each node free now, seconds from ``now`` until a planned job takes it
    (``inf``: the plan never needs it).
    """

    now: float
    policy: str
    starts: np.ndarray
    ends: np.ndarray
    nodes: list[list[Hashable]]
    node_needed: dict[Hashable, float]

    def waits(self) -> np.ndarray:
        """Planned wait of each pending job from ``now`` (seconds, ``inf`` when never)."""
        return self.starts - self.now


def plan_queue(
    now: float,
    free_node_ids: Sequence[Hashable],
    running_ends: Sequence[tuple[float, Sequence[Hashable]]],
    pending: Sequence[tuple[int, float | None]],
    policy: str = "easy",
    *,
    default_limit: float | None = None,
    node_order: Sequence[Hashable] | None = None,
) -> QueuePlan:
    """Plan ``pending`` (``(nodes, time limit)`` in priority order) from a snapshot at ``now``.

    ``running_ends`` lists ``(expected end, node ids)`` of running jobs; an end at or before
    ``now`` (an overdue job) counts as ending now, ``inf`` as never (use that for down or
    reserved nodes). A pending job without a limit uses ``default_limit``, else runs forever.
    Raises :class:`SnapshotError` for a node listed twice, a job asking for no nodes, or a
    negative limit.
    """
    if policy not in POLICIES:
        raise SimulationError(f"unknown policy {policy!r}; choose one of {sorted(POLICIES)}")
    seen: list[Hashable] = list(free_node_ids)
    for _, ids in running_ends:
        seen.extend(ids)
    if len(set(seen)) != len(seen):
        dup = next(x for x in seen if seen.count(x) > 1)
        raise SnapshotError(f"node {dup!r} is listed twice (free and/or in several running jobs)")
    order = list(node_order) if node_order is not None else seen
    index = {name: i for i, name in enumerate(order)}
    missing = [x for x in seen if x not in index]
    if missing or len(index) != len(order):
        raise SnapshotError(f"node_order must list every node once; missing {missing[:5]}")
    n_nodes = len(order)

    running = [(float(end), ids) for end, ids in running_ends if len(ids)]
    n_pre = len(running)
    pre_ptr = np.zeros(n_pre + 1, dtype=np.int64)
    pre_ptr[1:] = np.cumsum([len(ids) for _, ids in running])
    pre_ids = np.array([index[x] for _, ids in running for x in ids], dtype=np.int64)

    k_pend = np.zeros(len(pending), dtype=np.int64)
    lim_pend = np.zeros(len(pending), dtype=np.float64)
    for i, (nodes, limit) in enumerate(pending):
        if int(nodes) < 1:
            raise SnapshotError(f"pending job {i} asks for {nodes} nodes")
        lim = default_limit if limit is None else limit
        lim = np.inf if lim is None else float(lim)
        if lim < 0:
            raise SnapshotError(f"pending job {i} has a negative time limit {lim}")
        k_pend[i] = int(nodes)
        lim_pend[i] = max(lim, MIN_PLAN_SECONDS)
    fits = k_pend <= n_nodes  # larger jobs never start and, like in Slurm, block nobody
    sel = np.flatnonzero(fits)

    pre_run = np.array([max(end - now, 0.0) for end, _ in running], dtype=np.float64)
    pre_k = np.diff(pre_ptr)
    submit = np.full(n_pre + len(sel), float(now))
    run = np.concatenate([pre_run, lim_pend[sel]])
    est = np.concatenate([np.maximum(pre_run, MIN_PLAN_SECONDS), lim_pend[sel]])
    k = np.concatenate([pre_k, k_pend[sel]])
    out = run_schedule(
        n_nodes, POLICIES[policy], submit, run, est, k, n_pre, pre_ptr, pre_ids, float(now), est
    )
    start, end, run_off, run_cnt, run_first, run_len = (
        out[0],
        out[1],
        out[4],
        out[5],
        out[6],
        out[7],
    )

    starts = np.full(len(pending), np.inf)
    ends = np.full(len(pending), np.inf)
    nodes_of: list[list[Hashable]] = [[] for _ in pending]
    needed = np.full(n_nodes, np.inf)
    for pos, i in enumerate(sel.tolist()):
        j = n_pre + pos
        if np.isnan(start[j]):
            continue
        starts[i], ends[i] = start[j], end[j]
        for r in range(run_off[j], run_off[j] + run_cnt[j]):
            f, c = int(run_first[r]), int(run_len[r])
            np.minimum(needed[f : f + c], start[j] - now, out=needed[f : f + c])
            nodes_of[i].extend(order[f : f + c])
    node_needed = {x: float(needed[index[x]]) for x in free_node_ids}
    return QueuePlan(
        now=float(now),
        policy=policy,
        starts=starts,
        ends=ends,
        nodes=nodes_of,
        node_needed=node_needed,
    )
