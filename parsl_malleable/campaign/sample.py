"""What one sample of a running campaign holds: per job and for the whole site."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from parsl_malleable.snapshot import NodeState, Snapshot

# One row of the ``site_samples`` table (:meth:`~.store.CampaignStore.site_samples`): ``(t, run,
# total, native, harvested, assigned, idle, stepping_s)``; ``stepping_s`` is None in rows
# written before steps were counted.
SiteSample = tuple[float, int, int, int, int, int, int, float | None]


@dataclass(frozen=True)
class SiteCounts:
    """Nodes of the site at one instant: held by native jobs, harvested (in our blocks), of
    those the ones the controller has given to a job (``assigned``: its ranks run there or are
    starting), and idle (nobody holds them). ``stepping_s`` is the node-seconds spent in
    training steps since the previous sample (the ranks' own steps, from the controller's
    phase log), ``stepping`` the same as a mean number of nodes over that interval; both None
    when the controller does not count steps."""

    total: int
    native: int
    harvested: int
    assigned: int
    idle: int
    stepping_s: float | None = None
    stepping: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """The counts by name."""
        return asdict(self)

    def harvest_text(self) -> str:
        """``12 harvested, 10 with ranks, 8.4 stepping``: our nodes, those given to jobs, and
        the mean number in training steps over the last interval (``steps not counted``
        without a figure)."""
        stepping = "steps not counted"
        if self.stepping is not None:
            stepping = f"{self.stepping:.1f} stepping"
        return f"{self.harvested} harvested, {self.assigned} with ranks, {stepping}"


def site_counts(
    snapshot: Snapshot | None,
    assigned: int,
    stepping_s: float | None = None,
    interval_s: float = 0.0,
) -> SiteCounts | None:
    """Counts from the provider's last snapshot, ``assigned`` nodes held by jobs and
    ``stepping_s`` node-seconds in training steps over the last ``interval_s`` seconds; None
    before the first poll."""
    if snapshot is None:
        return None
    ours = {n for job in snapshot.running if job.ours for n in job.nodes}
    native = {n for job in snapshot.running if not job.ours for n in job.nodes} - ours
    idle = sum(1 for n in snapshot.nodes if n.state is NodeState.IDLE and n.name not in ours)
    stepping = None
    if stepping_s is not None:
        stepping = stepping_s / interval_s if interval_s > 0 else 0.0
    return SiteCounts(
        total=len(snapshot.nodes),
        native=len(native),
        harvested=len(ours),
        assigned=min(assigned, len(ours)),
        idle=idle,
        stepping_s=stepping_s,
        stepping=stepping,
    )


def stepping_nodes(samples: Sequence[SiteSample]) -> list[float | None]:
    """Per site sample, the mean number of nodes in training steps from it to the next sample
    of its run (what the sample stands for in the node-time sums and the pictures); None where
    it is not known (rows from before steps were counted).

    A row's ``stepping_s`` counts the interval that *ends* at it, so each sample takes the next
    row's; the last sample of a run, which has no next one, keeps the rate of its own interval.
    """
    out: list[float | None] = []
    for i, sample in enumerate(samples):
        after = samples[i + 1] if i + 1 < len(samples) else None
        before = samples[i - 1] if i > 0 else None
        if after is not None and after[1] == sample[1] and after[0] > sample[0]:
            seconds, span = after[7], after[0] - sample[0]
        elif before is not None and before[1] == sample[1] and sample[0] > before[0]:
            seconds, span = sample[7], sample[0] - before[0]
        else:
            seconds, span = None, 0.0
        out.append(None if seconds is None or span <= 0 else seconds / span)
    return out


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


__all__ = ["SiteCounts", "SiteSample", "job_sample", "site_counts", "stepping_nodes"]
