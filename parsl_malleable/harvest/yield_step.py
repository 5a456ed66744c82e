"""The poll's yield step: blocks that must leave are told, then cancelled after the grace.

A block in a queued native job's way (polling mode), on a node out of service, or before a
reservation gets USR1 and the controller's drain (``on_yield``); the decision itself is
:mod:`~parsl_malleable.harvest.yielding`'s.
"""

from __future__ import annotations

import math

from parsl_malleable.errors import MalleableError
from parsl_malleable.harvest.block_book import BlockBook
from parsl_malleable.harvest.ledger import BlockInfo, Phase, PollReport
from parsl_malleable.harvest.poll_context import PollContext, YieldHook, logger
from parsl_malleable.harvest.states import CancelReason
from parsl_malleable.harvest.walltime import walltime_margin
from parsl_malleable.harvest.yielding import (
    DEFAULT_TOLERANCE_S,
    blocks_in_the_way,
    blocks_on_unavailable_nodes,
    first_native_use,
    reservation_in_the_way,
)
from parsl_malleable.snapshot import Snapshot


class Yielder:
    """The poll's yield step (a part of the provider). ``on_yield`` and the listeners added
    later (:meth:`add_listener`, the controller's) hear of each block that must leave, before
    its cancel; the cancel itself goes out when its grace has passed
    (:meth:`~.cancelling.Canceller.send_due`)."""

    def __init__(self, book: BlockBook, ctx: PollContext, on_yield: YieldHook | None) -> None:
        self._book = book
        self._ctx = ctx
        self.on_yield = on_yield
        self._listeners: list[YieldHook] = []

    def add_listener(self, listener: YieldHook) -> None:
        """Call ``listener`` (after ``on_yield``) whenever a block has to yield."""
        with self._book.lock:
            self._listeners.append(listener)

    def yield_blocks(self, snap: Snapshot, report: PollReport) -> None:
        """Mark the blocks that must leave, tell the hooks, and signal them (USR1)."""
        profile = self._ctx.profile
        with self._book.lock:
            # A block already being cancelled (walltime, Parsl) keeps its reason.
            live = {
                r.job_id: r
                for r in self._book.jobs.values()
                if r.phase is Phase.RUNNING and r.cancel_reason is None
            }
        in_snapshot = {j.job_id for j in snap.running}
        deadlines = {
            job_id: rec.deadline
            for job_id, rec in live.items()
            if rec.deadline is not None and job_id in in_snapshot
        }
        reasons = {
            job_id: f"its node is out of service ({why})"
            for job_id, why in blocks_on_unavailable_nodes(snap, set(live)).items()
        }
        out_of_service = set(reasons)
        # In preemption mode Slurm takes a block back for a native job itself, and chooses
        # which. A yield of ours for a queued native job guessed the block from a plan that
        # does not know the job's node constraints, and cancelled a block Slurm then did not
        # need (measured by benchmarks/bench_block_start.py): the ranks get Slurm's SIGTERM as
        # their notice instead. A reservation is still ours to yield to, within the next poll.
        preempting = profile.preemption != "none"
        soon = (
            snap.now + profile.poll_interval_s + profile.yield_grace_s if preempting else math.inf
        )
        # A yield takes the next poll (this one's plan may come true before it), the grace
        # and the teardown: a queued job planned on a block's nodes within that must not find
        # the block still there, even one planned to end before it (its end can be late).
        teardown = self._ctx.teardown.seconds
        lead = profile.poll_interval_s + profile.yield_grace_s + teardown
        overrun = walltime_margin(profile) + teardown
        first = first_native_use(snap, deadlines) if deadlines else {}
        poll = self._ctx.polls.number
        with self._book.lock:
            # Kept per block: a native that takes the block's nodes before the next poll is
            # judged against this plan (harvest/book_keeping.py, _judge_reclaim).
            for job_id, rec in live.items():
                rec.planned_use = first.get(job_id, math.inf)
                rec.planned_poll = poll
                rec.planned_at = snap.now
        in_the_way = blocks_in_the_way(snap, deadlines, lead_s=lead, overrun_s=overrun, first=first)
        for job_id, when in in_the_way.items():
            if job_id in reasons or when > soon:
                continue
            rec = live[job_id]
            res = reservation_in_the_way(snap, rec.nodes, deadlines[job_id])
            if res is not None and res.start <= when + DEFAULT_TOLERANCE_S:
                reasons[job_id] = (
                    f"reservation {res.name} takes its nodes at {res.start:.0f}, "
                    f"before its end at {deadlines[job_id]:.0f}"
                )
            elif not preempting and when < deadlines[job_id] - DEFAULT_TOLERANCE_S:
                reasons[job_id] = (
                    f"a queued job could use its nodes at {when:.0f}, "
                    f"before its end at {deadlines[job_id]:.0f}"
                )
            elif not preempting:
                reasons[job_id] = (
                    f"a queued job is planned on its nodes at {when:.0f}, {when - snap.now:.0f} s "
                    f"away: a yield takes {lead:.0f} s (poll, grace, teardown {teardown:.1f} s), "
                    f"and its own end at {deadlines[job_id]:.0f} may come up to "
                    f"{overrun:.0f} s late"
                )
                self._ctx.faults["yields_ahead"] += 1
        if not reasons:
            return
        now = self._ctx.clock()
        victims = [live[j] for j in reasons]
        with self._book.lock:
            for rec in victims:
                rec.phase = Phase.YIELDING
                rec.cancel_reason = (
                    CancelReason.OUT_OF_SERVICE
                    if rec.job_id in out_of_service
                    else CancelReason.YIELD
                )
                rec.cancel_at = now + profile.yield_grace_s
                rec.yield_poll = poll
                rec.yield_reason = reasons[rec.job_id]
                report.yielded.append(rec.job_id)
        for rec in victims:
            logger.info("block job %s yields: %s", rec.job_id, rec.yield_reason)
            hooks = [self.on_yield] if self.on_yield is not None else []
            for hook in [*hooks, *self._listeners]:
                try:
                    hook(BlockInfo.of(rec))
                except Exception:  # the controller's trouble must not keep the nodes
                    logger.exception("on_yield hook failed for block %s", rec.block_id)
        if profile.yield_grace_s > 0:
            try:
                self._ctx.scheduler.signal_batch([r.job_id for r in victims], "USR1")
            except MalleableError as exc:
                logger.info("USR1 to yielding blocks: %s", exc)


__all__ = ["Yielder"]
