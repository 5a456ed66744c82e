"""A ``torch.utils.data`` batch sampler whose place in the epoch survives any resize.

``ElasticDistributedSampler`` plays the part of ``DistributedSampler`` for a malleable app: give
it to a ``DataLoader`` as ``batch_sampler`` (any ``num_workers``). Its state is ``(epoch,
position)`` in a per-epoch permutation of the data set, independent of the world size; it lives
in the committed state, so after a resize, a rollback or a restart from disk the rest of the
epoch is re-sharded over the ranks of the new group: no sample is trained twice in an epoch and
none is skipped.

By default ``batch_size`` is the *global* batch, the samples of one optimizer step whatever the
world size: the same config trains the same way on any number of nodes. ``batch="per_rank"``
keeps the older meaning (each rank's batch, so the global batch grows with the world).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sized
from typing import Literal

import torch
from torch.utils.data import Sampler

logger = logging.getLogger(__name__)

BatchMode = Literal["global", "per_rank"]
BATCH_MODES: tuple[BatchMode, ...] = ("global", "per_rank")


def batch_mode(value: str | None, where: str) -> BatchMode | None:
    """``value`` checked as a batch mode (None: not chosen); a clear error names ``where``."""
    if value is None or value in BATCH_MODES:
        return value
    raise ValueError(f"{where}: batch must be one of {', '.join(BATCH_MODES)}; got {value!r}")


def share(count: int, parts: int, index: int) -> tuple[int, int]:
    """``(offset, length)`` of part ``index`` when ``count`` items are cut into ``parts``
    contiguous near-equal parts (the first ``count % parts`` parts one longer)."""
    base, extra = divmod(count, parts)
    return index * base + min(index, extra), base + (1 if index < extra else 0)


class ElasticDistributedSampler(Sampler[list[int]]):
    """Yields this rank's (micro-)batches of each global step, from the committed position to
    the epoch's end.

    A *global step* takes the next ``batch_size`` entries of the epoch's permutation (seeded by
    ``seed`` and the epoch; ``world_size * batch_size`` with ``batch="per_rank"``), split into
    contiguous near-equal parts by rank; the last step of an epoch may be short. Entry ``k`` of
    an epoch is the same sample whatever the world size, and with the default global batch so is
    every step's set of samples. With ``micro_batch``, a rank whose part is larger takes it in
    micro-batches of at most that many samples (gradient accumulation); every rank of a step
    takes the same number of micro-batches (:meth:`micro_count`), so DDP's collectives stay
    matched. A micro-batch with no sample (a step with fewer samples than ranks, or a part
    shorter than the micro-batch count) gets one *padding* index (the step's first sample) with
    weight 0: the rank takes part in the step but trains on nothing.

    ``batch``: ``"global"`` or ``"per_rank"``; None (the default) takes the job's ``batch``
    option when the sampler is given to ``ctx.state`` (``"global"`` unless the app says
    otherwise, and outside a job).

    The training loop multiplies each micro-batch's mean loss by :meth:`loss_weight` (1 without
    micro-batches), calls :meth:`advance` after each micro-batch, and steps the optimizer and
    calls ``state.commit()`` when ``advance()`` returns True (the global step is complete). The
    runtime calls :meth:`set_group` when a group forms and reads :meth:`weight` in the gradient
    hook of ``ctx.wrap`` models; together the two weights make the averaged gradient the exact
    mean over the global step, however it is split over ranks and micro-batches.
    """

    def __init__(
        self,
        data: Sized | int,
        batch_size: int,
        seed: int = 0,
        shuffle: bool = True,
        *,
        micro_batch: int | None = None,
        batch: BatchMode | None = None,
    ) -> None:
        num_samples = data if isinstance(data, int) else len(data)
        if num_samples < 1 or batch_size < 1:
            raise ValueError(
                f"ElasticDistributedSampler needs at least one sample and batch_size >= 1; "
                f"got {num_samples} samples and batch_size {batch_size}"
            )
        if micro_batch is not None and micro_batch < 1:
            raise ValueError(
                f"ElasticDistributedSampler needs micro_batch >= 1 (or None); got {micro_batch}"
            )
        self.num_samples = num_samples
        self.batch_size = batch_size
        self.micro_batch = micro_batch
        self.batch = batch_mode(batch, "ElasticDistributedSampler")
        self.seed = seed
        self.shuffle = shuffle
        self.epoch = 0
        self.position = 0
        self.micro = 0  # index of the current micro-batch in its global step
        self.rank = -1
        self.world_size = 0
        self._perm: tuple[int, torch.Tensor] | None = None

    # ---------------------------------------------------------------- group

    def set_group(self, rank: int, world_size: int) -> None:
        """The rank and size of the group now training (the runtime calls it at each entry)."""
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in a group of {world_size}")
        if self.batch != "per_rank" and self.batch_size < world_size and rank == 0:
            logger.warning(
                "global batch %d < %d ranks: %d rank(s) train on padding each step",
                self.batch_size,
                world_size,
                world_size - self.batch_size,
            )
        self.rank = rank
        self.world_size = world_size
        # A group forms at a commit, which is a step boundary.
        self.micro = 0

    def _require_group(self) -> None:
        if self.world_size < 1:
            raise RuntimeError(
                "ElasticDistributedSampler has no group yet: iterate it inside the loop given "
                "to ctx.run (with the sampler in ctx.state(..., sampler=...)), or call "
                "set_group(rank, world_size)"
            )

    # --------------------------------------------------------- step layout

    def permutation(self, epoch: int | None = None) -> torch.Tensor:
        """The order of the data set in ``epoch`` (default: the current one)."""
        epoch = self.epoch if epoch is None else epoch
        if self._perm is None or self._perm[0] != epoch:
            if self.shuffle:
                gen = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
                perm = torch.randperm(self.num_samples, generator=gen)
            else:
                perm = torch.arange(self.num_samples)
            self._perm = (epoch, perm)
        return self._perm[1]

    def global_batch(self) -> int:
        """Samples in a full global step: ``batch_size``, or ``world_size * batch_size`` with
        ``batch="per_rank"``."""
        self._require_group()
        return self.batch_size * (self.world_size if self.batch == "per_rank" else 1)

    def _global_count_at(self, position: int) -> int:
        return min(self.global_batch(), self.num_samples - position)

    def _micro_count_of(self, count: int) -> int:
        """Micro-batches every rank takes in a step of ``count`` samples."""
        if self.micro_batch is None:
            return 1
        widest = -(-count // self.world_size)
        return max(1, -(-widest // self.micro_batch))

    def global_count(self) -> int:
        """Samples in the current global step (the last one of an epoch may be short)."""
        self._require_group()
        return self._global_count_at(self.position)

    def local_count(self) -> int:
        """Samples of this rank in the current global step, over all its micro-batches (0 for a
        padded part)."""
        self._require_group()
        return share(self.global_count(), self.world_size, self.rank)[1]

    def micro_count(self) -> int:
        """Micro-batches of the current global step (the same on every rank; 1 without
        ``micro_batch``)."""
        self._require_group()
        return self._micro_count_of(self.global_count())

    def local_micro_count(self) -> int:
        """Samples of this rank in the current micro-batch (0 for padding)."""
        return share(self.local_count(), self.micro_count(), self.micro)[1]

    def last_micro(self) -> bool:
        """Whether the current micro-batch is its step's last (exchange gradients after it)."""
        return self.micro == self.micro_count() - 1

    def weight(self) -> float:
        """Factor that makes the group's mean of per-rank gradients the exact mean over the
        global step: ``local_count * world_size / global_count`` (1 when parts are equal)."""
        return self.local_count() * self.world_size / self.global_count()

    def loss_weight(self) -> float:
        """Factor for the current micro-batch's mean loss: its share of this rank's part of
        the step (1 without micro-batches, 0 for padding)."""
        local = self.local_count()
        return self.local_micro_count() / local if local else 0.0

    def __len__(self) -> int:
        """Micro-batches left in the current epoch (every rank yields this many)."""
        self._require_group()
        left = self.num_samples - self.position
        full, rest = divmod(left, self.global_batch())
        count = full * self._micro_count_of(self.global_batch())
        if rest:
            count += self._micro_count_of(rest)
        return count - self.micro

    def __iter__(self) -> Iterator[list[int]]:
        """This rank's micro-batches of each remaining step of the epoch, from the current
        position."""
        self._require_group()
        perm = self.permutation().tolist()
        position, micro, rank = self.position, self.micro, self.rank
        while position < self.num_samples:
            count = self._global_count_at(position)
            offset, length = share(count, self.world_size, rank)
            micros = self._micro_count_of(count)
            for index in range(micro, micros):
                sub, sub_length = share(length, micros, index)
                start = position + offset + sub
                yield perm[start : start + sub_length] if sub_length else [perm[position]]
            position += count
            micro = 0

    # ------------------------------------------------------------ position

    def advance(self) -> bool:
        """Move past the micro-batch just trained on (call once per micro-batch); True when
        that completed the global step: step the optimizer and commit then."""
        if self.micro + 1 < self.micro_count():
            self.micro += 1
            return False
        self.micro = 0
        self.position += self.global_count()
        if self.position >= self.num_samples:
            self.epoch += 1
            self.position = 0
        return True

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch`` from its beginning (``DistributedSampler``'s call; a malleable loop
        does not need it, :meth:`advance` moves on to the next epoch)."""
        if epoch != self.epoch:
            self.epoch = epoch
            self.position = 0
            self.micro = 0

    def state_dict(self) -> dict[str, int]:
        """Position as plain integers (the world size is not part of it).

        Raises in the middle of a global step: a commit belongs after the step's last
        micro-batch (when :meth:`advance` returns True), since the split of a step into
        micro-batches depends on the world size and cannot be resumed on another."""
        if self.micro:
            raise RuntimeError(
                f"ElasticDistributedSampler: state saved after micro-batch {self.micro} of "
                f"{self.micro_count()} of a global step; call state.commit() only when "
                f"sampler.advance() returns True"
            )
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
        self.micro = 0
