"""Is one of our running blocks in the way of a queued native job? (the yield decision)

Plan the queue as if our running blocks were not there: their nodes become idle and are put
last in node order, so the plan takes them only when the other nodes do not suffice (the
planner places jobs on the lowest free node ids). If that plan starts a native job on a node
of one of our blocks before the block's deadline, the block delays that job: it has to go. This
is exactly the case "a running job ended early, so the pending job could start earlier", and it
also covers a newly queued job that could start at once on our nodes.

A block planned to end just before a queued job takes its nodes is in that job's way too when
its end is not sure to come first: the scheduler's own walltime check can be late (the
provider's walltime step ends it ``walltime_margin`` after its deadline) and the cancel then
takes the teardown. Such a block yields ahead of the planned start by what a yield takes (the
next poll, the grace, the teardown), so the queued job finds its nodes free on time.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from parsl_malleable.snapshot import Node, NodeState, Reservation, Snapshot
from parsl_malleable.windows.predict import WindowPredictor

# Scheduler plans are whole seconds; a first use this close to the deadline is not a delay.
DEFAULT_TOLERANCE_S = 1.0


def snapshot_without_blocks(snapshot: Snapshot, deadlines: Mapping[str, float]) -> Snapshot:
    """``snapshot`` with our running jobs in ``deadlines`` (job id -> end) gone and their
    allocated nodes idle, placed after every other node (blocks ending soonest first)."""
    ours = [j for j in snapshot.running if j.job_id in deadlines]
    freed: dict[str, float] = {}
    for job in ours:
        for name in job.nodes:
            freed[name] = deadlines[job.job_id]
    nodes: list[Node] = []
    moved: list[Node] = []
    for node in snapshot.nodes:
        if node.name in freed and node.state is NodeState.ALLOCATED:
            moved.append(dataclasses.replace(node, state=NodeState.IDLE))
        else:
            nodes.append(node)
    moved.sort(key=lambda n: freed[n.name])
    return dataclasses.replace(
        snapshot,
        nodes=nodes + moved,
        running=[j for j in snapshot.running if j.job_id not in deadlines],
        pending=[j for j in snapshot.pending if not j.ours],
    )


def first_native_use(snapshot: Snapshot, deadlines: Mapping[str, float]) -> dict[str, float]:
    """Per our running job: when the queue would first use one of its nodes without it."""
    freed = snapshot_without_blocks(snapshot, deadlines)
    windows = WindowPredictor(model=None, samples=0).node_windows(freed)
    use = {
        name: freed.now + length for name, length in zip(windows.names, windows.naive, strict=True)
    }
    idle_now = {n.name for n in freed.nodes if n.state is NodeState.IDLE}
    out: dict[str, float] = {}
    for job in snapshot.running:
        if job.job_id not in deadlines:
            continue
        first = math.inf
        for name in job.nodes:
            if name in use:
                first = min(first, use[name])
            elif name in idle_now:
                first = freed.now  # not a hole: a queued job takes it at once
        out[job.job_id] = first
    return out


def blocks_in_the_way(
    snapshot: Snapshot,
    deadlines: Mapping[str, float],
    *,
    tolerance_s: float = DEFAULT_TOLERANCE_S,
    lead_s: float = 0.0,
    overrun_s: float = 0.0,
    first: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """Our running jobs (of ``deadlines``: job id -> walltime end) that delay a queued native
    job, with the time that job could use their nodes: a use before the deadline, or one
    before the block surely leaves on its own (its deadline + ``overrun_s``) that is due
    within ``lead_s`` (a yield begun any later would leave the nodes late). ``first``: the
    :func:`first_native_use` of this snapshot when the caller has it already."""
    if not deadlines:
        return {}
    if first is None:
        first = first_native_use(snapshot, deadlines)
    out: dict[str, float] = {}
    for job_id, when in first.items():
        end = deadlines[job_id]
        before_end = when < end - tolerance_s
        too_close = when < end + overrun_s and when <= snapshot.now + lead_s
        if before_end or too_close:
            out[job_id] = when
    return out


# An administrator took the node out of service: the block leaves at once, whatever the queue.
UNAVAILABLE = (NodeState.DRAINED, NodeState.DOWN)


def blocks_on_unavailable_nodes(snapshot: Snapshot, job_ids: set[str]) -> dict[str, str]:
    """Our running jobs (of ``job_ids``) holding a node that is drained, draining or down,
    with the scheduler's word for it (``n3 drained``)."""
    state = {n.name: n.state for n in snapshot.nodes}
    out: dict[str, str] = {}
    for job in snapshot.running:
        if job.job_id not in job_ids:
            continue
        bad = [f"{n} {state[n].value}" for n in job.nodes if state.get(n) in UNAVAILABLE]
        if bad:
            out[job.job_id] = ", ".join(bad)
    return out


def reservation_in_the_way(
    snapshot: Snapshot, nodes: tuple[str, ...], until: float
) -> Reservation | None:
    """The first reservation that takes one of ``nodes`` before ``until`` (None: none does),
    so a yield can say it leaves for a reservation rather than for a queued job."""
    held = set(nodes)
    hits = [r for r in snapshot.reservations if r.start < until and held & set(r.nodes)]
    return min(hits, key=lambda r: r.start) if hits else None


__all__ = [
    "UNAVAILABLE",
    "blocks_in_the_way",
    "blocks_on_unavailable_nodes",
    "first_native_use",
    "reservation_in_the_way",
    "snapshot_without_blocks",
]
