"""What both sides of the Horovod backend agree on (and nothing else).

The controller side, :mod:`~parsl_malleable.elastic.horovod_rendezvous`, and the rank side,
:mod:`~parsl_malleable.elastic.horovod_backend`, never import each other; they meet only
through Horovod's HTTP rendezvous, and must name its keys and slots alike: the scope of our
pre-barrier keys and each rank's Horovod host name (one host per rank, so local scopes have
size 1).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, TypeAdapter

BUILD_HINT = "Horovod is not installed; build it with scripts/build-horovod"
SCOPE = "parsl_malleable"  # our keys on Horovod's server, beside its global/local/cross scopes


def slot_hostname(rank: int) -> str:
    """The Horovod host name of ``rank``: one host per rank, so local scopes have size 1."""
    return f"rank{rank}"


class BarrierStatus(BaseModel):
    """``GET /<scope>/status``: the epoch the server serves, the ranks that reached its
    pre-barrier, and whether a newer membership superseded it."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    epoch: int
    world_size: int
    arrived: list[int]
    superseded: bool


# ``GET /<scope>/mesh``: the gloo pair addresses Horovod published for the epoch.
MESH: TypeAdapter[list[tuple[str, int]]] = TypeAdapter(list[tuple[str, int]])

__all__ = ["BUILD_HINT", "MESH", "SCOPE", "BarrierStatus", "slot_hostname"]
