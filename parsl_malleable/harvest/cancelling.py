"""Cancelling the provider's jobs: now, and again with backoff when the scheduler refuses.

Every cancel goes through :meth:`Canceller.cancel_now`: a failed one is retried after 1, 2,
4 ... s and given up loudly after :data:`~parsl_malleable.harvest.reconcile.CANCEL_ATTEMPTS`.
Also here: withdrawing blocks that never started.
"""

from __future__ import annotations

from parsl_malleable.errors import MalleableError
from parsl_malleable.harvest.block_book import BlockBook
from parsl_malleable.harvest.ledger import JobRecord, Phase, PollReport
from parsl_malleable.harvest.poll_context import PollContext, logger
from parsl_malleable.harvest.reconcile import cancel_retry_in
from parsl_malleable.harvest.states import CancelReason


class Canceller:
    """Cancels the provider's jobs, retrying refused cancels (a part of the provider)."""

    def __init__(self, book: BlockBook, ctx: PollContext) -> None:
        self._book = book
        self._ctx = ctx

    def send_due(self) -> None:
        """Send the cancels whose time has come (retries, and yields past their grace)."""
        now = self._ctx.clock()
        with self._book.lock:
            due = [
                r
                for r in self._book.jobs.values()
                if r.active and r.cancel_at is not None and r.cancel_at <= now
            ]
        if due:
            self.cancel_now(due)

    def cancel_now(self, records: list[JobRecord]) -> bool:
        """Cancel these jobs now; whether the scheduler took the cancel. A failed cancel is
        retried after 1, 2, 4 ... s and given up loudly (an ERROR naming the command to run by
        hand) after :data:`~parsl_malleable.harvest.reconcile.CANCEL_ATTEMPTS`; the record
        stays in the book until the scheduler says the job ended."""
        now = self._ctx.clock()
        with self._book.lock:
            for rec in records:
                rec.cancel_at = None
                rec.cancel_poll = self._ctx.polls.number
                rec.cancel_sent_at = now
            # An unchecked id may be another job's: its cancel waits until a snapshot shows
            # the block's name (book_keeping's _apply_names sends it then, to the right id).
            held = [r.job_id for r in records if not r.checked]
            records = [r for r in records if r.checked]
        if held:
            logger.warning("cancel of %s waits until a snapshot confirms the id", ", ".join(held))
        if not records:
            return True
        try:
            self._ctx.scheduler.cancel([r.job_id for r in records])
        except MalleableError as exc:
            self._cancel_failed(records, now, exc)
            return False
        return True

    def _cancel_failed(self, records: list[JobRecord], now: float, exc: MalleableError) -> None:
        self._ctx.faults["cancel_failed"] += 1
        given_up = []
        with self._book.lock:
            for rec in records:
                rec.cancel_attempts += 1
                retry_in = cancel_retry_in(rec.cancel_attempts)
                if retry_in is None:
                    rec.cancel_given_up = True
                    given_up.append(rec.job_id)
                else:
                    rec.cancel_at = now + retry_in
        if given_up:
            self._ctx.faults["cancel_given_up"] += len(given_up)
            logger.error(
                "gave up cancelling jobs %s after %d attempts (last: %s); they hold their "
                "nodes until their walltime: cancel them by hand (%s)",
                ", ".join(given_up),
                max(r.cancel_attempts for r in records),
                exc,
                " ".join(self._ctx.scheduler.cancel_hint(given_up)),
            )
        retrying = [r.job_id for r in records if r.cancel_at is not None]
        if retrying:
            logger.warning(
                "cancel of %s failed, retrying in %.0f s: %s",
                ", ".join(retrying),
                min(r.cancel_at for r in records if r.cancel_at is not None) - now,
                exc,
            )

    def next_in(self) -> float | None:
        """Seconds until the next cancel is due (None: none is)."""
        with self._book.lock:
            due = [
                r.cancel_at
                for r in self._book.jobs.values()
                if r.active and r.cancel_at is not None
            ]
        return min(due) - self._ctx.clock() if due else None

    def withdraw_stuck(self, report: PollReport) -> None:
        """Cancel the blocks still queued ``start_timeout_s`` after their submit."""
        now = self._ctx.clock()
        with self._book.lock:
            stuck = [
                r
                for r in self._book.jobs.values()
                if r.phase is Phase.PENDING
                and r.cancel_reason is None
                and now - r.submitted_at > self._ctx.profile.start_timeout_s
            ]
            for rec in stuck:
                rec.cancel_reason = CancelReason.NOT_STARTED
        if stuck:
            # A block that waits in the queue could start later at a worse time: withdraw it.
            self.cancel_now(stuck)
            report.skipped.extend(f"{r.job_id}: not started, withdrawn" for r in stuck)


__all__ = ["Canceller"]
