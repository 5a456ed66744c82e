"""How ended jobs read to Parsl: walltime and preemption are TIMEOUT, never FAILED."""

from __future__ import annotations

import pytest
from parsl.jobs.states import JobState as P

from parsl_malleable.harvest.states import CancelReason, end_state, is_failure
from parsl_malleable.schedulers.records import JobState as S


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (S.TIMEOUT, P.TIMEOUT),
        (S.PREEMPTED, P.TIMEOUT),
        (S.NODE_FAIL, P.TIMEOUT),
        (S.COMPLETED, P.COMPLETED),
        (S.CANCELLED, P.CANCELLED),
        (S.FAILED, P.FAILED),
        (S.OUT_OF_MEMORY, P.FAILED),
    ],
)
def test_scheduler_states(state: S, expected: P) -> None:
    assert end_state(state)[0] is expected


def test_our_cancels_say_why() -> None:
    # A yield shows up as CANCELLED in Slurm, but it is a preemption: TIMEOUT.
    assert end_state(S.CANCELLED, cancel_reason=CancelReason.YIELD) == (
        P.TIMEOUT,
        "yielded to a native job",
    )
    # A block whose node went down or was drained left it: not a native job's doing.
    assert end_state(
        S.CANCELLED,
        cancel_reason=CancelReason.OUT_OF_SERVICE,
        why_cancelled="its node is out of service (n3 down)",
    ) == (P.TIMEOUT, "left: its node is out of service (n3 down)")
    assert end_state(S.CANCELLED, cancel_reason=CancelReason.PARSL)[0] is P.CANCELLED
    assert end_state(S.UNKNOWN, cancel_reason=CancelReason.NOT_STARTED)[0] is P.CANCELLED


def test_vanished_jobs_are_judged_by_their_limit() -> None:
    assert end_state(S.UNKNOWN, end_limit=100.0, now=120.0, seen_running=True)[0] is P.TIMEOUT
    assert end_state(S.UNKNOWN, end_limit=100.0, now=97.0, seen_running=True)[0] is P.TIMEOUT
    early = end_state(S.UNKNOWN, end_limit=100.0, now=50.0, seen_running=True)
    assert early[0] is P.COMPLETED and "outcome unknown" in early[1]
    assert end_state(S.UNKNOWN, end_limit=None, now=50.0)[0] is P.CANCELLED


def test_only_failed_is_a_failure_and_running_is_not_an_end() -> None:
    assert [s for s in P if is_failure(s)] == [P.FAILED]
    with pytest.raises(ValueError, match="has not ended"):
        end_state(S.RUNNING)
