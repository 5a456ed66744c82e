"""The native load of the emulated site: a job trace replayed through the simulator.

The trace (synthetic, or a file) is simulated once with EASY backfill on the site's node count;
every native job then keeps exactly its simulated start and end. Trace time ``t`` maps to wall
time ``t0 + (t - origin) / speedup``, where ``origin`` skips the trace's empty warm-up (a
simulated machine starts with no job). :func:`native_figures` measures the idle holes that
schedule leaves, for tuning a profile without running anything.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from parsl_malleable.errors import ConfigError
from parsl_malleable.schedulers.emulated.settings import SYNTHETIC, EmulatedSettings
from parsl_malleable.traces.schema import JobTrace

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class NativeJob:
    """One native job in wall seconds. ``queued`` is when it enters the queue (its submit, or
    ``notice_s`` before its start if that is earlier); ``limit_s`` is its requested walltime."""

    job_id: str
    size: int
    queued: float
    start: float
    end: float
    limit_s: float
    user: str = ""


@dataclass(frozen=True)
class NativeSchedule:
    """Every native job that is still to run or running at ``t0``, sorted by start."""

    jobs: tuple[NativeJob, ...]
    t0: float
    origin: float
    speedup: float
    nodes: int

    def wall(self, t: float) -> float:
        """Wall time of trace time ``t``."""
        return self.t0 + (t - self.origin) / self.speedup


def load_trace(settings: EmulatedSettings) -> JobTrace:
    """The trace the settings name: generated, or read from a file."""
    if settings.trace == SYNTHETIC:
        from parsl_malleable.traces.synthetic import synthetic_trace

        return synthetic_trace(
            settings.jobs, settings.nodes, seed=settings.seed, load=settings.load
        )
    from parsl_malleable.traces.read import read_trace

    try:
        return read_trace(Path(settings.trace).expanduser())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"emulated.trace: {settings.trace}: {exc}") from exc


def native_schedule(settings: EmulatedSettings, t0: float | None = None) -> NativeSchedule:
    """Simulate the settings' trace (EASY backfill on ``settings.nodes`` nodes) and map it to
    wall time from ``t0`` (default: now)."""
    from parsl_malleable.sim.trace_replay import simulate

    began = time.perf_counter()
    trace = load_trace(settings)
    logger.info(
        "emulated site: simulating %d native jobs on %d nodes (EASY); the first run on a "
        "machine compiles the simulator (15-25 s on 2 cores), later runs load it from the cache",
        len(trace.jobs),
        settings.nodes,
    )
    result = simulate(trace, "easy", nodes=settings.nodes)
    frame = result.jobs
    kept = frame[frame["dropped"] == ""]
    if settings.trace != SYNTHETIC and len(kept) < len(frame):
        logger.warning(
            "emulated site: %d jobs of %s left out (%s)",
            len(frame) - len(kept),
            settings.trace,
            ", ".join(f"{k} {v}" for k, v in result.stats.dropped.items() if v),
        )
    start = kept["sim_start"].to_numpy(dtype=float)
    end = kept["sim_end"].to_numpy(dtype=float)
    size = kept["nodes"].to_numpy(dtype=np.int64)
    submit = kept["submit"].to_numpy(dtype=float)
    first = float(submit.min())
    origin = first + (
        settings.start_s
        if settings.start_s is not None
        else warm_up_end(start, end, size, settings.nodes) - first
    )
    if origin >= float(end.max()):
        raise ConfigError(
            f"emulated.start_s: the replay would start at trace second {origin - first:.0f}, "
            f"after the last native job ends ({float(end.max()) - first:.0f})"
        )
    walltime = trace.jobs.loc[kept.index, "walltime"].to_numpy(dtype=float)
    runtime = end - start
    limit = np.where(np.isfinite(walltime) & (walltime > 0), walltime, runtime)
    limit = np.maximum(np.maximum(limit, runtime), 1.0)
    users = trace.jobs.loc[kept.index, "user"].astype("string").fillna("").to_numpy()
    ids = kept["job_id"].to_numpy()
    t0 = time.time() if t0 is None else t0
    speed = settings.speedup
    notice = settings.notice_s
    jobs = []
    for i in np.argsort(start, kind="stable"):
        if end[i] <= origin or end[i] <= start[i]:
            continue  # over before the replay starts, or holding no node at any time
        w_start = t0 + (start[i] - origin) / speed
        w_submit = t0 + (submit[i] - origin) / speed
        jobs.append(
            NativeJob(
                job_id=str(ids[i]),
                size=int(size[i]),
                queued=float(min(w_submit, w_start - notice)),
                start=float(w_start),
                end=float(t0 + (end[i] - origin) / speed),
                limit_s=float(limit[i]) / speed,
                user=str(users[i]),
            )
        )
    logger.info(
        "emulated site: %d native jobs from trace second %.0f at %.3g x speed (%.1f s)",
        len(jobs),
        origin - first,
        speed,
        time.perf_counter() - began,
    )
    return NativeSchedule(tuple(jobs), t0, origin, speed, settings.nodes)


def warm_up_end(start: np.ndarray, end: np.ndarray, size: np.ndarray, nodes: int) -> float:
    """Trace time at which half the ``nodes`` are first busy (the first start if never)."""
    times = np.concatenate([start, end])
    delta = np.concatenate([size, -size])
    order = np.lexsort((delta, times))  # ends before starts at the same instant
    busy = np.cumsum(delta[order])
    reached = np.flatnonzero(busy >= math.ceil(nodes / 2))
    if not len(reached):
        return float(start.min())
    return float(times[order][reached[0]])


__all__ = ["NativeJob", "NativeSchedule", "load_trace", "native_schedule", "warm_up_end"]
