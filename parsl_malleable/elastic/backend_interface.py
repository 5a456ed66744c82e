"""The interface between the elastic runtime and a collective-communication library.

The runtime (membership, commits, rollback, checkpoints) is written once against
:class:`CollectiveBackend`; torch.distributed and Horovod each implement it. A backend is
re-initialised for every *membership epoch*: when ranks join or leave, every surviving rank calls
``shutdown()`` and then ``init()`` with the new rank, world size and epoch. Re-initialising
instead of relying on a library's own elastic driver keeps the rendezvous with the controller (login
node or notebook), never on a block that can vanish.

The controller side of a backend is a :class:`RendezvousHost`: it runs in the controller process
and serves whatever the library needs to form a group (for torch a key table the coordinator
serves on its authenticated port, for Horovod its HTTP rendezvous behind a per-epoch capability).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from parsl_malleable.elastic.kv_table import KeyValueTable


@dataclass(frozen=True)
class RendezvousInfo:
    """Where ranks of one membership epoch meet. Serialisable: it travels inside Parsl tasks."""

    backend: str  # "torch" or "horovod"
    host: str
    port: int
    epoch: int
    world_size: int
    # Backend-specific settings, as key/value pairs; out of the repr, as Horovod's holds the
    # epoch's rendezvous capability (a secret).
    extra: tuple[tuple[str, str], ...] = field(default=(), repr=False)


def info_to_json(info: RendezvousInfo) -> dict[str, Any]:
    """``info`` as the JSON object an assignment carries to a rank."""
    return {
        "backend": info.backend,
        "host": info.host,
        "port": info.port,
        "epoch": info.epoch,
        "world_size": info.world_size,
        "extra": [list(pair) for pair in info.extra],
    }


def info_from_json(data: dict[str, Any]) -> RendezvousInfo:
    """Rebuild the :class:`RendezvousInfo` sent in an assignment."""
    return RendezvousInfo(
        backend=str(data["backend"]),
        host=str(data["host"]),
        port=int(data["port"]),
        epoch=int(data["epoch"]),
        world_size=int(data["world_size"]),
        extra=tuple((str(k), str(v)) for k, v in data.get("extra", [])),
    )


class RendezvousHost(Protocol):
    """Controller-side service that lets the ranks of each epoch form a group."""

    def start(self) -> None:
        """Start serving (idempotent)."""

    def prepare_epoch(self, epoch: int, world_size: int) -> RendezvousInfo:
        """Make ready for ``world_size`` ranks to form group number ``epoch``."""

    def close(self) -> None:
        """Stop serving and free the port."""


class CollectiveBackend(Protocol):
    """Rank-side collectives used by the elastic runtime."""

    name: str

    def init(self, rank: int, info: RendezvousInfo, timeout_s: float) -> None:
        """Join the group of ``info.epoch`` as ``rank`` of ``info.world_size``.

        Must raise (not hang) within ``timeout_s`` when a peer never arrives.
        """

    def shutdown(self) -> None:
        """Leave the current group; safe to call when no group is formed."""

    def allreduce_mean_(self, tensors: list[Any]) -> None:
        """Average ``tensors`` (for example gradients) in place across the group.

        Must raise (not hang forever) when a peer dies mid-collective.
        """

    def broadcast_object(self, obj: Any, src: int) -> Any:
        """Return ``obj`` from rank ``src`` on every rank (used to hand state to new ranks)."""

    def barrier(self) -> None:
        """Wait for every rank of the group."""


@runtime_checkable
class Abortable(Protocol):
    """A backend whose pending collective can be made to fail from another thread.

    Optional: the runtime calls :meth:`abort` when the coordinator says a peer of the current
    epoch is lost (or this rank was dropped), so that survivors regroup after the heartbeat
    timeout rather than after ``collective_timeout_s``. A backend without it waits for that.
    """

    def abort(self, reason: str) -> None:
        """Make the current group's pending and later collectives raise; idempotent."""


@runtime_checkable
class CoordinatorKeyed(Protocol):
    """A backend whose rendezvous keys its job's coordinator keeps (torch): the rank tells it
    where the coordinator is, and its token, before the first ``init``."""

    def attach_coordinator(self, host: str, port: int, token: str) -> None:
        """Where the job's coordinator is, and the token its key requests carry."""
        ...


@runtime_checkable
class ProcessGroupBackend(Protocol):
    """A backend with a ``torch.distributed`` process group, on which ``ctx.wrap`` builds DDP
    (torch; Horovod has none)."""

    @property
    def group(self) -> Any:
        """The current epoch's process group (None between epochs)."""
        ...

    @property
    def device(self) -> Any:
        """The ``torch.device`` tensors handed to the group's collectives must live on."""
        ...


@runtime_checkable
class KeyTableHost(Protocol):
    """A rendezvous host whose keys the coordinator serves on its own port (torch's)."""

    table: KeyValueTable
