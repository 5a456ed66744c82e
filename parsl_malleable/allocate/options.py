"""The numeric options of :func:`parsl_malleable.allocate.allocate`, validated where they enter.

A NaN passes every ``<``/``>`` check and an infinite horizon makes the objective NaN while the
solver still says "optimal"; a string of node names is iterable one letter at a time. The
pydantic model below refuses all of these before any work starts.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, StrictStr


class AllocateOptions(BaseModel):
    """Checked numeric options and the free node ids of one allocation."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=False)

    free_nodes: tuple[StrictStr, ...]
    time_limit: float = Field(gt=0, description="solver seconds")
    gap_rel: float = Field(ge=0, lt=1, description="relative MIP gap accepted")
    default_window_s: float = Field(gt=0, description="window of nodes without a prediction")
    max_horizon_s: float = Field(gt=0, description="longest plan")
    max_classes: int = Field(ge=1)
    node_cap: int | None = Field(None, ge=0)
    threads: int | None = Field(None, ge=1)
