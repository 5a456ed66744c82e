"""The teardown a yield plans for: measured from the provider's own cancels."""

from __future__ import annotations

from parsl_malleable.harvest.teardown import (
    MAX_SAMPLE_S,
    PRINTED_RESOLUTION_S,
    RECENT,
    TeardownEstimate,
)


def test_the_profile_value_holds_until_a_cancel_is_measured() -> None:
    estimate = TeardownEstimate(initial_s=2.5)
    assert estimate.seconds == 2.5 and estimate.measured == 0


def test_an_end_printed_in_whole_seconds_counts_at_its_latest() -> None:
    estimate = TeardownEstimate(initial_s=2.5)
    # Cancel sent at .6, the scheduler printed the end as second 100: it came before 101.
    estimate.add(cancel_sent_at=99.6, ended_at=100.0)
    assert estimate.seconds == 100.0 + PRINTED_RESOLUTION_S - 99.6
    assert estimate.measured == 1


def test_the_recent_worst_is_used_and_old_samples_age_out() -> None:
    estimate = TeardownEstimate(initial_s=1.0)
    estimate.add(0.0, 9.0)  # one slow epilogue: 10 s
    assert estimate.seconds == 10.0
    for i in range(RECENT):
        estimate.add(float(i), float(i))  # then fast ones: 1 s each
    assert estimate.seconds == 1.0
    assert estimate.measured == RECENT + 1


def test_an_end_before_the_cancel_or_minutes_after_is_no_teardown() -> None:
    estimate = TeardownEstimate(initial_s=3.0)
    estimate.add(cancel_sent_at=200.0, ended_at=150.0)  # it ended on its own first
    estimate.add(cancel_sent_at=0.0, ended_at=MAX_SAMPLE_S + 10)  # clocks apart
    assert estimate.seconds == 3.0 and estimate.measured == 0
