"""A ``torch.utils.data`` batch sampler whose place in the epoch survives any resize.

``ElasticDistributedSampler`` plays the part of ``DistributedSampler`` for a malleable app: give
it to a ``DataLoader`` as ``batch_sampler`` (any ``num_workers``). Its state is ``(epoch,
position)`` in a per-epoch permutation of the data set, independent of the world size; it lives
in the committed state, so after a resize, a rollback or a restart from disk the rest of the
epoch is re-sharded over the ranks of the new group: no sample is trained twice in an epoch and
none is skipped.
"""

from __future__ import annotations

from collections.abc import Iterator, Sized

import torch
from torch.utils.data import Sampler


class ElasticDistributedSampler(Sampler[list[int]]):
    """Yields this rank's batch of each global step, from the committed position to the epoch's end.

    A *global step* takes the next ``world_size * batch_size`` entries of the epoch's permutation
    (seeded by ``seed`` and the epoch), split into contiguous near-equal parts by rank; the last
    step of an epoch may be short. Every rank yields the same number of batches, so DDP's
    collectives stay matched. When a short step has fewer samples than ranks, a rank without a
    sample gets one *padding* index (the step's first sample) whose gradient weight
    (:meth:`weight`) is 0: the rank takes part in the step but trains on nothing.

    The training loop calls :meth:`advance` after each global step (micro-batch) it trained on,
    then ``state.commit()``. The runtime calls :meth:`set_group` when a group forms and reads
    :meth:`weight` in the gradient hook of ``ctx.wrap`` models, which makes the averaged gradient
    the exact mean over the global batch even when parts differ in size.
    """

    def __init__(
        self,
        data: Sized | int,
        batch_size: int,
        seed: int = 0,
        shuffle: bool = True,
    ) -> None:
        num_samples = data if isinstance(data, int) else len(data)
        if num_samples < 1 or batch_size < 1:
            raise ValueError(
                f"ElasticDistributedSampler needs at least one sample and batch_size >= 1; "
                f"got {num_samples} samples and batch_size {batch_size}"
            )
        self.num_samples = num_samples
        self.batch_size = batch_size
        self.seed = seed
        self.shuffle = shuffle
        self.epoch = 0
        self.position = 0
        self.rank = -1
        self.world_size = 0
        self._perm: tuple[int, torch.Tensor] | None = None

    # ---------------------------------------------------------------- group

    def set_group(self, rank: int, world_size: int) -> None:
        """The rank and size of the group now training (the runtime calls it at each entry)."""
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in a group of {world_size}")
        self.rank = rank
        self.world_size = world_size

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

    def _global_count_at(self, position: int) -> int:
        return min(self.world_size * self.batch_size, self.num_samples - position)

    def _share(self, count: int, rank: int) -> tuple[int, int]:
        """(offset in the step, length) of ``rank``'s part of a step of ``count`` samples."""
        base, extra = divmod(count, self.world_size)
        return rank * base + min(rank, extra), base + (1 if rank < extra else 0)

    def global_count(self) -> int:
        """Samples in the current global step (the last one of an epoch may be short)."""
        self._require_group()
        return self._global_count_at(self.position)

    def local_count(self) -> int:
        """Samples of this rank in the current global step (0 for a padded part)."""
        self._require_group()
        return self._share(self.global_count(), self.rank)[1]

    def weight(self) -> float:
        """Factor that makes the group's mean of per-rank mean-loss gradients the exact mean over
        the global step: ``local_count * world_size / global_count`` (1 when parts are equal)."""
        return self.local_count() * self.world_size / self.global_count()

    def __len__(self) -> int:
        """Global steps left in the current epoch (every rank yields this many batches)."""
        self._require_group()
        step = self.world_size * self.batch_size
        return -(-(self.num_samples - self.position) // step)

    def __iter__(self) -> Iterator[list[int]]:
        """This rank's batch of each remaining step of the epoch, from the current position."""
        self._require_group()
        perm = self.permutation().tolist()
        position, rank = self.position, self.rank
        while position < self.num_samples:
            count = self._global_count_at(position)
            offset, length = self._share(count, rank)
            start = position + offset
            yield perm[start : start + length] if length else [perm[position]]
            position += count

    # ------------------------------------------------------------ position

    def advance(self) -> None:
        """Move past the global step just trained on (call once per micro-batch)."""
        self.position += self.global_count()
        if self.position >= self.num_samples:
            self.epoch += 1
            self.position = 0

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch`` from its beginning (``DistributedSampler``'s call; a malleable loop
        does not need it, :meth:`advance` moves on to the next epoch)."""
        if epoch != self.epoch:
            self.epoch = epoch
            self.position = 0

    def state_dict(self) -> dict[str, int]:
        """Position as plain integers (the world size is not part of it)."""
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
