"""The poll's walltime step: a block still running past its walltime is cancelled by the provider.

A scheduler ends a block at its walltime only as promptly as its own check runs, and only if
that check works: a PBS MoM looks every ``$check_poll`` (a 60 s block whose worker ignored the
signal ran 87 s on a live server), slurmctld every 30 s (measured on the local cluster: jobs
left RUNNING 7 to 28 s after their limit). The window a block was planned into ends
``safety_margin_s`` after its walltime, and a native job may start then, so the provider does not
rely on the scheduler alone: it keeps each running block's *walltime end* (its start as the
scheduler reports it, or when no start is printed the time a snapshot first showed it running,
plus the walltime it asked for) and cancels a block that a snapshot still shows running
:func:`walltime_margin` after that, through the same cancel (and retries) as a yield, with
:attr:`~.states.CancelReason.WALLTIME`. The poll thread polls at that moment, so the cancel goes
out within the margin plus one poll's queries (plus ``poll_interval_s`` when the caller polls).
"""

from __future__ import annotations

from parsl_malleable.errors import MalleableError
from parsl_malleable.harvest.block_book import BlockBook
from parsl_malleable.harvest.cancelling import Canceller
from parsl_malleable.harvest.ledger import JobRecord, Phase, PollReport
from parsl_malleable.harvest.poll_context import PollContext, logger
from parsl_malleable.harvest.site_profile import SiteProfile
from parsl_malleable.harvest.states import CancelReason
from parsl_malleable.schedulers.records import JobState
from parsl_malleable.snapshot import Snapshot

#: Seconds past a block's walltime end the provider allows before it cancels the block, beyond
#: the scheduler's own check (:data:`SCHEDULER_CHECK_S`). It covers what makes a block that
#: the scheduler ended on time still look alive: start times printed in whole seconds (up to
#: 1 s), the clocks of the driver's host and the scheduler's (NTP keeps them within a second;
#: a few allowed), and the end reaching the job query. The same 5 s as ``LIMIT_SLACK_S``
#: (harvest/states.py). Small against ``safety_margin_s`` (120 s by default), which the native
#: job after the block relies on, and which must also hold the cancel's own kill delay (Slurm
#: ``KillWait``; PBS ends a qdel'ed job at once, its login shell dies of the TERM).
WALLTIME_MARGIN_S = 5.0

#: How often a scheduler checks time limits itself, when that is fixed and known: slurmctld
#: tests them every 30 s (``PERIODIC_TIMEOUT``), so a Slurm block is up to 30 s past its limit
#: before Slurm ends it TIMEOUT. The provider waits for that check rather than turning every
#: walltime end on Slurm into a cancel of its own. A PBS MoM's ``$check_poll`` is the site's
#: setting, often minutes: the provider does not wait for it. The emulated site ends a block at
#: its limit exactly.
SCHEDULER_CHECK_S: dict[str, float] = {"slurm": 30.0, "pbs": 0.0, "emulated": 0.0}


def walltime_margin(profile: SiteProfile) -> float:
    """Seconds a block may run past its walltime end before the provider cancels it: the
    profile's ``walltime_margin_s``, else :data:`WALLTIME_MARGIN_S` after the scheduler's own
    check (:data:`SCHEDULER_CHECK_S`)."""
    if profile.walltime_margin_s is not None:
        return profile.walltime_margin_s
    return SCHEDULER_CHECK_S.get(profile.scheduler, 0.0) + WALLTIME_MARGIN_S


class WalltimeGuard:
    """The poll's walltime step (a part of the provider)."""

    def __init__(self, book: BlockBook, ctx: PollContext, canceller: Canceller) -> None:
        self._book = book
        self._ctx = ctx
        self._canceller = canceller

    def end_overdue(self, snap: Snapshot, report: PollReport) -> None:
        """Cancel the blocks ``snap`` shows running :func:`walltime_margin` past their walltime
        end, after the scheduler confirms each still runs (a PBS job exiting at its limit is
        listed too, and is the scheduler's to end)."""
        now = self._ctx.clock()
        margin = walltime_margin(self._ctx.profile)
        listed = {j.job_id: j for j in snap.running}
        with self._book.lock:
            for rec in self._book.jobs.values():
                job = listed.get(rec.job_id)
                if job is not None and rec.phase in (Phase.RUNNING, Phase.YIELDING):
                    # An adapter that read no start puts the snapshot's own time there (PBS
                    # shows a job in R a moment before its stime): that is not a start.
                    _track(rec, snap.now, None if job.start == snap.now else job.start)
            overdue = [
                r
                for r in self._book.jobs.values()
                if r.phase is Phase.RUNNING
                and r.cancel_reason is None
                and r.job_id in listed
                and r.walltime_end is not None
                and now >= r.walltime_end + margin
            ]
        overdue = self._still_running(overdue)
        if not overdue:
            return
        with self._book.lock:
            for rec in overdue:
                rec.cancel_reason = CancelReason.WALLTIME
        self._ctx.faults["walltime_cancelled"] += len(overdue)
        for rec in overdue:
            report.overdue.append(rec.job_id)
            end = rec.walltime_end or now
            logger.warning(
                "block job %s still runs %.1f s past its walltime end (%.0f s from %.0f): the "
                "scheduler has not ended it within the %.0f s margin; cancelling",
                rec.job_id,
                now - end,
                rec.walltime_s,
                end - rec.walltime_s,
                margin,
            )
        self._canceller.cancel_now(overdue)

    def _still_running(self, records: list[JobRecord]) -> list[JobRecord]:
        """The records the scheduler says are RUNNING (a completing or suspended job is the
        scheduler's: it is ending it, or moves its limit). An unchecked id is not asked (it
        may be another job's; its cancel waits for the id anyway); when the query fails the
        snapshot's word stands."""
        checked = [r.job_id for r in records if r.checked]
        if not checked:
            return records
        try:
            states = self._ctx.scheduler.status(checked)
        except MalleableError as exc:
            logger.info("status of overdue blocks %s: %s", ", ".join(checked), exc)
            return records
        return [
            r
            for r in records
            if not r.checked or r.job_id not in states or states[r.job_id].state is JobState.RUNNING
        ]

    def next_check_in(self) -> float | None:
        """Seconds until the next running block is :func:`walltime_margin` past its walltime
        end (None: none is ahead); the poll thread polls then."""
        now = self._ctx.clock()
        margin = walltime_margin(self._ctx.profile)
        with self._book.lock:
            ahead = [
                r.walltime_end + margin - now
                for r in self._book.jobs.values()
                if r.phase is Phase.RUNNING
                and r.cancel_reason is None
                and r.walltime_end is not None
                and r.walltime_end + margin > now
            ]
        return min(ahead) if ahead else None


def _track(rec: JobRecord, seen: float, start: float | None) -> None:
    """Note when ``rec`` was first seen running (``seen``: the snapshot's time) and its walltime
    end: from ``start`` as the scheduler reports it, which is what its own limit counts from
    (a requeued job starts again), else from the first sight. Called with the lock held."""
    if rec.seen_running_at is None:
        rec.seen_running_at = seen
    rec.walltime_end = (start if start is not None else rec.seen_running_at) + rec.walltime_s


__all__ = ["SCHEDULER_CHECK_S", "WALLTIME_MARGIN_S", "WalltimeGuard", "walltime_margin"]
