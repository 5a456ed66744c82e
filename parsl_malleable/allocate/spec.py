"""Inputs of the allocator: training jobs and the predicted idle windows of nodes."""

from __future__ import annotations

import math
from dataclasses import dataclass

from parsl_malleable.allocate.curve import ScalingCurve
from parsl_malleable.allocate.errors import AllocationInputError
from parsl_malleable.inputs import whole_count


@dataclass(frozen=True)
class TrainingJob:
    """One malleable training job as the allocator sees it.

    ``min_nodes``/``max_nodes`` bound its size whenever it runs (it may also get 0 nodes);
    ``scale_up_cost``/``scale_down_cost`` are the seconds it pauses when it grows/shrinks (also
    the start-up time when it starts from 0 nodes); ``weight`` is used by the ``weighted``
    objective; ``current_nodes`` are the node ids it holds now (never migrated).
    """

    name: str
    min_nodes: int
    max_nodes: int
    curve: ScalingCurve
    scale_up_cost: float
    scale_down_cost: float
    weight: float = 1.0
    current_nodes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        where = f"job {self.name!r}"
        if not self.name:
            raise AllocationInputError("job with an empty name")
        for key in ("min_nodes", "max_nodes"):
            count = whole_count(getattr(self, key), f"{where}: {key}", error=AllocationInputError)
            object.__setattr__(self, key, count)
        if not 1 <= self.min_nodes <= self.max_nodes:
            raise AllocationInputError(
                f"{where}: need 1 <= min_nodes <= max_nodes, got {self.min_nodes}, {self.max_nodes}"
            )
        for key in ("scale_up_cost", "scale_down_cost"):
            value = getattr(self, key)
            if not math.isfinite(value) or value < 0:
                raise AllocationInputError(f"{where}: {key} must be >= 0 seconds, got {value}")
        if not math.isfinite(self.weight) or self.weight <= 0:
            raise AllocationInputError(f"{where}: weight must be > 0, got {self.weight}")
        nodes = tuple(self.current_nodes)
        if len(set(nodes)) != len(nodes):
            raise AllocationInputError(f"{where}: current_nodes lists a node twice")
        if nodes and not self.min_nodes <= len(nodes) <= self.max_nodes:
            raise AllocationInputError(
                f"{where}: holds {len(nodes)} nodes, outside [{self.min_nodes}, {self.max_nodes}]"
            )
        object.__setattr__(self, "current_nodes", nodes)

    @property
    def current_rate(self) -> float:
        """Throughput at the current size (samples/s)."""
        return self.curve(len(self.current_nodes))


@dataclass(frozen=True)
class NodeWindow:
    """A group of nodes predicted to stay idle (usable) for ``remaining_s`` more seconds.

    The window predictor feeds a list of these; nodes not in any window are assumed to stay for
    the allocator's default horizon.
    """

    nodes: tuple[str, ...]
    remaining_s: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "nodes", tuple(self.nodes))
        if not math.isfinite(self.remaining_s) or self.remaining_s < 0:
            raise AllocationInputError(
                f"window of {len(self.nodes)} nodes: remaining_s must be finite and >= 0, "
                f"got {self.remaining_s}"
            )

    @classmethod
    def ending_at(cls, nodes: tuple[str, ...], end: float, now: float) -> NodeWindow:
        """A window given by its predicted end time (same clock as ``now``)."""
        return cls(tuple(nodes), max(0.0, end - now))
