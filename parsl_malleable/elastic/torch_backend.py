"""torch.distributed implementation of the elastic backend interface.

The controller serves one ``TCPStore``; each membership epoch uses its own ``PrefixStore`` on it,
so keys of an abandoned epoch (a rank died half-way through forming it) never confuse the next
one. Ranks use gloo on CPU and nccl when CUDA is available, always with a timeout, so that a peer
that never arrives or dies mid-collective makes the call raise instead of hanging.
"""

from __future__ import annotations

import contextlib
import datetime
import threading
from typing import Any

import torch
import torch.distributed as dist

from parsl_malleable.elastic.backend import RendezvousInfo
from parsl_malleable.elastic.safe_state import decode_state, encode_state


class TorchRendezvousHost:
    """A ``TCPStore`` server in the controller process, shared by every epoch of one job."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self._requested_port = port
        self._store: dist.TCPStore | None = None
        self._lock = threading.Lock()

    @property
    def port(self) -> int:
        """The port the store listens on (valid after :meth:`start`)."""
        if self._store is None:
            raise RuntimeError("TorchRendezvousHost.start() has not been called")
        return self._store.port

    def start(self) -> None:
        """Start the store server (idempotent)."""
        with self._lock:
            if self._store is None:
                self._store = dist.TCPStore(
                    self.host,
                    self._requested_port,
                    is_master=True,
                    wait_for_workers=False,
                    timeout=datetime.timedelta(seconds=60),
                )

    def prepare_epoch(self, epoch: int, world_size: int) -> RendezvousInfo:
        """Nothing to reset: the epoch number namespaces the keys ranks write."""
        self.start()
        return RendezvousInfo(
            backend="torch", host=self.host, port=self.port, epoch=epoch, world_size=world_size
        )

    def close(self) -> None:
        """Drop the store; the server thread ends with the last reference."""
        with self._lock:
            self._store = None


class TorchBackend:
    """Rank side: one process-group object per membership epoch.

    The group is built directly (``ProcessGroupGloo`` / ``ProcessGroupNCCL``) rather than through
    ``init_process_group``: the default group keeps a process-wide name counter that a failed
    initialisation leaves out of step with the other ranks, after which no later epoch can form.
    """

    name = "torch"

    def __init__(self, device_backend: str | None = None) -> None:
        self._device_backend = device_backend or ("nccl" if torch.cuda.is_available() else "gloo")
        self._group: Any = None
        self._rank = 0
        self._world_size = 1
        self._timeout = datetime.timedelta(seconds=60)

    @property
    def device(self) -> torch.device:
        """Where tensors handed to collectives must live."""
        return torch.device("cuda") if self._device_backend == "nccl" else torch.device("cpu")

    @property
    def group(self) -> Any:
        """The current epoch's gloo or nccl group (None between epochs); ``ctx.wrap`` builds
        DDP on it."""
        return self._group

    def init(self, rank: int, info: RendezvousInfo, timeout_s: float) -> None:
        """Form the group of ``info.epoch``; raises within ``timeout_s`` if a peer is missing."""
        self.shutdown()
        self._timeout = datetime.timedelta(seconds=timeout_s)
        store = dist.TCPStore(info.host, info.port, is_master=False, timeout=self._timeout)
        prefixed = dist.PrefixStore(f"epoch-{info.epoch}/", store)
        if self._device_backend == "nccl":
            options = dist.ProcessGroupNCCL.Options()
            options._timeout = self._timeout
            torch.cuda.set_device(rank % torch.cuda.device_count())
            group = dist.ProcessGroupNCCL(prefixed, rank, info.world_size, options)
        else:
            group = dist.ProcessGroupGloo(prefixed, rank, info.world_size, self._timeout)
        self._group = group
        self._rank = rank
        self._world_size = info.world_size

    def shutdown(self) -> None:
        """Drop the group; closing its sockets also wakes peers blocked on this rank."""
        group, self._group = self._group, None
        if group is not None:
            with contextlib.suppress(RuntimeError):
                group.shutdown()

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
