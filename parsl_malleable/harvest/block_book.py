"""The provider's book: Parsl's slots, the scheduler jobs that filled them, and one lock.

Every part of :class:`~parsl_malleable.provider.BackfillProvider` reads and changes job records
through this book, under :attr:`BlockBook.lock`; only the book adds a record, binds a job to a
slot, or renames a job. It also owns what Parsl reads of the slots (``resources``, Parsl's own
type: slot id -> its ids and last status) and the names of our jobs: tag + block + sequence,
unique, so a job is found again by name whatever the submit command printed, and told apart
from another driver's blocks.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

from parsl_malleable.harvest.ledger import BlockInfo, JobRecord, Slot
from parsl_malleable.harvest.states import CancelReason
from parsl_malleable.harvest.submission import block_name, provider_tag


class BlockBook:
    """Slots and job records of one provider (``label`` goes into every job's name)."""

    def __init__(self, label: str) -> None:
        self.lock = threading.RLock()
        self.slots: dict[str, Slot] = {}
        self.jobs: dict[str, JobRecord] = {}
        # Parsl's ExecutionProvider.resources: the keys are our slot ids.
        self.resources: dict[object, Any] = {}
        self.tag = provider_tag(label)
        self._job_seq = itertools.count()

    def open_slot(self, slot: Slot) -> None:
        """Add a slot Parsl opened."""
        with self.lock:
            self.slots[slot.slot_id] = slot
            self.resources[slot.slot_id] = {
                "job_id": slot.slot_id,
                "block_id": slot.block_id,
                "status": None,
            }

    def next_name(self, block_id: str) -> str:
        """The name of the next job submitted for Parsl block ``block_id``."""
        return block_name(self.tag, block_id, next(self._job_seq))

    def add(self, rec: JobRecord, slot: Slot | None = None) -> None:
        """Keep ``rec``; with ``slot``, as the job now filling it. Called with the lock held."""
        self.jobs[rec.job_id] = rec
        if slot is not None:
            slot.job = rec
            slot.jobs.append(rec.job_id)
            self.resources[slot.slot_id]["scheduler_job_id"] = rec.job_id

    def rename(self, old: str, new: str) -> JobRecord:
        """The scheduler shows the job recorded as ``old`` as ``new``: re-key it (and its
        slot's entries). Called with the lock held."""
        rec = self.jobs.pop(old)
        rec.job_id = new
        self.jobs[new] = rec
        slot = self.slots.get(rec.slot_id)
        if slot is not None:
            slot.jobs = [new if j == old else j for j in slot.jobs]
            self.resources[slot.slot_id]["scheduler_job_id"] = new
        return rec

    def active(self) -> list[JobRecord]:
        """The records of jobs not yet ended."""
        with self.lock:
            return [r for r in self.jobs.values() if r.active]

    def live_blocks(self) -> list[BlockInfo]:
        """Our live blocks: nodes, deadline and phase of every job not yet ended."""
        with self.lock:
            return [
                BlockInfo.of(r)
                for r in self.jobs.values()
                if r.active and r.cancel_reason is not CancelReason.STRAY
            ]


__all__ = ["BlockBook"]
