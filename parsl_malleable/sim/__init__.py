"""Batch-scheduler simulator: FCFS, EASY and conservative backfill, with per-node idle timeline.

Main entry points: :func:`simulate` (replay a job trace) and :func:`plan_queue` (plan a live
queue snapshot with the same event loop); :class:`AvailabilityProfile` is the planner core.
See ``docs/sim.md``.

The names below are imported on first use, so that a light submodule (``sim.command`` for
``parsl-malleable sim --help``) does not load numba and pandas. ``simulate`` lives in
:mod:`parsl_malleable.sim.trace_replay`: a submodule named ``simulate`` would hide the function
once imported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from parsl_malleable._lazy import lazy_exports

if TYPE_CHECKING:
    from parsl_malleable.sim.availability import AvailabilityProfile
    from parsl_malleable.sim.handmade import handmade_trace
    from parsl_malleable.sim.queue_forecast import QueuePlan, plan_queue
    from parsl_malleable.sim.stats import HOLE_BUCKETS, SimStats
    from parsl_malleable.sim.trace_replay import SimResult, SimulationError, node_name, simulate
    from parsl_malleable.sim.validate import WaitAgreement, wait_agreement

_LAZY = {
    "AvailabilityProfile": "parsl_malleable.sim.availability",
    "handmade_trace": "parsl_malleable.sim.handmade",
    "QueuePlan": "parsl_malleable.sim.queue_forecast",
    "plan_queue": "parsl_malleable.sim.queue_forecast",
    "HOLE_BUCKETS": "parsl_malleable.sim.stats",
    "SimStats": "parsl_malleable.sim.stats",
    "SimResult": "parsl_malleable.sim.trace_replay",
    "SimulationError": "parsl_malleable.sim.trace_replay",
    "node_name": "parsl_malleable.sim.trace_replay",
    "simulate": "parsl_malleable.sim.trace_replay",
    "WaitAgreement": "parsl_malleable.sim.validate",
    "wait_agreement": "parsl_malleable.sim.validate",
}

__all__ = [
    "HOLE_BUCKETS",
    "AvailabilityProfile",
    "QueuePlan",
    "SimResult",
    "SimStats",
    "SimulationError",
    "WaitAgreement",
    "handmade_trace",
    "node_name",
    "plan_queue",
    "simulate",
    "wait_agreement",
]

__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
