"""Training state that survives membership changes: commits, rollback, resize hooks.

``ElasticState`` gathers what a rank must agree on with its peers: model, optimizer, scheduler,
the sampler's position and user fields. ``commit()`` copies it in memory (cheap); a failed
collective rolls back to that copy; a new rank receives it from a survivor; a disk checkpoint is
written from it. Everything in it must be tensors or plain Python values, so that checkpoints can
be loaded with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch

from parsl_malleable.elastic.checkpoint import model_fingerprint
from parsl_malleable.elastic.metric_book import MAX_REPORTS
from parsl_malleable.elastic.sampler import (
    BatchMode,
    ElasticDistributedSampler,
    batch_mode,
    share,
)

ResizeHook = Callable[["ElasticState", int, int], None]


# One ctx.report: (step, ((name, value), ...)); plain types, so a checkpoint loads it with
# torch.load(weights_only=True).
Report = tuple[int, tuple[tuple[str, float], ...]]
# As many as the coordinator's book keeps: both hold the newest steps of one timeline.
MAX_STATE_REPORTS = MAX_REPORTS


def _reports_from(value: Any) -> tuple[Report, ...]:
    """The reports of a snapshot (a peer's or a checkpoint's; none in one from before they
    were kept), as tuples; anything else is ignored, not trusted."""
    reports: list[Report] = []
    for entry in value or ():
        try:
            step, pairs = entry
            reports.append((int(step), tuple((str(k), float(v)) for k, v in pairs)))
        except (TypeError, ValueError):
            continue
    return tuple(reports[-MAX_STATE_REPORTS:])


class ElasticSampler:
    """Hands each rank its share of the next global batch; position survives any resize.

    An epoch is one permutation of ``range(num_samples)`` (seeded by ``seed`` and the epoch). A
    step consumes the next ``batch_size`` entries (the global batch, whatever the world size;
    ``world_size * batch_size`` with ``batch="per_rank"``), split into contiguous near-equal
    parts by rank. The state is only ``(epoch, position)``, independent of the world size, so
    after a resize the remaining samples of the epoch are re-sharded over the new ranks: none is
    seen twice in an epoch and none is skipped. ``batch=None`` takes the job's ``batch`` option
    in ``ctx.state`` (``"global"`` unless the app says otherwise).
    """

    def __init__(
        self,
        num_samples: int,
        batch_size: int,
        seed: int = 0,
        shuffle: bool = True,
        *,
        batch: BatchMode | None = None,
    ):
        if num_samples < 1 or batch_size < 1:
            raise ValueError(
                f"ElasticSampler needs num_samples >= 1 and batch_size >= 1; "
                f"got {num_samples} and {batch_size}"
            )
        self.num_samples = num_samples
        self.batch_size = batch_size
        self.batch = batch_mode(batch, "ElasticSampler")
        self.seed = seed
        self.shuffle = shuffle
        self.epoch = 0
        self.position = 0
        self._perm: tuple[int, torch.Tensor] | None = None

    def _permutation(self) -> torch.Tensor:
        if self._perm is None or self._perm[0] != self.epoch:
            if self.shuffle:
                gen = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
                perm = torch.randperm(self.num_samples, generator=gen)
            else:
                perm = torch.arange(self.num_samples)
            self._perm = (self.epoch, perm)
        return self._perm[1]

    def global_batch(self, world_size: int) -> int:
        """Samples in a full global batch at ``world_size`` ranks."""
        return self.batch_size * (world_size if self.batch == "per_rank" else 1)

    def global_count(self, world_size: int) -> int:
        """Samples in the next global batch (the last one of an epoch may be short)."""
        return min(self.global_batch(world_size), self.num_samples - self.position)

    def local_indices(self, rank: int, world_size: int) -> torch.Tensor:
        """Indices (into the data set) of this rank's part of the next global batch."""
        offset, length = share(self.global_count(world_size), world_size, rank)
        start = self.position + offset
        return self._permutation()[start : start + length]

    def advance(self, world_size: int) -> None:
        """Move past the global batch just trained on."""
        self.position += self.global_count(world_size)
        if self.position >= self.num_samples:
            self.epoch += 1
            self.position = 0

    def state_dict(self) -> dict[str, int]:
        """Position as plain integers."""
        return {"epoch": self.epoch, "position": self.position, "num_samples": self.num_samples}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Restore a position saved by :meth:`state_dict` (same data set size required)."""
        if int(state["num_samples"]) != self.num_samples:
            raise ValueError(
                f"sampler state is for {state['num_samples']} samples, this sampler has "
                f"{self.num_samples}"
            )
        self.epoch = int(state["epoch"])
        self.position = int(state["position"])


def linear_lr_scaling(state: ElasticState, old_world_size: int, new_world_size: int) -> None:
    """Scale learning rates with the world size (the linear rule of Goyal et al., 2017).

    For a global batch that grows with the world (``batch="per_rank"``), where it is the default
    resize hook; with the default fixed global batch nothing needs scaling. Give it explicitly
    (``ctx.state(..., resize_hooks=[linear_lr_scaling])``) to scale in other cases.
    """
    if state.optimizer is None or old_world_size == new_world_size or old_world_size < 1:
        return
    factor = new_world_size / old_world_size
    for group in state.optimizer.param_groups:
        group["lr"] *= factor
        if "initial_lr" in group:
            group["initial_lr"] *= factor
    scheduler = state.scheduler
    if scheduler is not None and hasattr(scheduler, "base_lrs"):
        scheduler.base_lrs = [lr * factor for lr in scheduler.base_lrs]


def default_resize_hooks(batch: BatchMode | None) -> list[ResizeHook]:
    """The resize hooks of a state made without ``resize_hooks=``: :func:`linear_lr_scaling`
    when the global batch grows with the world (``"per_rank"``), else none: the learning rate
    is never scaled behind the user's back."""
    return [linear_lr_scaling] if batch == "per_rank" else []


def job_batch_defaults(
    batch: str,
    sampler: ElasticSampler | ElasticDistributedSampler | None,
    resize_hooks: list[ResizeHook] | None,
) -> list[ResizeHook]:
    """Apply a job's ``batch`` option where the training function chose nothing: a sampler
    made without ``batch=`` takes it; the resize hooks, when not given, follow the sampler's
    mode (the job's without a sampler). Returns the resize hooks."""
    mode = batch_mode(batch, "the job's batch option") or "global"
    if sampler is not None and sampler.batch is None:
        sampler.batch = mode
    if resize_hooks is not None:
        return list(resize_hooks)
    return default_resize_hooks(sampler.batch if sampler is not None else mode)


class ElasticState:
    """Model, optimizer, scheduler, sampler, gradient scaler and user fields, with in-memory
    commits.

    User fields are passed as keyword arguments and read or written as attributes
    (``state.best_accuracy``); they must be plain values or tensors. ``world_size`` is the group
    size the hyper-parameters currently correspond to (1 before training starts). Resize hooks
    run when it changes; without ``resize_hooks=`` there are none (the default global batch
    needs no scaling), or :func:`linear_lr_scaling` when the sampler's batch is ``"per_rank"``
    (give the optimizer the learning rate of one rank then).
    """

    _OWN = frozenset(
        {
            "model",
            "optimizer",
            "scheduler",
            "sampler",
            "scaler",
            "fields",
            "world_size",
            "step",
            "reports",
            "resize_hooks",
            "_committed",
            "_commit_hook",
            "_fingerprint",
        }
    )

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        scheduler: Any = None,
        sampler: ElasticSampler | ElasticDistributedSampler | None = None,
        resize_hooks: list[ResizeHook] | None = None,
        scaler: Any = None,
        **fields: Any,
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.sampler = sampler
        self.scaler = scaler  # e.g. torch.amp.GradScaler: its scale and growth tracker
        self.fields: dict[str, Any] = dict(fields)
        self.world_size = 1
        self.step = 0
        # The metrics of ctx.report, committed with the rest: a resume from a checkpoint hands
        # them to a driver that never received them. A tuple, so a commit shares it uncopied.
        self.reports: tuple[Report, ...] = ()
        self.resize_hooks: list[ResizeHook] = (
            default_resize_hooks(sampler.batch if sampler is not None else None)
            if resize_hooks is None
            else list(resize_hooks)
        )
        self._committed: dict[str, Any] | None = None
        self._commit_hook: Callable[[ElasticState], None] | None = None
        self._fingerprint: str | None = None

    def __getattr__(self, name: str) -> Any:
        fields = self.__dict__.get("fields", {})
        if name in fields:
            return fields[name]
        raise AttributeError(f"ElasticState has no field {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self._OWN or name not in self.__dict__.get("fields", {}):
            if name not in self._OWN:
                raise AttributeError(
                    f"ElasticState has no field {name!r}; declare user fields as keyword "
                    f"arguments when creating the state"
                )
            object.__setattr__(self, name, value)
        else:
            self.fields[name] = value

    @property
    def fingerprint(self) -> str:
        """Hash of the model's parameter names, shapes and dtypes (checkpoints must match)."""
        if self._fingerprint is None:
            self._fingerprint = model_fingerprint(self.model)
        return self._fingerprint

    @property
    def has_commit(self) -> bool:
        """Whether a consistent point has been committed (or received) in this process."""
        return self._committed is not None

    def snapshot(self) -> dict[str, Any]:
        """A deep copy of the whole state as tensors and plain values."""
        return {
            "step": self.step,
            "world_size": self.world_size,
            "model": {k: v.detach().clone() for k, v in self.model.state_dict().items()},
            "optimizer": (
                copy.deepcopy(self.optimizer.state_dict()) if self.optimizer is not None else None
            ),
            "scheduler": (
                copy.deepcopy(self.scheduler.state_dict()) if self.scheduler is not None else None
            ),
            "sampler": self.sampler.state_dict() if self.sampler is not None else None,
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "fields": copy.deepcopy(self.fields),
            "reports": self.reports,
        }

    def load_snapshot(self, snap: dict[str, Any]) -> None:
        """Make this state equal to ``snap`` (from :meth:`snapshot`, a peer or a checkpoint)."""
        self.model.load_state_dict(snap["model"])
        if self.optimizer is not None and snap.get("optimizer") is not None:
            self.optimizer.load_state_dict(copy.deepcopy(snap["optimizer"]))
        if self.scheduler is not None and snap.get("scheduler") is not None:
            self.scheduler.load_state_dict(copy.deepcopy(snap["scheduler"]))
        if self.sampler is not None and snap.get("sampler") is not None:
            self.sampler.load_state_dict(snap["sampler"])
        if self.scaler is not None and snap.get("scaler") is not None:
            self.scaler.load_state_dict(dict(snap["scaler"]))
        self.fields = copy.deepcopy(dict(snap.get("fields") or {}))
        self.step = int(snap["step"])
        self.world_size = int(snap["world_size"])
        self.reports = _reports_from(snap.get("reports"))
        self._committed = snap

    def record_report(self, step: int, values: dict[str, float]) -> None:
        """Keep ``ctx.report``'s ``values`` of ``step`` (replacing an earlier one of the same
        step) until the next commit makes them part of the committed state; the newest
        :data:`MAX_STATE_REPORTS` steps are kept."""
        kept = tuple(r for r in self.reports if r[0] != step)
        self.reports = (*kept, (step, tuple(sorted(values.items()))))[-MAX_STATE_REPORTS:]

    def commit(self) -> None:
        """Mark a consistent point: every rank calls it at the same place after each update.

        Increments ``step``, copies the state in memory, and lets the runtime check membership
        (a pending change stops the epoch here) and write periodic disk checkpoints.
        """
        self.step += 1
        self._committed = self.snapshot()
        if self._commit_hook is not None:
            self._commit_hook(self)

    def samples_trained(self) -> int:
        """Samples trained so far: the sampler's position over all epochs, else the steps.

        Rank 0 reports it at membership checks; the controller turns it into samples/s.
        """
        if self.sampler is None:
            return self.step
        return self.sampler.epoch * self.sampler.num_samples + self.sampler.position

    def restore(self) -> None:
        """Roll back to the last commit (after a failed collective)."""
        if self._committed is not None:
            self.load_snapshot(self._committed)

    def committed(self) -> dict[str, Any] | None:
        """The last committed snapshot (shared, do not modify)."""
        return self._committed

    def resized(self, new_world_size: int) -> None:
        """Apply the resize hooks if the group size changed, then record the new size."""
        old = self.world_size
        if old != new_world_size:
            for hook in self.resize_hooks:
                hook(self, old, new_world_size)
        self.world_size = new_world_size
