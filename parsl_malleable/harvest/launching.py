"""Launching blocks: windows, the demand, the start test, and a submit that survives faults.

Which waiting slots get a block this poll, how large and for how long (the planner and the
demand callable), confirmed by the scheduler's start test, submitted so that a failing
submit command leaves nothing untracked (:mod:`~.submission`).
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from pathlib import Path

from parsl_malleable.allocate.result import BlockRequest
from parsl_malleable.errors import StartRefused
from parsl_malleable.harvest.block_book import BlockBook
from parsl_malleable.harvest.block_script import write_block_files
from parsl_malleable.harvest.blocks_to_submit import (
    block_destination,
    block_nodes,
    harvest_windows,
    plan_blocks,
)
from parsl_malleable.harvest.book_keeping import BookKeeper
from parsl_malleable.harvest.cancelling import Canceller
from parsl_malleable.harvest.demand import DemandContext, DemandFn
from parsl_malleable.harvest.ledger import JobRecord, PollReport, Slot
from parsl_malleable.harvest.poll_context import PollContext, logger
from parsl_malleable.harvest.states import CancelReason
from parsl_malleable.harvest.submission import submit_block
from parsl_malleable.private_files import PrivateFolder
from parsl_malleable.schedulers.command_scheduler import CommandScheduler
from parsl_malleable.snapshot import NodeState, Snapshot
from parsl_malleable.windows.predict import WindowPredictor


class Launcher:
    """Launching blocks (a part of the provider).

    ``min_block_s`` says the shortest walltime worth a block now (the provider's, which follows
    the measured start-up); ``demand`` the nodes wanted in all (None: fill every waiting slot;
    :meth:`use_demand` sets one later, unless one was given); ``script_dir`` says where block
    scripts go and ``heartbeat_file`` which file their dead-man switch watches, both read at
    each submit (Parsl sets the provider's ``script_dir`` when its executor starts). The
    script folder is checked and opened once (:meth:`scripts`); every block file is written
    through that open folder, never by its path.
    """

    def __init__(
        self,
        book: BlockBook,
        ctx: PollContext,
        canceller: Canceller,
        keeper: BookKeeper,
        *,
        predictor: WindowPredictor,
        min_block_s: Callable[[], float],
        demand: DemandFn | None,
        heartbeat_file: Callable[[], Path],
        script_dir: Callable[[], str | None],
    ) -> None:
        self._book = book
        self._ctx = ctx
        self._canceller = canceller
        self._keeper = keeper
        self._predictor = predictor
        self._min_block_s = min_block_s
        self._demand = demand
        self._heartbeat_file = heartbeat_file
        self._script_dir = script_dir
        # The script folder held open since its check, by the script_dir it was opened for;
        # its predecessors stay open until close(): another thread may be writing through one.
        self._scripts: PrivateFolder | None = None
        self._scripts_for = ""
        self._retired: list[PrivateFolder] = []
        self._scripts_lock = threading.Lock()
        self._submit_failures = 0  # in a row
        self.submit_error = ""  # the last poll's failed submit, in the scheduler's words
        # The last poll left a slot waiting, with no idle window at all or fewer nodes placed
        # than wanted: a native job's end between polls is then worth a poll at once.
        self.waiting_for_window = False

    @property
    def demand(self) -> DemandFn | None:
        """What decides the nodes wanted (None: every waiting slot is filled)."""
        return self._demand

    def use_demand(self, demand: DemandFn) -> bool:
        """Hold what ``demand`` asks for, unless a demand was given at construction (the
        user's wins); whether it was taken."""
        with self._book.lock:
            if self._demand is not None:
                return False
            self._demand = demand
            return True

    def scripts(self) -> PrivateFolder:
        """The block script folder (``script_dir``, else ``backfill_scripts``), checked and
        opened the first time (:class:`~parsl_malleable.private_files.PrivateFolder`: created
        private, refused if others can write it or a folder above it) and held open after:
        a rename of it mid-run cannot redirect a block's files. Opened again only for another
        ``script_dir``. :class:`~parsl_malleable.errors.UnsafePathError` when refused."""
        directory = self._script_dir() or "backfill_scripts"
        with self._scripts_lock:
            held = self._scripts
            if held is None or held.fileno() < 0 or self._scripts_for != directory:
                if held is not None:
                    self._retired.append(held)
                self._scripts = held = PrivateFolder(directory, what="block script folder")
                self._scripts_for = directory
            return held

    def close(self) -> None:
        """Let the script folders go (the poll and heartbeat threads have stopped)."""
        with self._scripts_lock:
            for folder in [*self._retired, *([self._scripts] if self._scripts else [])]:
                folder.close()
            self._retired.clear()
            self._scripts = None

    def launch(self, snap: Snapshot, report: PollReport) -> None:
        """Fill waiting slots with new blocks where windows open (tested first if the profile
        says so); a failed submit is in :attr:`submit_error`."""
        self.submit_error = ""
        self.waiting_for_window = False
        profile = self._ctx.profile
        with self._book.lock:
            if self._keeper.gave_up:
                return
            waiting = [s for s in self._book.slots.values() if s.waiting]
            active = [r for r in self._book.jobs.values() if r.active]
        if not waiting:
            return
        held = sum(len(r.nodes) or r.nodes_requested for r in active)
        busy = {n for r in active for n in (r.nodes or r.planned_nodes)}
        floor = self._min_block_s()
        windows = harvest_windows(snap, profile, self._predictor, exclude=busy, min_block_s=floor)
        cap_left = profile.max_harvested_nodes - held
        if self._demand is not None:
            ctx = DemandContext(
                snap, windows, self._book.live_blocks(), held, profile.max_harvested_nodes
            )
            want = int(self._demand(ctx)) - held
        else:
            want = len(waiting) * profile.max_nodes_per_block
        want = min(want, cap_left)
        requests = plan_blocks(
            snap, want, profile, self._predictor, windows=windows, min_block_s=floor
        )
        requests = requests[: len(waiting)]
        if not requests:
            self._explain_no_window(snap, busy, floor)
        if profile.test_start:
            requests = self._tested(requests, report)
        # With no window at all a demand callable cannot say what it would want from one.
        self.waiting_for_window = len(requests) < len(waiting) and (
            not windows or want > sum(req.nodes for req in requests)
        )
        for slot, req in zip(waiting, requests, strict=False):
            self._submit_job(slot, req.nodes, req.walltime_s, req.node_ids, req.window_s, report)

    def _tested(self, requests: list[BlockRequest], report: PollReport) -> list[BlockRequest]:
        """The requests the scheduler would start now. Every block is tested before any is
        submitted: a block just submitted is queued ahead of the next test and would make it
        report a later start."""
        starts: list[float | None] = []
        refused: list[str] = []
        for req in requests:
            try:
                starts.append(
                    self._ctx.scheduler.test_start(req.nodes, req.walltime_s, req.node_ids)
                )
            except StartRefused as exc:
                starts.append(math.inf)
                refused.append(f"{req.nodes} nodes x {req.walltime_s:.0f} s: {exc.reason}")
        topic = "a block waits: the scheduler's start test says"
        for why in refused:
            report.skipped.append(why)
            self._ctx.faults["start_refused"] += 1
            # A WARNING: a refusal is often the site saying no to every block (a bad account,
            # partition or user), which an INFO line once hid.
            self._ctx.notes.say(topic, why, logging.WARNING)
        latest = self._ctx.clock() + self._ctx.profile.start_tolerance_s
        for req, start in zip(requests, starts, strict=True):
            if start is not None and latest < start < math.inf:
                late = f"{req.nodes} nodes x {req.walltime_s:.0f} s would start at {start:.0f}"
                report.skipped.append(late)
                self._ctx.notes.say(topic, late)
        return [
            r for r, start in zip(requests, starts, strict=True) if start is None or start <= latest
        ]

    def _explain_no_window(self, snap: Snapshot, busy: set[str], floor: float) -> None:
        """Say (once each) which reservation keeps idle nodes from holding a block, and when
        no idle node may run the blocks' partition or queue at all."""
        profile = self._ctx.profile
        horizon = snap.now + floor + profile.safety_margin_s
        idle = {n.name for n in snap.nodes if n.state is NodeState.IDLE} - busy
        usable = block_nodes(snap, profile)
        if idle and usable is not None and not idle & usable:
            where = block_destination(snap, profile)
            self._ctx.notes.say(
                f"blocks to {where}",
                f"{len(idle)} idle node(s), none of which {where} may use (bound to another "
                "queue or partition, or outside its restrictions)",
            )
        for res in snap.reservations:
            hit = idle & set(res.nodes)
            if hit and res.start < horizon:
                self._ctx.notes.say(
                    f"reservation {res.name}",
                    f"takes {len(hit)} idle node(s) from {res.start:.0f} to {res.end:.0f}: "
                    f"no block of {floor:.0f} s + "
                    f"{profile.safety_margin_s:.0f} s margin fits before it",
                )

    def _submit_job(
        self,
        slot: Slot,
        nodes: int,
        walltime_s: float,
        node_ids: tuple[str, ...],
        window_s: float,
        report: PollReport,
    ) -> None:
        profile, scheduler = self._ctx.profile, self._ctx.scheduler
        # Written with the submit options' directives, so that the scheduler has nothing to
        # rewrite in the script by its path.
        directives = scheduler.directive_lines() if isinstance(scheduler, CommandScheduler) else []
        script = write_block_files(
            self.scripts(),
            slot_id=slot.slot_id,
            block_id=slot.block_id,
            command=slot.command,
            walltime_s=walltime_s,
            launcher=profile.launcher,
            worker_init=profile.worker_init,
            self_signal_s=None if scheduler.signals_before_walltime else profile.signal_margin_s,
            heartbeat_file=self._heartbeat_file(),
            driver_timeout_s=profile.driver_timeout_s,
            directives=directives,
        )
        name = self._book.next_name(slot.block_id)
        now = self._ctx.clock()
        taken = {r.job_id for r in self._book.active()}
        outcome = submit_block(
            scheduler,
            script,
            name=name,
            nodes=nodes,
            walltime_s=walltime_s,
            node_ids=node_ids,
            taken=taken,
            faults=self._ctx.faults,
        )
        if outcome.job_id is None:
            self._submit_failed(name, outcome.error, report)
            return
        self._submit_failures = 0
        job_id = outcome.job_id
        rec = JobRecord(
            job_id=job_id,
            slot_id=slot.slot_id,
            block_id=slot.block_id,
            nodes_requested=nodes,
            walltime_s=walltime_s,
            planned_nodes=tuple(node_ids),
            window_end=now + window_s,
            submitted_at=now,
            name=name,
            checked=not outcome.unchecked,
        )
        with self._book.lock:
            self._book.add(rec, slot)
            # Parsl may have closed the slot while this poll was submitting: do not leak it.
            orphan = slot.closed
            if orphan:
                rec.cancel_reason = CancelReason.PARSL
        report.submitted.append(job_id)
        if orphan:
            self._canceller.cancel_now([rec])
            return
        logger.info(
            "slot %s: job %s, %d nodes x %.0f s (window %.0f s)",
            slot.slot_id,
            job_id,
            nodes,
            walltime_s,
            window_s,
        )

    def _submit_failed(self, name: str, error: str, report: PollReport) -> None:
        """No job came of a submit: a WARNING with the scheduler's words, the first time and
        then every tenth time in a row (a broken account or partition fails every poll)."""
        self._submit_failures += 1
        report.skipped.append(f"{name}: submit failed: {error}")
        self.submit_error = error
        streak = self._submit_failures
        if streak == 1 or streak % 10 == 0:
            logger.warning(
                "block submit failed%s: %s",
                f" ({streak} times in a row)" if streak > 1 else "",
                error,
            )


__all__ = ["Launcher"]
