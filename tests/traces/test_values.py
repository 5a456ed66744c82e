"""Duration parsing shared by the scheduler-log readers."""

from __future__ import annotations

import math

import pytest

from parsl_malleable.traces._values import duration_seconds


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1-02:03:04", 93784.0),
        ("02:03:04", 7384.0),
        ("03:04", 184.0),
        ("45", 45.0),
        ("2-12", 216000.0),
        ("1-02:03", 93780.0),
        ("1:00:00:00", 86400.0),
        ("100:00:00", 360000.0),
    ],
)
def test_durations(text, seconds):
    assert duration_seconds(text) == seconds


def test_bare_numbers_in_minutes_for_slurm():
    assert duration_seconds("30", bare_unit=60.0) == 1800.0


@pytest.mark.parametrize("text", ["UNLIMITED", "Partition_Limit", "Unknown", "", "None"])
def test_unknown_durations_are_nan(text):
    assert math.isnan(duration_seconds(text))


@pytest.mark.parametrize("text", ["1h", "1-2-3", "1:2:3:4:5", "-5", "a-01:00", "1-1:2:3:4"])
def test_bad_durations_raise(text):
    with pytest.raises(ValueError, match="not a duration"):
        duration_seconds(text)
