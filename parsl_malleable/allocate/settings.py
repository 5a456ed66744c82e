"""The allocator's decision settings and their defaults: one home for both users of them.

:func:`~parsl_malleable.allocate.allocate` takes these as keyword arguments and the controller's
:class:`~parsl_malleable.controller.policy.PolicySettings` as fields; both read their defaults
from :data:`SOLVE_DEFAULTS`, so a library caller and a live controller given nothing decide
the same way. The values are the controller's: the weighted objective (every job weighs 1
unless its priority says otherwise), a pause charged after a rescale (as the runtime pauses
every rank, the joining ones too), one solver thread and a half-second limit, because
decisions answer events and the models have a few hundred columns (docs/allocate.md).
FreeTrain's model is ``objective="throughput", pause_rate="before", charge_start=False``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# Kept here, free of heavy imports, so that the command's --help can read the defaults.
PauseRate = Literal["before", "after"]


@dataclass(frozen=True)
class SolveDefaults:
    """Default of every allocator setting that the controller also exposes."""

    objective: str = "weighted"
    solver: str = "highs"
    time_limit_s: float = 0.5
    gap_rel: float = 1e-3
    default_window_s: float = 3600.0
    max_horizon_s: float = 3600.0
    max_classes: int = 4
    charge_start: bool = True
    pause_rate: PauseRate = "after"
    threads: int | None = 1
    mip_node_limit: int | None = None


SOLVE_DEFAULTS = SolveDefaults()

__all__ = ["SOLVE_DEFAULTS", "PauseRate", "SolveDefaults"]
