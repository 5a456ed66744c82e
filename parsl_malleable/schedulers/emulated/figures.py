"""Idle-hole figures of an emulated site's native schedule, without running anything.

Replays the native schedule with the site's node rule (a starting native job takes the
lowest-numbered nodes no native holds; with no block of ours that is the whole rule) and
measures, over a wall-time window from the replay's start: the share of node-time idle, the
per-node idle holes and how many native jobs arrive, start and end. For tuning the
``emulated:`` settings of a profile (``benchmarks/emulated_figures.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from parsl_malleable.schedulers.emulated.native_load import NativeSchedule


@dataclass(frozen=True)
class NativeFigures:
    """What a window of the native schedule looks like, all in wall seconds."""

    nodes: int
    duration_s: float
    idle_fraction: float
    holes: int
    hole_p10: float
    hole_p50: float
    hole_p90: float
    holes_in_range: float  # share of holes 20-180 s long
    open_at_end: int  # holes still open when the window ends (their length is a lower bound)
    arrivals: int
    starts: int
    ends: int
    busy_at_start: int

    def lines(self) -> list[str]:
        """A short human-readable report."""
        return [
            f"window {self.duration_s:.0f} s on {self.nodes} nodes",
            f"idle node-time {100 * self.idle_fraction:.0f}%",
            f"idle holes {self.holes} (open at the end {self.open_at_end}): "
            f"p10 {self.hole_p10:.0f} s, median {self.hole_p50:.0f} s, p90 {self.hole_p90:.0f} s; "
            f"{100 * self.holes_in_range:.0f}% are 20-180 s long",
            f"native jobs: {self.arrivals} queued, {self.starts} started, {self.ends} ended "
            f"in the window; {self.busy_at_start} nodes busy at its start",
        ]


def node_intervals(schedule: NativeSchedule) -> list[list[tuple[float, float]]]:
    """Busy intervals of each node (index 0 .. nodes-1) under the lowest-free-node rule."""
    events = []
    for i, job in enumerate(schedule.jobs):
        events.append((job.end, 0, i))  # ends before starts at the same instant
        events.append((job.start, 1, i))
    events.sort()
    free = list(range(schedule.nodes))
    held: dict[int, list[int]] = {}
    busy: list[list[tuple[float, float]]] = [[] for _ in range(schedule.nodes)]
    for when, kind, i in events:
        job = schedule.jobs[i]
        if kind == 0:
            for node in held.pop(i, []):
                busy[node].append((job.start, when))
                free.append(node)
            free.sort()
        else:
            take, free = free[: job.size], free[job.size :]
            held[i] = take
    return busy


def native_figures(schedule: NativeSchedule, duration_s: float) -> NativeFigures:
    """Figures of ``schedule`` over ``[t0, t0 + duration_s)``."""
    lo, hi = schedule.t0, schedule.t0 + duration_s
    lengths: list[float] = []
    open_at_end = 0
    idle = 0.0
    for intervals in node_intervals(schedule):
        cursor = lo
        for start, end in sorted(intervals):
            if end <= lo or start >= hi:
                continue
            if start > cursor:
                lengths.append(start - cursor)
                idle += start - cursor
            cursor = max(cursor, end)
        if cursor < hi:
            lengths.append(hi - cursor)
            idle += hi - cursor
            open_at_end += 1
    arr = np.array(lengths) if lengths else np.zeros(1)
    jobs = schedule.jobs
    return NativeFigures(
        nodes=schedule.nodes,
        duration_s=duration_s,
        idle_fraction=idle / (schedule.nodes * duration_s),
        holes=len(lengths),
        hole_p10=float(np.percentile(arr, 10)),
        hole_p50=float(np.percentile(arr, 50)),
        hole_p90=float(np.percentile(arr, 90)),
        holes_in_range=float(np.mean((arr >= 20) & (arr <= 180))) if lengths else 0.0,
        open_at_end=open_at_end,
        arrivals=sum(lo <= j.queued < hi for j in jobs),
        starts=sum(lo <= j.start < hi for j in jobs),
        ends=sum(lo <= j.end < hi for j in jobs),
        busy_at_start=sum(j.size for j in jobs if j.start <= lo < j.end),
    )


__all__ = ["NativeFigures", "native_figures", "node_intervals"]
