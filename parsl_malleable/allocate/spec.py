"""Inputs of the allocator: training jobs and the predicted idle windows of nodes."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StrictStr

from parsl_malleable.allocate.curve import ScalingCurve
from parsl_malleable.allocate.errors import AllocationInputError
from parsl_malleable.inputs import Number, WholeCount, boundary

"""At which rate a rescale's pause is lost: the job's rate before it (FreeTrain's model) or
after it (every rank pauses, the joining ones too: what the elastic runtime does)."""


@boundary(AllocationInputError)
class TrainingJob:
    """One malleable training job as the allocator sees it.

    ``min_nodes``/``max_nodes`` bound its size whenever it runs (it may also get 0 nodes);
    ``scale_up_cost``/``scale_down_cost`` are the seconds it pauses when it grows/shrinks (also
    the start-up time when it starts from 0 nodes); ``weight`` is used by the ``weighted``
    objective; ``current_nodes`` are the node ids it holds now (never migrated).
    """

    name: Annotated[StrictStr, Field(min_length=1)]
    min_nodes: Annotated[WholeCount, Field(ge=1)]
    max_nodes: WholeCount
    curve: ScalingCurve
    scale_up_cost: Annotated[Number, Field(ge=0)]
    scale_down_cost: Annotated[Number, Field(ge=0)]
    weight: Annotated[Number, Field(gt=0)] = 1.0
    current_nodes: tuple[StrictStr, ...] = ()

    def __post_init__(self) -> None:
        where = f"job {self.name!r}"
        if self.min_nodes > self.max_nodes:
            raise AllocationInputError(
                f"{where}: need 1 <= min_nodes <= max_nodes, got {self.min_nodes}, {self.max_nodes}"
            )
        nodes = self.current_nodes
        if len(set(nodes)) != len(nodes):
            raise AllocationInputError(f"{where}: current_nodes lists a node twice")
        if nodes and not self.min_nodes <= len(nodes) <= self.max_nodes:
            raise AllocationInputError(
                f"{where}: holds {len(nodes)} nodes, outside [{self.min_nodes}, {self.max_nodes}]"
            )

    @property
    def current_rate(self) -> float:
        """Throughput at the current size (samples/s)."""
        return self.curve(len(self.current_nodes))


@boundary(AllocationInputError)
class NodeWindow:
    """A group of nodes predicted to stay idle (usable) for ``remaining_s`` more seconds.

    The window predictor feeds a list of these; nodes not in any window are assumed to stay for
    the allocator's default horizon.
    """

    nodes: tuple[StrictStr, ...]
    remaining_s: Annotated[Number, Field(ge=0)]

    @classmethod
    def ending_at(cls, nodes: tuple[str, ...], end: float, now: float) -> NodeWindow:
        """A window given by its predicted end time (same clock as ``now``)."""
        return cls(tuple(nodes), max(0.0, end - now))
