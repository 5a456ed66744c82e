"""Load the window planner before the first poll, so that its one-time cost is logged, not silent.

The planner's event loop is numba code: the first call in a process loads it from numba's cache,
or compiles it on a fresh install (tens of seconds on a small login node). A provider that paid
this inside its first poll looked hung: no block, and no log line saying why. Planning a tiny
machine through the same calls the poll makes loads every compiled function the poll uses.
"""

from __future__ import annotations

import time

from parsl_malleable.harvest.planning import harvest_windows
from parsl_malleable.harvest.site_profile import SiteProfile
from parsl_malleable.harvest.yielding import blocks_in_the_way
from parsl_malleable.snapshot import Node, NodeState, PendingJob, RunningJob, Snapshot
from parsl_malleable.windows.predict import WindowPredictor

_NOW = 1_800_000_000.0


def tiny_machine() -> Snapshot:
    """Three nodes: one busy with a native job, one with a block of ours, one idle, and a
    queued job that waits for two of them (so every planning branch runs)."""
    nodes = [
        Node("w1", NodeState.ALLOCATED, ("batch",)),
        Node("w2", NodeState.ALLOCATED, ("batch",)),
        Node("w3", NodeState.IDLE, ("batch",)),
    ]
    running = [
        RunningJob("native", ("w1",), _NOW - 60, 600.0, "batch", "u"),
        RunningJob("ours", ("w2",), _NOW - 60, 600.0, "batch", "pm", True),
    ]
    pending = [PendingJob("queued", 2, 600.0, _NOW - 10, "batch", "u")]
    return Snapshot(now=_NOW, nodes=nodes, running=running, pending=pending)


def load_planner(profile: SiteProfile, predictor: WindowPredictor) -> float:
    """Plan :func:`tiny_machine` as a poll would (yield decision and windows); seconds taken."""
    began = time.perf_counter()
    snap = tiny_machine()
    blocks_in_the_way(snap, {"ours": _NOW + 540})
    harvest_windows(snap, profile, predictor, exclude={"w2"})
    return time.perf_counter() - began


__all__ = ["load_planner", "tiny_machine"]
