"""The inputs of a replay, built the same way by the command, the benchmark and the tests."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from parsl_malleable import data
from parsl_malleable.errors import ConfigError
from parsl_malleable.replay.idle import IdleTimeline, idle_from_sim, load_idle_intervals
from parsl_malleable.replay.workload import ReplayJob, load_replay_workload, shift, sweep

SUMMIT_IDLE = "summit-idle-intervals-2021-02.csv.gz"
WORKLOADS = ("imagenet-imgps-1001J", "imagenet-spdup-1001J", "hps-shufflenet-1000J")


def bftrainer_dir() -> Path:
    """Folder of the carried FreeTrain data (Summit idle trace, workloads)."""
    return data.data_dir() / "bftrainer"


def summit_timeline(
    nodes: int | None = None, days: float | None = None, path: str | Path | None = None
) -> IdleTimeline:
    """The Summit idle-node trace (the first ``nodes`` nodes, the first ``days`` days)."""
    timeline = load_idle_intervals(path or bftrainer_dir() / SUMMIT_IDLE)
    if nodes is not None:
        timeline = timeline.first_nodes(nodes)
    if days is not None:
        timeline = timeline.window(timeline.t0, timeline.t0 + days * 86400)
    return timeline


def trace_timeline(path: str | Path, days: float | None = None, **read: object) -> IdleTimeline:
    """The idle timeline of a job trace simulated under EASY backfill (first ``days`` days)."""
    from parsl_malleable.sim.trace_replay import simulate
    from parsl_malleable.traces import read_trace

    trace = read_trace(path, **read)  # type: ignore[arg-type]
    timeline = idle_from_sim(simulate(trace, "easy"), source=Path(path).name)
    if days is not None:
        timeline = timeline.window(timeline.t0, timeline.t0 + days * 86400)
    return timeline


def workload_jobs(
    name: str, timeline: IdleTimeline, limit: int | None = None, keep_submits: bool = False
) -> list[ReplayJob]:
    """Workload ``name`` (first ``limit`` jobs); submits moved to an hour into the timeline
    unless ``keep_submits`` (the full Summit replay keeps FreeTrain's own dates)."""
    if name not in WORKLOADS:
        raise ConfigError(f"unknown workload {name!r}; choose one of {', '.join(WORKLOADS)}")
    jobs = load_replay_workload(bftrainer_dir(), name, limit)
    return jobs if keep_submits else shift(jobs, timeline.t0 + 3600)


def hpo_sweep(
    timeline: IdleTimeline, count: int = 16, samples: float | None = None
) -> list[ReplayJob]:
    """A ``count``-job HPO sweep of FreeTrain's ShuffleNet job, submitted an hour in."""
    template = load_replay_workload(bftrainer_dir(), "hps-shufflenet-1000J", limit=1)[0]
    if samples is not None:
        template = replace(template, samples=samples)
    return sweep(template, count, timeline.t0 + 3600)


__all__ = [
    "SUMMIT_IDLE",
    "WORKLOADS",
    "bftrainer_dir",
    "hpo_sweep",
    "summit_timeline",
    "trace_timeline",
    "workload_jobs",
]
