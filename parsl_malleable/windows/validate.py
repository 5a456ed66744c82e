"""Checking a scheduler snapshot before planning, and resolving what it leaves open.

Inconsistencies that make any plan meaningless (a node in two jobs, an idle node that a
running job holds, a negative limit) raise :class:`SnapshotError` naming the job or node.
Situations that a live scheduler really shows are resolved and listed in
:attr:`CheckedSnapshot.notes` instead:

- a job without a limit gets ``Snapshot.default_time_limit``; without one it is unlimited;
- a running job past its limit (grace time, being killed) is taken to end now;
- down, drained and reserved nodes are neither holes nor usable by the plan;
- an allocated node that no listed job holds never frees (it belongs to something unseen);
- a pending job larger than the usable nodes of its partition is skipped: it cannot start
  (Slurm leaves it pending with reason PartitionNodeLimit) and must not block the queue;
- so is a pending job that asks for more nodes than its ``allowed_nodes`` hold usable ones
  (its queue's vnodes are down, or too few satisfy its ``select``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from parsl_malleable.errors import SnapshotError
from parsl_malleable.sim.engine import POLICIES
from parsl_malleable.snapshot import NodeState, PendingJob, RunningJob, Snapshot

UNUSABLE = (NodeState.DOWN, NodeState.DRAINED, NodeState.RESERVED)


@dataclass
class CheckedSnapshot:
    """A snapshot that passed the checks, with every open value resolved.

    ``usable``: names of nodes the plan may use (idle or allocated, not down), in snapshot
    order; ``idle``: the usable idle nodes; ``running``/``running_limits``: jobs on usable nodes
    and their resolved limits (``inf`` = unlimited); ``pending``/``pending_limits``: the jobs that
    can ever start, in priority order; ``skipped``: ``(job_id, reason)`` of the others;
    ``reserved_from``: per idle node, the earliest start of a reservation that takes it.
    """

    snapshot: Snapshot
    usable: list[str]
    idle: list[str]
    running: list[RunningJob]
    running_limits: list[float]
    pending: list[PendingJob]
    pending_limits: list[float]
    skipped: list[tuple[str, str]] = field(default_factory=list)
    reserved_from: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _limit(job: RunningJob | PendingJob, default: float | None, notes: list[str]) -> float:
    limit = job.time_limit
    if limit is None:
        if default is not None:
            notes.append(f"job {job.job_id}: no time limit, using the default {default:g} s")
            return float(default)
        notes.append(f"job {job.job_id}: no time limit and no default: unlimited")
        return math.inf
    if not (isinstance(limit, int | float) and limit > 0) or math.isnan(limit):
        raise SnapshotError(f"job {job.job_id}: time limit {limit!r} is not a positive number")
    return float(limit)


def check_snapshot(snapshot: Snapshot) -> CheckedSnapshot:
    """Validate ``snapshot`` and resolve limits, unusable nodes and impossible jobs."""
    now = snapshot.now
    if not math.isfinite(now):
        raise SnapshotError(f"snapshot time {now!r} is not finite")
    default = snapshot.default_time_limit
    if default is not None and not default > 0:
        raise SnapshotError(f"default_time_limit {default!r} is not a positive number")
    if snapshot.backfill not in POLICIES:
        raise SnapshotError(f"backfill {snapshot.backfill!r} is not one of {sorted(POLICIES)}")

    states: dict[str, NodeState] = {}
    for node in snapshot.nodes:
        if node.name in states:
            raise SnapshotError(f"node {node.name!r} is listed twice")
        states[node.name] = node.state
    notes: list[str] = []

    holder: dict[str, str] = {}
    running: list[RunningJob] = []
    running_limits: list[float] = []
    for job in snapshot.running:
        if not job.nodes:
            raise SnapshotError(f"running job {job.job_id} holds no nodes")
        if not math.isfinite(job.start) or job.start > now:
            raise SnapshotError(
                f"running job {job.job_id} starts at {job.start!r}, after the snapshot ({now})"
            )
        for name in job.nodes:
            if name not in states:
                raise SnapshotError(f"running job {job.job_id} holds unknown node {name!r}")
            if name in holder:
                raise SnapshotError(
                    f"node {name!r} is held by both job {holder[name]} and job {job.job_id}"
                )
            if states[name] is NodeState.IDLE:
                raise SnapshotError(f"node {name!r} is idle but held by job {job.job_id}")
            holder[name] = job.job_id
        limit = _limit(job, default, notes)
        if job.start + limit < now:
            notes.append(f"job {job.job_id}: past its limit, taken to end now")
            limit = now - job.start
        if any(states[n] in UNUSABLE for n in job.nodes):
            notes.append(f"job {job.job_id}: holds down or reserved nodes; they do not return")
        running.append(job)
        running_limits.append(limit)

    usable = [n.name for n in snapshot.nodes if n.state not in UNUSABLE]
    orphans = [
        n.name for n in snapshot.nodes if n.state is NodeState.ALLOCATED and n.name not in holder
    ]
    if orphans:
        notes.append(f"{len(orphans)} allocated node(s) held by no listed job never free")
        orphan_set = set(orphans)
        usable = [n for n in usable if n not in orphan_set]
    idle = [n.name for n in snapshot.nodes if n.state is NodeState.IDLE]

    usable_set = set(usable)
    partition_size = _partition_sizes(snapshot, usable_set)
    allowed_size: dict[frozenset[str], int] = {}  # a queue's jobs share one set: count it once
    pending: list[PendingJob] = []
    pending_limits: list[float] = []
    skipped: list[tuple[str, str]] = []
    for queued in snapshot.pending:
        if queued.num_nodes <= 0:
            raise SnapshotError(f"pending job {queued.job_id} asks for {queued.num_nodes} nodes")
        limit = _limit(queued, default, notes)
        size = partition_size.get(queued.partition, partition_size[""])
        if queued.num_nodes > size:
            where = f"partition {queued.partition!r}" if queued.partition else "the machine"
            reason = f"asks {queued.num_nodes} nodes, {where} has {size} usable"
            skipped.append((queued.job_id, reason))
            notes.append(f"job {queued.job_id}: {reason}; skipped")
            continue
        if queued.allowed_nodes is not None:
            names = queued.allowed_nodes
            if names not in allowed_size:
                allowed_size[names] = len(usable_set.intersection(names))
            allowed = allowed_size[names]
            if queued.num_nodes > allowed:
                reason = f"asks {queued.num_nodes} nodes, {allowed} of its allowed nodes are usable"
                skipped.append((queued.job_id, reason))
                notes.append(f"job {queued.job_id}: {reason}; skipped")
                continue
        pending.append(queued)
        pending_limits.append(limit)

    reserved_from: dict[str, float] = {}
    for res in snapshot.reservations:
        if not res.end > res.start:
            raise SnapshotError(f"reservation {res.name!r} ends before it starts")
        if res.end <= now:
            continue
        for name in res.nodes:
            if name not in states:
                raise SnapshotError(f"reservation {res.name!r} names unknown node {name!r}")
            reserved_from[name] = min(reserved_from.get(name, math.inf), max(res.start, now))
    return CheckedSnapshot(
        snapshot=snapshot,
        usable=usable,
        idle=idle,
        running=running,
        running_limits=running_limits,
        pending=pending,
        pending_limits=pending_limits,
        skipped=skipped,
        reserved_from={n: t for n, t in reserved_from.items() if n in set(idle)},
        notes=notes,
    )


def _partition_sizes(snapshot: Snapshot, usable: set[str]) -> dict[str, int]:
    """Usable nodes per partition name; ``""`` (no partition given) is the whole machine."""
    sizes: dict[str, int] = {"": len(usable)}
    for node in snapshot.nodes:
        if node.name in usable:
            for part in node.partitions:
                sizes[part] = sizes.get(part, 0) + 1
    return sizes
