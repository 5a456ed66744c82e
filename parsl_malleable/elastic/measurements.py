"""Throughput and rescale pauses of one job, measured from its rank 0's membership checks.

At every check rank 0 tells the coordinator its step and how many samples it has trained
(``poll``). :class:`Measurements` turns those into what the controller's profiler learns from
(``controller/live.py`` takes them with :meth:`Measurements.take`):

* ``(world_size, samples/s)`` over stretches of at least ``every_s`` within one epoch;
* ``(kind, seconds)`` rescale pauses, ``kind`` one of ``start``, ``up``, ``down``: from the
  previous epoch's last progress (or from forming the first epoch) to the new epoch's first
  check.

No lock of its own: :class:`~parsl_malleable.elastic.membership.Membership` calls it with its
lock held. It needs nothing of an epoch but the fields of :class:`MeasuredEpoch`.
"""

from __future__ import annotations

import time
from typing import Protocol


class MeasuredEpoch(Protocol):
    """What a measurement reads and writes on an epoch's record."""

    number: int
    formed_at: float  # wall clock
    progress_at: float | None  # wall clock of the latest check (written here)
    mark: tuple[float, int] | None  # (time, samples) where the current stretch began

    @property
    def world_size(self) -> int:
        """Number of ranks in the epoch."""
        ...


class Measurements:
    """Collects measurements until :meth:`take` hands them over (caller holds the lock)."""

    def __init__(self, every_s: float = 2.0) -> None:
        self.every_s = every_s
        self._throughput: list[tuple[int, float]] = []
        self._rescales: list[tuple[str, float]] = []

    def progress(self, epoch: MeasuredEpoch, samples: int, previous: MeasuredEpoch | None) -> None:
        """Rank 0 of ``epoch`` reached ``samples`` now; ``previous``: the latest older epoch
        that made progress (None: ``epoch`` is the first to)."""
        now = time.time()
        if epoch.mark is None:
            if previous is not None:
                kind = "up" if epoch.world_size > previous.world_size else "down"
                if epoch.world_size != previous.world_size:
                    self._rescales.append((kind, now - (previous.progress_at or now)))
            else:
                self._rescales.append(("start", now - epoch.formed_at))
            epoch.mark = (now, samples)
        elif now - epoch.mark[0] >= self.every_s:
            rate = (samples - epoch.mark[1]) / (now - epoch.mark[0])
            if rate > 0:
                self._throughput.append((epoch.world_size, rate))
            epoch.mark = (now, samples)
        epoch.progress_at = now

    def take(self) -> tuple[list[tuple[int, float]], list[tuple[str, float]]]:
        """``(throughput, rescales)`` collected since the last call."""
        taken = (self._throughput, self._rescales)
        self._throughput, self._rescales = [], []
        return taken


__all__ = ["MeasuredEpoch", "Measurements"]
