"""What a replay measured, and the figures compared across policies.

Efficiency, as FreeTrain defines it, compares training on harvested nodes with training on
dedicated ones: here, samples trained over the samples the same node-time would have given at
the job's true throughput for the node count it held, with no rescale pause
(``trained / ideal``). It charges exactly what malleability costs (pauses at rescales and
reclaims). Scaling efficiency (``trained / (node-seconds x one-node rate)``) also charges the
sizes chosen: a job spread over many nodes trains fewer samples per node-second.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class JobOutcome:
    """One job of a replay (times on the timeline's clock; ``None``: never happened)."""

    name: str
    submit: float
    admitted: float | None
    first_start: float | None
    finished: float | None
    samples: float
    trained: float
    ideal: float
    node_seconds: float
    single_node_rate: float
    rescales: int
    paused_s: float

    @property
    def completion_s(self) -> float | None:
        """Submit to done (the job completion time), if it finished."""
        return None if self.finished is None else self.finished - self.submit


@dataclass(frozen=True)
class ReplayResult:
    """A replay's jobs and totals, with the bounds of what the idle nodes allowed over the
    same span (``replay/bounds.py``; NaN where not computed). ``time_limited``: decisions whose
    solve its wall-clock limit stopped (``Replay.time_limited``): 0 for a replay that repeats
    exactly on any machine."""

    policy: str
    source: str
    t0: float
    t1: float
    idle_node_seconds: float
    jobs: list[JobOutcome]
    decisions: int
    decision_s: float
    fallbacks: int
    wall_s: float
    upper_bound: float = math.nan
    offline_bound: float = math.nan
    time_limited: int = 0

    @property
    def of_upper(self) -> float:
        """Samples trained over the upper bound (idle node-seconds x best per-node rate)."""
        return self.trained / self.upper_bound if self.upper_bound > 0 else math.nan

    @property
    def of_offline(self) -> float:
        """Samples trained over the offline bound (replay/bounds.py)."""
        return self.trained / self.offline_bound if self.offline_bound > 0 else math.nan

    @property
    def trained(self) -> float:
        """Samples trained by all jobs."""
        return sum(j.trained for j in self.jobs)

    @property
    def harvested_node_seconds(self) -> float:
        """Node-seconds jobs held (paused or training)."""
        return sum(j.node_seconds for j in self.jobs)

    @property
    def efficiency(self) -> float:
        """Samples trained over those the held node-time gives with no rescale cost."""
        ideal = sum(j.ideal for j in self.jobs)
        return self.trained / ideal if ideal else math.nan

    @property
    def scaling_efficiency(self) -> float:
        """Samples trained over held node-seconds at each job's one-node rate."""
        base = sum(j.node_seconds * j.single_node_rate for j in self.jobs)
        return self.trained / base if base else math.nan

    @property
    def finished(self) -> list[JobOutcome]:
        """Jobs that trained all their samples."""
        return [j for j in self.jobs if j.finished is not None]

    @property
    def mean_completion_s(self) -> float:
        """Mean submit-to-done time of finished jobs."""
        done = [j.completion_s for j in self.finished if j.completion_s is not None]
        return statistics.fmean(done) if done else math.nan

    @property
    def time_to_result_s(self) -> float:
        """First submit to the last job done (NaN if some job did not finish)."""
        if len(self.finished) < len(self.jobs) or not self.jobs:
            return math.nan
        return max(j.finished for j in self.jobs if j.finished) - min(j.submit for j in self.jobs)

    def summary(self) -> dict[str, float | int | str]:
        """The figures of the comparison table."""
        return {
            "policy": self.policy,
            "trace": self.source,
            "days": (self.t1 - self.t0) / 86400,
            "jobs": len(self.jobs),
            "finished": len(self.finished),
            "samples": self.trained,
            "upper_bound": self.upper_bound,
            "offline_bound": self.offline_bound,
            "of_upper": self.of_upper,
            "of_offline": self.of_offline,
            "efficiency": self.efficiency,
            "scaling_efficiency": self.scaling_efficiency,
            "harvested_fraction": self.harvested_node_seconds / self.idle_node_seconds
            if self.idle_node_seconds
            else math.nan,
            "harvested_node_hours": self.harvested_node_seconds / 3600,
            "idle_node_hours": self.idle_node_seconds / 3600,
            "mean_jct_h": self.mean_completion_s / 3600,
            "time_to_result_h": self.time_to_result_s / 3600,
            "rescales": sum(j.rescales for j in self.jobs),
            "decisions": self.decisions,
            "decision_s": self.decision_s,
            "fallbacks": self.fallbacks,
            "time_limited": self.time_limited,
            "wall_s": self.wall_s,
        }

    def job_rows(self) -> list[dict[str, object]]:
        """One dict per job, for a CSV."""
        return [{**asdict(j), "completion_s": j.completion_s} for j in self.jobs]


__all__ = ["JobOutcome", "ReplayResult"]
