"""How an ended scheduler job of ours reads to Parsl.

Harvested blocks end for reasons that are not failures: their walltime ran out (the window was
only so long), the provider yielded them to a native job, the site preempted them, a node went
away. All of those are Parsl ``TIMEOUT``, which Parsl's error handling does not count against
the executor. Only a block whose own command failed is ``FAILED``. A job the scheduler has
forgotten (its record purged before we looked) is judged by its time limit: past it, it timed
out; before it, it ended on its own.
"""

from __future__ import annotations

from enum import StrEnum

from parsl.jobs.states import JobState as ParslState

from parsl_malleable.schedulers.records import JobState


class CancelReason(StrEnum):
    """Why the provider cancelled one of its own jobs."""

    YIELD = "yield"  # a native job needs the nodes: preemption, so TIMEOUT
    # Its node went down or was drained (a host that vanished, an administrator): not the
    # block's fault, so TIMEOUT, like a node failure.
    OUT_OF_SERVICE = "out-of-service"
    PARSL = "parsl"  # Parsl scaled the block in (or shut down): CANCELLED
    NOT_STARTED = "not-started"  # still pending after start_timeout_s: CANCELLED, never ran
    STRAY = "stray"  # a job of ours no slot holds (a failed submit's, a duplicate): CANCELLED
    # Still running past its walltime + WALLTIME_MARGIN_S (harvest/walltime.py): the scheduler
    # was late to end it, so the provider did. A walltime end, so TIMEOUT.
    WALLTIME = "walltime"


_BY_SCHEDULER: dict[JobState, ParslState] = {
    JobState.COMPLETED: ParslState.COMPLETED,
    JobState.TIMEOUT: ParslState.TIMEOUT,
    JobState.PREEMPTED: ParslState.TIMEOUT,
    # The node died under the block: not the block's fault, and not a reason to stop harvesting.
    JobState.NODE_FAIL: ParslState.TIMEOUT,
    JobState.FAILED: ParslState.FAILED,
    JobState.OUT_OF_MEMORY: ParslState.FAILED,
    JobState.CANCELLED: ParslState.CANCELLED,
}

# Slack when judging a vanished job by its limit: the scheduler kills at the limit, we look later.
LIMIT_SLACK_S = 5.0


def end_state(
    state: JobState,
    *,
    cancel_reason: CancelReason | None = None,
    end_limit: float | None = None,
    now: float | None = None,
    seen_running: bool = False,
    why_cancelled: str = "",
) -> tuple[ParslState, str]:
    """Parsl's state for one of our jobs that ended in scheduler state ``state``, and why
    (``why_cancelled``: the provider's own words for a cancel it decided, if any)."""
    if cancel_reason is CancelReason.YIELD:
        return ParslState.TIMEOUT, "yielded to a native job"
    if cancel_reason is CancelReason.OUT_OF_SERVICE:
        return ParslState.TIMEOUT, f"left: {why_cancelled or 'its node is out of service'}"
    if cancel_reason is CancelReason.NOT_STARTED:
        return ParslState.CANCELLED, "cancelled: did not start at once"
    if cancel_reason is CancelReason.PARSL:
        return ParslState.CANCELLED, "cancelled by Parsl"
    if cancel_reason is CancelReason.STRAY:
        return ParslState.CANCELLED, "cancelled: a job of ours that no block held"
    if cancel_reason is CancelReason.WALLTIME:
        return ParslState.TIMEOUT, "walltime reached; the scheduler had not ended it: cancelled"
    if state is JobState.UNKNOWN:
        if end_limit is not None and now is not None and now >= end_limit - LIMIT_SLACK_S:
            return ParslState.TIMEOUT, "left the queue at its time limit"
        if seen_running:
            return ParslState.COMPLETED, "left the queue before its time limit (outcome unknown)"
        return ParslState.CANCELLED, "left the queue before it was seen running"
    if state in _BY_SCHEDULER:
        parsl_state = _BY_SCHEDULER[state]
        what = {
            JobState.TIMEOUT: "walltime reached",
            JobState.PREEMPTED: "preempted by the site",
            JobState.NODE_FAIL: "a node failed",
            JobState.CANCELLED: "cancelled outside the provider",
        }.get(state, state.value.lower())
        return parsl_state, what
    raise ValueError(f"job state {state} has not ended")


def is_failure(state: ParslState) -> bool:
    """True for the ended states that say the block's own command is broken."""
    return state is ParslState.FAILED


__all__ = ["CancelReason", "end_state", "is_failure"]
