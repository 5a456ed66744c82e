"""Allocation of idle nodes to training jobs (MILP with pulp; greedy fallback) and block sizing.

See docs/allocate.md. Main entry points: :func:`allocate` and :func:`size_blocks`.
"""

from parsl_malleable.allocate.api import allocate
from parsl_malleable.allocate.blocks import size_blocks
from parsl_malleable.allocate.curve import ScalingCurve
from parsl_malleable.allocate.errors import AllocationInputError, AllocationSolverError
from parsl_malleable.allocate.result import Allocation, BlockRequest
from parsl_malleable.allocate.spec import NodeWindow, TrainingJob
from parsl_malleable.allocate.workload import load_scaling, load_workload

__all__ = [
    "Allocation",
    "AllocationInputError",
    "AllocationSolverError",
    "BlockRequest",
    "NodeWindow",
    "ScalingCurve",
    "TrainingJob",
    "allocate",
    "load_scaling",
    "load_workload",
    "size_blocks",
]
