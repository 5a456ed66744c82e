"""``DistributedDataParallel`` over each membership epoch's group: what ``ctx.wrap`` returns.

An :class:`ElasticDDP` is an ``nn.Module`` that stays the same object for the whole job while the
``DistributedDataParallel`` inside it is rebuilt over every new group (the runtime calls
:meth:`ElasticDDP.rebuild` when a group forms). Gradients are averaged by DDP's reducer, bucket
by bucket while ``backward()`` runs, through a communication hook that

* weights each rank's part by the sampler's :meth:`weight` (``local_count * world_size /
  global_count``) before the sum and divides by the world size after it, so a global batch
  split unevenly (not a multiple of the world size, the short last step of an epoch) averages
  to exactly the one-rank gradient (``ElasticDistributedSampler``; the micro-batches of an
  accumulation are weighted by the loop, with its ``loss_weight()``), and
* records a failed collective, so that the runtime treats the error that ``backward()`` raises
  when a peer dies as a lost peer (roll back to the last commit) and not as a bug in user code.
"""

# No ``from __future__ import annotations``: DDP checks the hook's annotations as objects.
import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

WeightSource = Callable[[], float]


def process_group(backend_group: Any, rank: int, world_size: int) -> dist.ProcessGroup:
    """A ``ProcessGroup`` (what DDP takes) over a bare gloo or nccl backend object.

    The elastic torch backend builds ``ProcessGroupGloo``/``ProcessGroupNCCL`` directly, outside
    ``init_process_group``; DDP needs the ``ProcessGroup`` front that ``new_group`` would put
    around it. Both share the backend, so DDP's collectives and the runtime's run in one order.
    """
    nccl = getattr(dist, "ProcessGroupNCCL", None)
    is_nccl = nccl is not None and isinstance(backend_group, nccl)
    kind = dist.ProcessGroup.BackendType.NCCL if is_nccl else dist.ProcessGroup.BackendType.GLOO
    device = torch.device("cuda" if is_nccl else "cpu")
    group = dist.ProcessGroup(dist.HashStore(), rank, world_size)
    group._set_default_backend(kind)
    group._register_backend(device, kind, backend_group)
    return group


class _HookState:
    """What the communication hook needs: the group, its size, the weight, the failure seen."""

    def __init__(self, backend_group: Any, world_size: int, weight: "WeightSource | None") -> None:
        self.backend_group = backend_group
        self.world_size = world_size
        self.weight = weight
        self.failure: BaseException | None = None


def _weighted_allreduce(
    state: _HookState, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    buffer = bucket.buffer()
    if state.weight is not None:
        factor = state.weight()
        if factor != 1.0:
            buffer.mul_(factor)
    future = state.backend_group.allreduce([buffer]).get_future()

    def average(done: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
        try:
            return done.value()[0].div_(state.world_size)
        except Exception as exc:
            state.failure = exc
            raise

    return future.then(average)


class ElasticDDP(nn.Module):
    """``module`` trained data-parallel over the current group; rebuilt at every resize.

    Use it as a ``DistributedDataParallel`` model: call it, ``backward()`` its loss, step the
    optimizer of ``module``'s parameters; :meth:`no_sync` skips the gradient exchange for the
    micro-batches of a gradient accumulation. ``state_dict()`` keys start with ``module.``, as
    DDP's do. Created by ``ctx.wrap(model, **ddp_options)``; ``ddp_options`` go to DDP.
    """

    # Declared so that reads get these types, not nn.Module.__getattr__'s Tensor | Module.
    _ddp: DistributedDataParallel | None
    _ddp_options: dict[str, Any]
    _hook_state: _HookState | None

    def __init__(self, module: nn.Module, **ddp_options: Any) -> None:
        super().__init__()
        self.module = module
        # Plain attributes, not submodules: parameters() must list module's parameters once.
        object.__setattr__(self, "_ddp", None)
        object.__setattr__(self, "_ddp_options", dict(ddp_options))
        object.__setattr__(self, "_hook_state", None)

    @property
    def ddp(self) -> DistributedDataParallel:
        """The DDP model of the current group (raises outside ``ctx.run``'s loop)."""
        if self._ddp is None:
            raise RuntimeError(
                "the wrapped model has no process group: call it inside the loop given to "
                "ctx.run (groups exist only there)"
            )
        return self._ddp

    @property
    def failure(self) -> BaseException | None:
        """The collective error seen in the current group's gradient exchange, if any."""
        state = self._hook_state
        return None if state is None else state.failure

    def rebuild(
        self,
        backend_group: Any,
        rank: int,
        world_size: int,
        device: torch.device,
        weight: WeightSource | None = None,
    ) -> None:
        """Build the DDP model over a new group (runs collectives: every rank calls it)."""
        self.release()
        options = dict(self._ddp_options)
        if device.type == "cuda":
            # The module's own GPU: the group's rank (which can change at a resize) says
            # nothing about where this process put its model.
            param = next(self.module.parameters(), None)
            index = param.device.index if param is not None and param.is_cuda else None
            options.setdefault(
                "device_ids", [torch.cuda.current_device() if index is None else index]
            )
        group = process_group(backend_group, rank, world_size)
        ddp = DistributedDataParallel(self.module, process_group=group, **options)
        ddp.training = self.training
        hook_state = _HookState(backend_group, world_size, weight)
        ddp.register_comm_hook(hook_state, _weighted_allreduce)
        object.__setattr__(self, "_ddp", ddp)
        object.__setattr__(self, "_hook_state", hook_state)

    def release(self) -> None:
        """Drop the DDP model of the old group and the hooks it put on the parameters."""
        ddp, hook_state = self._ddp, self._hook_state
        object.__setattr__(self, "_ddp", None)
        if hook_state is not None:
            hook_state.backend_group = None
        if ddp is not None:
            with contextlib.suppress(Exception):
                ddp._remove_autograd_hooks()

    def train(self, mode: bool = True) -> "ElasticDDP":
        """Set training mode here, on ``module`` and on the current DDP model."""
        super().train(mode)
        if self._ddp is not None:
            self._ddp.training = mode
        return self

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Run the DDP model of the current group."""
        return self.ddp(*args, **kwargs)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Accumulate gradients locally (DDP's ``no_sync``): no exchange in this block."""
        with self.ddp.no_sync():
            yield
