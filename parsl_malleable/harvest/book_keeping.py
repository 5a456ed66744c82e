"""Keeping the provider's book in agreement with the scheduler at every poll.

Each snapshot is matched against the book (:func:`~.reconcile.match_blocks`): records are
marked running, corrected by name, ended when the scheduler confirms it; strays of ours are
cancelled. How an ended job reads to Parsl, and giving up after repeated failures, live here.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from parsl.jobs.states import JobState as ParslState

from parsl_malleable.errors import MalleableError
from parsl_malleable.harvest.block_book import BlockBook
from parsl_malleable.harvest.cancelling import Canceller
from parsl_malleable.harvest.ledger import JobRecord, Phase, PollReport
from parsl_malleable.harvest.poll_context import PollContext, logger
from parsl_malleable.harvest.reconcile import CONFIRM_POLLS, Matches, match_blocks
from parsl_malleable.harvest.states import CancelReason, end_state, is_failure
from parsl_malleable.harvest.yielding import DEFAULT_TOLERANCE_S
from parsl_malleable.schedulers.records import JobState, JobStatus
from parsl_malleable.snapshot import Snapshot


class BookKeeper:
    """The book kept in agreement with the scheduler at every poll (a part of the provider).

    It also judges how a job ended, and gives up launching after
    ``max_consecutive_failures`` failed blocks in a row (:attr:`gave_up`). ``recycle``: a slot
    takes the next job when one ends; with False a slot ends with its job.
    """

    def __init__(
        self, book: BlockBook, ctx: PollContext, canceller: Canceller, recycle: bool
    ) -> None:
        self._book = book
        self._ctx = ctx
        self._canceller = canceller
        self._recycle = recycle
        self._failures = 0  # blocks failed in a row
        self._gave_up = ""

    @property
    def gave_up(self) -> str:
        """Why launching stopped (empty while it goes on)."""
        return self._gave_up

    def reconcile(self, snap: Snapshot, report: PollReport) -> None:
        """Bring the book up to date with ``snap``: running, renamed, ended and stray jobs."""
        jobs = self._book.jobs
        with self._book.lock:
            found = match_blocks([r for r in jobs.values() if r.active], snap, self._book.tag)
            self._apply_names(found)
            for job_id, job in found.running.items():
                rec = jobs[_renamed(job_id, found.renamed)]
                rec.missing_polls = 0
                self._mark_running(rec, job.nodes, job.start, job.time_limit)
            for job_id in found.pending:
                rec = jobs[_renamed(job_id, found.renamed)]
                rec.missing_polls = 0
            missing = [jobs[j] for j in found.missing]
        if found.strays:
            self._cancel_strays(found.strays, report)
        if missing:
            self._settle_missing(missing, report)

    def sweep(self, snap: Snapshot, report: PollReport) -> None:
        """Closing down: correct the ids ``snap`` shows under other names (a cancel sent to a
        wrong id goes out again) and cancel the strays of ours it lists; nothing is ended."""
        with self._book.lock:
            active = [r for r in self._book.jobs.values() if r.active]
            found = match_blocks(active, snap, self._book.tag)
            self._apply_names(found)
        self._cancel_strays(found.strays, report)

    def _apply_names(self, found: Matches) -> None:
        """Correct the ids the snapshot shows under other ones, and mark the ids it confirms
        by name as checked, sending the cancels held for them. Called with the lock held."""
        for old, new in found.renamed:
            self._correct_id(old, new)
        for job_id in found.named:
            rec = self._book.jobs[_renamed(job_id, found.renamed)]
            if not rec.checked:
                rec.checked = True
                self._resend_cancel(rec)

    def _resend_cancel(self, rec: JobRecord) -> None:
        """A cancel went to a wrong id or was held for an unchecked one: send it (again)."""
        if rec.cancel_sent_at is not None and rec.cancel_at is None and not rec.cancel_given_up:
            rec.cancel_at = self._ctx.clock()

    def _correct_id(self, old: str, new: str) -> None:
        """The scheduler shows the block recorded as ``old`` as job ``new`` (its submit
        printed a wrong id): re-key the record. Called with the lock held."""
        rec = self._book.rename(old, new)
        self._ctx.faults["id_corrected"] += 1
        logger.warning(
            "block %s was recorded as job %s but the scheduler shows it as job %s: corrected",
            rec.name,
            old,
            new,
        )
        rec.checked = True  # the id now comes from the scheduler, under the block's name
        self._resend_cancel(rec)

    def _cancel_strays(self, job_ids: list[str], report: PollReport) -> None:
        """Take jobs of ours that no record holds into the book, and cancel them."""
        now = self._ctx.clock()
        strays = []
        with self._book.lock:
            for job_id in job_ids:
                if job_id in self._book.jobs and self._book.jobs[job_id].active:
                    continue
                rec = JobRecord(
                    job_id=job_id,
                    slot_id="",
                    block_id="",
                    nodes_requested=0,
                    walltime_s=0.0,
                    planned_nodes=(),
                    window_end=now,
                    submitted_at=now,
                    phase=Phase.YIELDING,
                    cancel_reason=CancelReason.STRAY,
                )
                self._book.add(rec)
                strays.append(rec)
        if not strays:
            return
        self._ctx.faults["strays_cancelled"] += len(strays)
        logger.warning(
            "jobs %s carry this provider's name (%s) but no block holds them: cancelling",
            ", ".join(r.job_id for r in strays),
            self._book.tag,
        )
        report.skipped.extend(f"{r.job_id}: stray job of ours, cancelled" for r in strays)
        self._canceller.cancel_now(strays)

    def _settle_missing(self, missing: list[JobRecord], report: PollReport) -> None:
        """Records the snapshot did not list: ended when the scheduler says so, kept while a
        second query says they live, dropped (and cancelled, in case) only when neither query
        knows them for :data:`CONFIRM_POLLS` polls in a row."""
        scheduler = self._ctx.scheduler
        checked = [r.job_id for r in missing if r.checked]
        statuses = scheduler.status(checked) if checked else {}
        # An unchecked id may be another job's: what the scheduler says of it is not the block.
        statuses.update(
            {r.job_id: JobStatus(r.job_id, JobState.UNKNOWN) for r in missing if not r.checked}
        )
        unknown = [
            r
            for r in missing
            if r.job_id in statuses and statuses[r.job_id].state is JobState.UNKNOWN
        ]
        if any(r.checked for r in unknown):
            # Asked another way (Slurm: scontrol): an empty squeue must not end a live block.
            statuses.update(scheduler.confirm_gone([r.job_id for r in unknown if r.checked]))
        dropped: list[JobRecord] = []
        with self._book.lock:
            for rec in unknown:
                st = statuses.get(rec.job_id)
                if st is None or st.state is not JobState.UNKNOWN:
                    if st is not None and not st.state.finished:
                        self._ctx.faults["missing_kept"] += 1
                        self._ctx.notes.say(
                            f"job {rec.job_id}",
                            "the job query does not list it but the scheduler says "
                            f"{st.raw_state or st.state.value}: kept",
                            level=logging.WARNING,
                        )
                    continue
                rec.missing_polls += 1
                if rec.missing_polls < CONFIRM_POLLS:
                    statuses.pop(rec.job_id)  # not yet: ask again at the next poll
                else:
                    dropped.append(rec)
        if dropped:
            self._ctx.faults["missing_dropped"] += len(dropped)
            ids = [r.job_id for r in dropped if r.checked]  # never an id that may be another's
            try:  # it may live on where no query sees it; cancelling a gone job is harmless
                if ids:
                    scheduler.cancel(ids)
            except MalleableError as exc:
                logger.warning("cancel of vanished blocks %s: %s", ids, exc)
        ended = [
            r
            for r in missing
            if r.job_id in statuses
            and (statuses[r.job_id].state is JobState.UNKNOWN or statuses[r.job_id].state.finished)
        ]
        preempted = self._preempted_by_site(ended, statuses)
        now = self._ctx.clock()
        with self._book.lock:
            for rec in missing:
                st = statuses.get(rec.job_id)
                if st is None:
                    continue
                if st.state is JobState.UNKNOWN or st.state.finished:
                    if rec.start is None and st.start is not None:
                        rec.start_reported = st.start
                    state = JobState.PREEMPTED if rec.job_id in preempted else st.state
                    self._end(rec, state, now, st.end_limit)
                    report.ended.append(rec.job_id)
                elif st.state in (JobState.RUNNING, JobState.COMPLETING) and st.start is not None:
                    limit = (st.end_limit - st.start) if st.end_limit is not None else None
                    self._mark_running(rec, st.nodes, st.start, limit)

    def _mark_running(
        self, rec: JobRecord, nodes: tuple[str, ...], start: float, limit: float | None
    ) -> None:
        if rec.phase is Phase.PENDING:
            rec.phase = Phase.RUNNING
            logger.info("block job %s running on %s", rec.job_id, ",".join(nodes))
        rec.nodes = nodes or rec.nodes
        rec.start = start
        rec.deadline = start + (limit if limit is not None else rec.walltime_s)

    def _end(self, rec: JobRecord, state: JobState, now: float, end_limit: float | None) -> None:
        parsl_state, why = end_state(
            state,
            cancel_reason=rec.cancel_reason,
            end_limit=rec.deadline if rec.deadline is not None else end_limit,
            now=now,
            seen_running=rec.start is not None,
            why_cancelled=rec.yield_reason,
        )
        if rec.cancel_sent_at is not None and rec.start is not None and end_limit is not None:
            self._ctx.teardown.add(rec.cancel_sent_at, end_limit)
        if state is JobState.PREEMPTED and rec.start is not None:
            self._judge_reclaim(rec, end_limit if end_limit is not None else now)
        rec.phase = Phase.ENDED
        rec.end_state = parsl_state
        rec.message = f"job {rec.job_id}: {why} ({state.value})"
        rec.ended_at = now
        logger.info("block %s", rec.message)
        slot = self._book.slots.get(rec.slot_id)
        if is_failure(parsl_state):
            self._failures += 1
            if self._failures >= self._ctx.profile.max_consecutive_failures:
                self._give_up(f"{self._failures} blocks failed in a row; last: {rec.message}")
        elif rec.start is not None:
            self._failures = 0
        if slot is None or slot.closed or slot.final is not None:
            return
        if not self._recycle and rec.cancel_reason is not CancelReason.NOT_STARTED:
            slot.final, slot.final_message = parsl_state, rec.message

    def _judge_reclaim(self, rec: JobRecord, taken_at: float) -> None:
        """A native job took a running block's nodes at ``taken_at`` (polling mode: the site
        preempted what the provider should have yielded). Counted as a missed yield
        (``faults["reclaims_missed"]``) when the last poll's plan already had a native job on
        its nodes by then, when no poll came in the poll interval before, or when a yield was
        under way (it came late); otherwise as unforeseeable (``reclaims_unforeseeable``): the
        queue the last poll saw, less than one poll before, left its nodes alone, so an arrival
        or an early end since then let the native start, and no poll could have seen it."""
        if self._ctx.profile.preemption != "none":
            return  # preemption mode: the site taking a block back is the design, not a miss
        interval = self._ctx.profile.poll_interval_s
        use, at, poll = rec.planned_use, rec.planned_at, rec.planned_poll
        if rec.cancel_reason is CancelReason.YIELD:
            why = f"its yield, decided at poll {rec.yield_poll}, came late"
        elif rec.cancel_reason is not None:
            return  # ended for a reason of ours (walltime, Parsl): the site only came first
        elif use is None or at is None:
            why = "no poll planned its nodes while it ran"
        elif use <= taken_at + DEFAULT_TOLERANCE_S:
            why = (
                f"poll {poll} ({taken_at - at:.1f} s before) planned a native job on its nodes "
                f"at {use - taken_at:+.1f} s, yet did not yield it"
            )
        elif taken_at - at > interval + DEFAULT_TOLERANCE_S:
            why = f"no poll in the {taken_at - at:.1f} s before (poll interval {interval:g} s)"
        else:
            self._ctx.faults["reclaims_unforeseeable"] += 1
            planned = "no native use" if math.isinf(use) else f"{use - taken_at:+.1f} s"
            logger.warning(
                "block job %s: a native job took its nodes, unforeseeable: poll %s, %.1f s "
                "before, planned the queue's first use of them at %s (an arrival or an early "
                "end since then let the native start; on a site that holds a native job for "
                "the block, it waits up to poll + grace + teardown)",
                rec.job_id,
                poll,
                taken_at - at,
                planned,
            )
            return
        self._ctx.faults["reclaims_missed"] += 1
        logger.warning(
            "block job %s: a native job took its nodes, a missed yield: %s", rec.job_id, why
        )

    def _preempted_by_site(self, ended: list[JobRecord], states: dict[str, Any]) -> set[str]:
        """The ended blocks Slurm preempted (preemption mode). A preempted block whose workers
        left within the grace time ends with their exit status (FAILED, COMPLETED), not
        PREEMPTED, and a preemption must not count towards giving up. Blocks never seen
        running are asked about too: one can start and be preempted between two polls (a
        native job that arrives seconds after the block started), and Slurm's PreemptTime
        says so either way."""
        if self._ctx.profile.preemption == "none":
            return set()
        candidates = [
            r.job_id
            for r in ended
            if r.cancel_reason is None
            and states[r.job_id].state not in (JobState.PREEMPTED, JobState.TIMEOUT)
        ]
        return self._ctx.scheduler.preempted(candidates) if candidates else set()

    def _give_up(self, message: str) -> None:
        if not self._gave_up:  # said once: a later failure changes nothing
            self._gave_up = message
            logger.error("backfill provider stops launching: %s", message)
        for slot in self._book.slots.values():
            if not slot.closed and slot.final is None:
                slot.final, slot.final_message = ParslState.FAILED, message


def _renamed(job_id: str, renamed: list[tuple[str, str]]) -> str:
    """The id a record is kept under after :meth:`BookKeeper._correct_id`."""
    return dict(renamed).get(job_id, job_id)


__all__ = ["BookKeeper"]
