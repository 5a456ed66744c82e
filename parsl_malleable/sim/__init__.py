"""Batch-scheduler simulator: FCFS, EASY and conservative backfill, with per-node idle timeline.

Main entry points: :func:`simulate` (replay a job trace) and :func:`plan_queue` (plan a live
queue snapshot with the same event loop); :class:`AvailabilityProfile` is the planner core.
See ``docs/sim.md``.
"""

from parsl_malleable.sim.availability import AvailabilityProfile
from parsl_malleable.sim.handmade import handmade_trace
from parsl_malleable.sim.plan import QueuePlan, plan_queue
from parsl_malleable.sim.simulate import SimResult, SimulationError, node_name, simulate
from parsl_malleable.sim.stats import HOLE_BUCKETS, SimStats
from parsl_malleable.sim.validate import WaitAgreement, wait_agreement

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
