"""Allocation of idle nodes to training jobs (MILP with pulp; greedy fallback) and block sizing.

See docs/allocate.md. Main entry points: :func:`allocate` and :func:`size_blocks`. The names
below are imported on first use, so that a light submodule (``allocate.command`` for
``parsl-malleable allocate --help``) does not load pulp.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from parsl_malleable._lazy import lazy_exports

if TYPE_CHECKING:
    from parsl_malleable.allocate.api import allocate
    from parsl_malleable.allocate.blocks import size_blocks
    from parsl_malleable.allocate.curve import ScalingCurve
    from parsl_malleable.allocate.errors import AllocationInputError, AllocationSolverError
    from parsl_malleable.allocate.result import Allocation, BlockRequest
    from parsl_malleable.allocate.spec import NodeWindow, TrainingJob
    from parsl_malleable.allocate.workload import load_scaling, load_workload

_LAZY = {
    "allocate": "parsl_malleable.allocate.api",
    "size_blocks": "parsl_malleable.allocate.blocks",
    "ScalingCurve": "parsl_malleable.allocate.curve",
    "AllocationInputError": "parsl_malleable.allocate.errors",
    "AllocationSolverError": "parsl_malleable.allocate.errors",
    "Allocation": "parsl_malleable.allocate.result",
    "BlockRequest": "parsl_malleable.allocate.result",
    "NodeWindow": "parsl_malleable.allocate.spec",
    "TrainingJob": "parsl_malleable.allocate.spec",
    "load_scaling": "parsl_malleable.allocate.workload",
    "load_workload": "parsl_malleable.allocate.workload",
}

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

__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
