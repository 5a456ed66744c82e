"""Load the window planner before the first poll, so that its one-time cost is logged, not silent.

The planner's event loop is numba code: the first call in a process loads it from numba's cache,
or compiles it on a fresh install (tens of seconds on a small login node). A provider that paid
this inside its first poll looked hung: no block, and no log line saying why. Planning a tiny
machine through the same calls the poll makes loads every compiled function the poll uses: once
as it is (the plain kernel) and once with its queued job restricted to some nodes (the masked
kernel, ``sim/masked_engine.py``, which a snapshot runs as soon as one queued job has
``allowed_nodes``: a PBS site with a vnode bound to a queue, or a job asking for gpus).

The same event loop runs the simulator (the emulated site's native jobs, ``replay --trace``), so
one compile serves both. Commands call :func:`load_event_loop` under a message that says what
happens and, on a cold cache (:func:`event_loop_cached`), how long it takes: a first run that
printed nothing for half a minute looked hung.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from parsl_malleable.harvest.blocks_to_submit import harvest_windows
from parsl_malleable.harvest.site_profile import SiteProfile
from parsl_malleable.harvest.yielding import blocks_in_the_way
from parsl_malleable.snapshot import Node, NodeState, PendingJob, RunningJob, Snapshot
from parsl_malleable.windows.predict import WindowPredictor

if TYPE_CHECKING:
    from rich.console import Console

_NOW = 1_800_000_000.0


def tiny_machine(restricted: bool = False) -> Snapshot:
    """Three nodes: one busy with a native job, one with a block of ours, one idle, and a
    queued job that waits for two of them (so every planning branch runs). ``restricted``:
    the queued job may use only those two (``allowed_nodes``), so the plan runs the masked
    kernel."""
    nodes = [
        Node("w1", NodeState.ALLOCATED, ("batch",)),
        Node("w2", NodeState.ALLOCATED, ("batch",)),
        Node("w3", NodeState.IDLE, ("batch",)),
    ]
    running = [
        RunningJob("native", ("w1",), _NOW - 60, 600.0, "batch", "u"),
        RunningJob("ours", ("w2",), _NOW - 60, 600.0, "batch", "pm", True),
    ]
    allowed = frozenset({"w1", "w2"}) if restricted else None
    pending = [PendingJob("queued", 2, 600.0, _NOW - 10, "batch", "u", allowed_nodes=allowed)]
    return Snapshot(now=_NOW, nodes=nodes, running=running, pending=pending)


#: The schedulers whose adapters fill ``PendingJob.allowed_nodes`` (the others never run the
#: masked kernel, and a cold compile of it would only delay their first blocks by 26-35 s:
#: the emulated demo trained too little in its first minute with it).
RESTRICTING_SCHEDULERS = frozenset({"pbs"})


def load_planner(profile: SiteProfile, predictor: WindowPredictor) -> float:
    """Plan :func:`tiny_machine` as a poll would (yield decision and windows), and again
    restricted where the profile's scheduler restricts queued jobs
    (:data:`RESTRICTING_SCHEDULERS`), so that every kernel its polls run is loaded; seconds
    taken. Each kernel is one compiled function for every backfill policy (the policy is an
    argument): one plan each loads it."""
    began = time.perf_counter()
    kinds = (False, True) if profile.scheduler in RESTRICTING_SCHEDULERS else (False,)
    for restricted in kinds:
        snap = tiny_machine(restricted)
        blocks_in_the_way(snap, {"ours": _NOW + 540})
        harvest_windows(snap, profile, predictor, exclude={"w2"})
    return time.perf_counter() - began


# Seconds to compile the event loop on a cold numba cache (NUMBA_CACHE_DIR set to an empty
# folder, 2 cores): 15 s idle, 19-24 s with another compile running beside it. Loading it from
# the cache takes about a second.
COLD_COMPILE_S = (15, 25)
# The same for the masked kernel (2 cores, another process beside it): 31-35 s alone (it
# compiles the helpers it shares with the plain kernel too), 26 s after the plain kernel; from
# the cache 0.5 s alone, 0.1 s after the plain kernel. Only :func:`load_planner` loads it.
MASKED_COLD_COMPILE_S = (25, 35)


def _in_cache(dispatcher: object) -> bool | None:
    """Whether numba's cache holds ``dispatcher`` compiled from this source; None: cannot tell
    (numba's cache layout is private and may change)."""
    try:
        index = dispatcher._cache._cache_file._load_index()  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        return None
    return bool(index)


def event_loop_cached() -> bool | None:
    """Whether numba's cache holds the compiled event loop for this source (True: loading it
    takes about a second), False: the first run compiles it; None: cannot tell (numba's cache
    layout is private and may change). The plain kernel only: the one the simulator and
    :func:`load_event_loop` use; :func:`planner_cached` adds the masked kernel."""
    from parsl_malleable.sim.engine import run_schedule

    return _in_cache(run_schedule)


def planner_cached() -> bool | None:
    """:func:`event_loop_cached` for what :func:`load_planner` loads: the plain and the
    masked kernel. False when either must be compiled; None when either cannot be told."""
    from parsl_malleable.sim.masked_engine import run_schedule_masked

    states = (event_loop_cached(), _in_cache(run_schedule_masked))
    if False in states:
        return False
    return None if None in states else True


def load_message(cached: bool | None) -> str:
    """What the user is told while :func:`load_event_loop` runs."""
    if cached:
        return "loading the simulator's compiled event loop (numba cache)"
    low, high = COLD_COMPILE_S
    guess = "first run on this machine" if cached is False else "unless numba cached it"
    return (
        f"compiling the simulator's event loop with numba ({guess}): about {low}-{high} s on "
        "2 idle cores, longer on a busy machine; once, later runs load it from the cache"
    )


def load_event_loop() -> float:
    """Load, or compile on a cold cache, the numba event loop of the simulator and the window
    planner in this process; seconds taken. Later calls in the process return at once."""
    from parsl_malleable.sim.trace_replay import warm_up

    return warm_up()


def load_with_status(console: Console) -> float:
    """:func:`load_event_loop` under a spinner on ``console`` saying what happens and, on a
    cold cache, how long it takes (a plain line where ``console`` is no terminal, so that a
    log shows it too); seconds taken."""
    cached = event_loop_cached()
    message = load_message(cached)
    if not console.is_terminal and not cached:
        console.print(message)
    with console.status(message + " ..."):
        took = load_event_loop()
    if not cached:
        console.print(f"simulator compiled in {took:.0f} s (cached for later runs)")
    return took


__all__ = [
    "COLD_COMPILE_S",
    "MASKED_COLD_COMPILE_S",
    "RESTRICTING_SCHEDULERS",
    "event_loop_cached",
    "load_event_loop",
    "load_message",
    "load_planner",
    "load_with_status",
    "planner_cached",
    "tiny_machine",
]
