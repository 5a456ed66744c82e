"""Which blocks to submit now: windows of the idle nodes, cut into blocks for a demand.

The windows come from :class:`~parsl_malleable.windows.predict.WindowPredictor` on the
snapshot with our own *pending* blocks left out (they are ours to withdraw, not jobs the
scheduler must serve; our *running* blocks stay: they hold their nodes until their limits).
A node's usable window is the naive one (every job runs to its limit, which is what the
scheduler itself plans with, so a block inside it can never delay a queued job) shortened to
the predicted quantile when a learned model is given (a native job that ends early makes us
yield, and a shorter block avoids that). Blocks are sized by the allocator's
:func:`~parsl_malleable.allocate.blocks.size_blocks_for_demand`. In preemption mode (the site
preempts blocks for native jobs) every idle node's window is the longest block.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection

import numpy as np

from parsl_malleable.allocate.blocks import size_blocks_for_demand
from parsl_malleable.allocate.result import BlockRequest
from parsl_malleable.allocate.spec import NodeWindow
from parsl_malleable.harvest.site_profile import SiteProfile
from parsl_malleable.snapshot import Snapshot
from parsl_malleable.windows.predict import WindowPredictor
from parsl_malleable.windows.window import Window, group_windows


def without_our_pending(snapshot: Snapshot) -> Snapshot:
    """``snapshot`` without our own pending blocks."""
    return dataclasses.replace(snapshot, pending=[j for j in snapshot.pending if not j.ours])


def harvest_windows(
    snapshot: Snapshot,
    profile: SiteProfile,
    predictor: WindowPredictor,
    *,
    exclude: Collection[str] = (),
    min_block_s: float | None = None,
) -> list[Window]:
    """Windows of the idle nodes that blocks may use (:func:`block_nodes`), grouped, at most a
    block long; nodes in ``exclude`` (already promised to a block of ours) are left out, and
    windows shorter than ``min_block_s`` (default: the profile's floor) plus the margin."""
    shortest = profile.block_floor_s(profile.startup_s) if min_block_s is None else min_block_s
    snap = without_our_pending(snapshot)
    nw = predictor.node_windows(snap)
    if not nw.names:
        return []
    lengths = nw.naive
    samples = None
    if nw.samples.shape[0]:
        lengths = np.minimum(nw.naive, nw.length(profile.quantile))
        samples = nw.samples
    allowed = block_nodes(snap, profile)
    skip = set(exclude)
    keep = np.array(
        [(allowed is None or name in allowed) and name not in skip for name in nw.names],
        dtype=bool,
    )
    if not keep.any():
        return []
    names = [n for n, k in zip(nw.names, keep, strict=True) if k]
    cap = profile.max_walltime_s + profile.safety_margin_s
    if profile.preemption != "none":
        # Slurm takes a preemptable block back the moment a native job needs its nodes, so
        # a block need not end before the predicted window does: every node idle now is a
        # window as long as the longest block.
        lengths = np.where(nw.naive > 0, cap, 0.0)
        samples = None
    lengths = np.minimum(lengths[keep], cap)
    if samples is not None:
        samples = np.minimum(samples[:, keep], cap)
    return group_windows(
        names,
        lengths,
        samples,
        nw.now,
        abs_tol=profile.group_tolerance_s,
        min_length=shortest + profile.safety_margin_s,
    )


def plan_blocks(
    snapshot: Snapshot,
    demand_nodes: int,
    profile: SiteProfile,
    predictor: WindowPredictor,
    *,
    windows: list[Window] | None = None,
    min_block_s: float | None = None,
) -> list[BlockRequest]:
    """Blocks (nodes, walltime, node ids) for up to ``demand_nodes`` nodes, longest windows
    first; blocks smaller than ``profile.min_nodes_per_block`` or shorter than ``min_block_s``
    (default: the profile's floor) are dropped."""
    if demand_nodes <= 0:
        return []
    shortest = profile.block_floor_s(profile.startup_s) if min_block_s is None else min_block_s
    if windows is None:
        windows = harvest_windows(snapshot, profile, predictor, min_block_s=shortest)
    node_windows = [NodeWindow.ending_at(w.nodes, w.end, snapshot.now) for w in windows]
    requests = size_blocks_for_demand(
        demand_nodes,
        node_windows,
        min_useful_s=shortest,
        safety_margin_s=profile.safety_margin_s,
        granularity_s=profile.granularity_s,
        max_nodes_per_block=profile.max_nodes_per_block,
    )
    return [r for r in requests if r.nodes >= profile.min_nodes_per_block]


def block_destination(snapshot: Snapshot, profile: SiteProfile) -> str | None:
    """Where the profile's blocks go: its partition (Slurm, emulated) or queue (PBS), else
    the scheduler's default one when the snapshot says which (None: unknown)."""
    return profile.destination or snapshot.default_partition


def block_nodes(snapshot: Snapshot, profile: SiteProfile) -> set[str] | None:
    """Names of the nodes a block may use: those whose ``partitions`` (the Slurm partitions
    or PBS queues whose jobs may run there) include the blocks' destination; None (any
    node) when the destination is unknown. A block planned on a node its partition or
    queue cannot use never starts there: PBS keeps it queued ("Can Never Run") until it is
    withdrawn, and the next poll would plan the same again."""
    where = block_destination(snapshot, profile)
    if not where:
        return None
    return {node.name for node in snapshot.nodes if where in node.partitions}


__all__ = [
    "block_destination",
    "block_nodes",
    "harvest_windows",
    "plan_blocks",
    "without_our_pending",
]
