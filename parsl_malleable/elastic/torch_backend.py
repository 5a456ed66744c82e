"""torch.distributed implementation of the elastic backend interface.

There is no rendezvous port of its own: the job's coordinator keeps the keys
(:class:`~parsl_malleable.elastic.kv_table.KeyValueTable`) and ranks reach them through a
:class:`~parsl_malleable.elastic.coordinator_store.CoordinatorStore`, on a connection that passed
the coordinator's challenge. Each membership epoch uses its own ``PrefixStore``, so keys of an
abandoned epoch (a rank died half-way through forming it) never confuse the next one; keys two
epochs old are dropped. gloo listens on the address this rank reaches the coordinator from,
never on every interface. Ranks use gloo on CPU and nccl when CUDA is available, always with a
timeout, so that a peer that never arrives or dies mid-collective makes the call raise instead
of hanging.
"""

from __future__ import annotations

import contextlib
import datetime
import threading
from typing import Any

import torch
import torch.distributed as dist

from parsl_malleable.elastic.backend_interface import RendezvousInfo
from parsl_malleable.elastic.coordinator_store import CoordinatorStore
from parsl_malleable.elastic.kv_table import KeyValueTable
from parsl_malleable.elastic.own_sockets import shut_down, socket_inodes, tcp_connections_since
from parsl_malleable.elastic.safe_state import decode_state, encode_state


def epoch_prefix(epoch: int) -> str:
    """The key prefix of membership epoch ``epoch``."""
    return f"epoch-{epoch}/"


class TorchRendezvousHost:
    """The rendezvous keys of one job, served by its coordinator (no port of its own)."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.table = KeyValueTable()
        self._lock = threading.Lock()
        self._dropped = 0  # epochs below this have had their keys removed

    def start(self) -> None:
        """Nothing to start: the coordinator serves :attr:`table`."""

    def prepare_epoch(self, epoch: int, world_size: int) -> RendezvousInfo:
        """Drop the keys of epochs before ``epoch - 1``; the epoch number namespaces the rest.

        ``port`` is 0: ranks reach the keys through the coordinator they already talk to.
        """
        with self._lock:
            for old in range(self._dropped, epoch - 1):
                self.table.delete_prefix(epoch_prefix(old))
            self._dropped = max(self._dropped, epoch - 1)
        return RendezvousInfo(
            backend="torch", host=self.host, port=0, epoch=epoch, world_size=world_size
        )

    def close(self) -> None:
        """Wake ranks still waiting for a key: the job is over."""
        self.table.close()


class TorchBackend:
    """Rank side: one process-group object per membership epoch.

    The group is built directly (``ProcessGroupGloo`` / ``ProcessGroupNCCL``) rather than through
    ``init_process_group``: the default group keeps a process-wide name counter that a failed
    initialisation leaves out of step with the other ranks, after which no later epoch can form.
    :meth:`attach_coordinator` must come first: the store is the coordinator.
    """

    name = "torch"

    def __init__(self, device_backend: str | None = None, device: str | None = None) -> None:
        # The rank's own device (RankSpec.device: fixed for the process's life) decides, not its
        # group rank: the rank changes at every resize, and a group rank mapped onto a GPU would
        # then differ from the device the model was put on.
        self._cuda_device = torch.device(device) if device and device.startswith("cuda") else None
        if device_backend is None:
            if device is not None:
                device_backend = "nccl" if self._cuda_device is not None else "gloo"
            else:
                device_backend = "nccl" if torch.cuda.is_available() else "gloo"
        self._device_backend = device_backend
        self._group: Any = None
        self._store: CoordinatorStore | None = None
        self._coordinator: tuple[str, int, str] | None = None
        self._rank = 0
        self._world_size = 1
        self._timeout = datetime.timedelta(seconds=60)
        # abort() runs on the heartbeat's thread; the lock keeps it to one group's sockets.
        self._abort_lock = threading.Lock()
        self._mesh: frozenset[str] = frozenset()
        self._aborted = ""

    @property
    def device(self) -> torch.device:
        """Where tensors handed to collectives must live."""
        if self._device_backend != "nccl":
            return torch.device("cpu")
        return self._cuda_device or torch.device("cuda", torch.cuda.current_device())

    def attach_coordinator(self, host: str, port: int, token: str) -> None:
        """Where the job's coordinator (and so the rendezvous keys) is, and its token."""
        self._coordinator = (host, port, token)

    @property
    def group(self) -> Any:
        """The current epoch's gloo or nccl group (None between epochs); ``ctx.wrap`` builds
        DDP on it."""
        return self._group

    def init(self, rank: int, info: RendezvousInfo, timeout_s: float) -> None:
        """Form the group of ``info.epoch``; raises within ``timeout_s`` if a peer is missing."""
        self.shutdown()
        if self._coordinator is None:
            raise RuntimeError("TorchBackend.attach_coordinator() has not been called")
        self._timeout = datetime.timedelta(seconds=timeout_s)
        self._store = CoordinatorStore(*self._coordinator, timeout_s=timeout_s)
        prefixed = dist.PrefixStore(epoch_prefix(info.epoch), self._store)
        group: dist.ProcessGroupNCCL | dist.ProcessGroupGloo
        mesh: frozenset[str] = frozenset()
        if self._device_backend == "nccl":
            options = dist.ProcessGroupNCCL.Options()
            options._timeout = self._timeout
            if self._cuda_device is not None:
                torch.cuda.set_device(self._cuda_device)
            group = dist.ProcessGroupNCCL(prefixed, rank, info.world_size, options)
        else:
            # private (no public way to pick Gloo's devices), so absent from torch's stubs
            gloo = dist.ProcessGroupGloo._Options()  # type: ignore[attr-defined]
            gloo._timeout = self._timeout
            # Listen (and connect) on the interface that reaches the coordinator, not on
            # whatever the host name resolves to.
            gloo._devices = [
                dist.ProcessGroupGloo.create_device(hostname=self._store.local_address)
            ]
            before = socket_inodes()
            group = dist.ProcessGroupGloo(prefixed, rank, info.world_size, gloo)
            # gloo connects every pair while the group is built: the sockets opened meanwhile,
            # less any to the coordinator, are this epoch's mesh (what abort() shuts down).
            mesh = tcp_connections_since(before, self._store.peer_address)
        with self._abort_lock:
            self._group, self._mesh, self._aborted = group, mesh, ""
        self._rank = rank
        self._world_size = info.world_size

    def abort(self, reason: str) -> None:
        """Make the current group's pending collective raise now (a peer of this epoch is lost
        or this rank was dropped); safe from another thread, idempotent.

        nccl: ``ProcessGroupNCCL.abort()`` (ncclCommAbort). gloo has no such call that wakes a
        blocked ``recv`` (its ``abort()`` leaves the call waiting for its timeout), so the
        epoch's own sockets are shut down: the call here fails with "connection closed", and
        so do the calls of peers blocked on this rank.
        """
        with self._abort_lock:
            group, mesh = self._group, self._mesh
            if group is None or self._aborted:
                return
            self._aborted = reason
        if self._device_backend == "nccl":
            with contextlib.suppress(RuntimeError):
                group.abort()
        else:
            shut_down(mesh)

    @property
    def aborted(self) -> str:
        """Why the current group was aborted ("" if it was not)."""
        return self._aborted

    def shutdown(self) -> None:
        """Drop the group; closing its sockets also wakes peers blocked on this rank."""
        with self._abort_lock:
            group, self._group = self._group, None
            self._mesh, self._aborted = frozenset(), ""
        if group is not None:
            with contextlib.suppress(RuntimeError):
                group.shutdown()
        store, self._store = self._store, None
        if store is not None:
            store.close()

    def _require_group(self) -> Any:
        if self._group is None:
            raise RuntimeError("no process group: init() has not succeeded")
        return self._group

    def allreduce_mean_(self, tensors: list[Any]) -> None:
        """Average ``tensors`` in place (one flat buffer, one collective)."""
        if not tensors:
            return
        group = self._require_group()
        flat = torch.cat([t.detach().reshape(-1).to(self.device, torch.float64) for t in tensors])
        group.allreduce([flat]).wait(self._timeout)
        flat /= self._world_size
        offset = 0
        for tensor in tensors:
            count = tensor.numel()
            chunk = flat[offset : offset + count].view_as(tensor)
            tensor.copy_(chunk.to(tensor.device, tensor.dtype))
            offset += count

    def _broadcast(self, tensor: torch.Tensor, src: int) -> None:
        options = dist.BroadcastOptions()
        options.rootRank = src
        options.rootTensor = 0
        self._require_group().broadcast([tensor], options).wait(self._timeout)

    def broadcast_object(self, obj: Any, src: int) -> Any:
        """Encode on ``src`` (:func:`~parsl_malleable.elastic.safe_state.encode_state`), send
        length then bytes, decode everywhere else with ``weights_only=True``: a peer cannot make
        this rank run code."""
        if self._rank == src:
            data = encode_state(obj)
            length = torch.tensor([data.numel()], dtype=torch.int64)
        else:
            length = torch.zeros(1, dtype=torch.int64)
        length = length.to(self.device)
        self._broadcast(length, src)
        if self._rank != src:
            data = torch.empty(int(length.item()), dtype=torch.uint8)
        payload = data.to(self.device)
        self._broadcast(payload, src)
        if self._rank == src:
            return obj
        return decode_state(payload)

    def barrier(self) -> None:
        """Wait for every rank of the group."""
        self._require_group().barrier().wait(self._timeout)
