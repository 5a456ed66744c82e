"""What one sample of a running campaign holds: per job and for the whole site."""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass
from typing import Any

from parsl_malleable.snapshot import NodeState, Snapshot


@dataclass(frozen=True)
class SiteCounts:
    """Nodes of the site at one instant: held by native jobs, harvested (in our blocks), of
    those the ones training a job, and idle (nobody holds them)."""

    total: int
    native: int
    harvested: int
    training: int
    idle: int

    def as_dict(self) -> dict[str, int]:
        """The counts by name."""
        return asdict(self)


def site_counts(snapshot: Snapshot | None, training: int) -> SiteCounts | None:
    """Counts from the provider's last snapshot; None before the first poll."""
    if snapshot is None:
        return None
    ours = {n for job in snapshot.running if job.ours for n in job.nodes}
    native = {n for job in snapshot.running if not job.ours for n in job.nodes} - ours
    idle = sum(1 for n in snapshot.nodes if n.state is NodeState.IDLE and n.name not in ours)
    return SiteCounts(
        total=len(snapshot.nodes),
        native=len(native),
        harvested=len(ours),
        training=min(training, len(ours)),
        idle=idle,
    )


def job_sample(state: dict[str, Any], epochs: list[dict[str, Any]]) -> dict[str, Any]:
    """One job's sample from the controller's state entry and the coordinator's epochs.

    ``rescales`` counts epochs whose world size differs from the previous epoch's (a restart at
    the same size after a lost rank is a recovery, not a rescale).
    """
    nodes = int(state.get("nodes", 0))
    rates = state.get("throughput", {})
    rescales = sum(1 for a, b in itertools.pairwise(epochs) if a["world_size"] != b["world_size"])
    return {
        "nodes": nodes,
        "world": int(state.get("world_size", 0)),
        "rate": rates.get(nodes) if nodes else None,
        "node_names": list(state.get("node_names", [])),
        "step": state.get("step"),
        "rescales": rescales,
    }
