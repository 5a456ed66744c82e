"""The numeric options of :func:`parsl_malleable.allocate.allocate`, validated where they enter.

A NaN passes every ``<``/``>`` check and an infinite horizon makes the objective NaN while the
solver still says "optimal"; a string of node names is iterable one letter at a time. The
pydantic model below refuses all of these before any work starts.
"""

from __future__ import annotations

from pydantic import Field, StrictStr

from parsl_malleable.allocate.errors import AllocationInputError
from parsl_malleable.inputs import InputModel

# Nodes (free and held) one allocation may cover: ten times the largest machines (about 10^5
# nodes). Asked for 10^8 by mistake, the command grew past 3.5 GB building node names and
# windows and never answered; such a request is refused before any per-node work instead.
MAX_NODES = 1_000_000


class AllocateOptions(InputModel):
    """Checked numeric options and the free node ids of one allocation."""

    free_nodes: tuple[StrictStr, ...] = Field(max_length=MAX_NODES)
    time_limit: float = Field(gt=0, description="solver seconds")
    gap_rel: float = Field(ge=0, lt=1, description="relative MIP gap accepted")
    default_window_s: float = Field(gt=0, description="window of nodes without a prediction")
    max_horizon_s: float = Field(gt=0, description="longest plan")
    max_classes: int = Field(ge=1)
    node_cap: int | None = Field(None, ge=0)
    threads: int | None = Field(None, ge=1)
    mip_node_limit: int | None = Field(None, ge=0, description="branch-and-bound nodes")


def check_node_count(free: int, held: int) -> None:
    """Refuse more than :data:`MAX_NODES` nodes before any per-node work starts."""
    if free + held > MAX_NODES:
        raise AllocationInputError(
            f"{free + held:,} nodes ({free:,} free, {held:,} held by jobs) is more than the "
            f"allocator's limit of {MAX_NODES:,} nodes"
        )
