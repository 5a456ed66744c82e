"""The availability profile: the planner core shared by the simulator and plan_queue."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parsl_malleable.sim import AvailabilityProfile


def test_earliest_start_waits_for_enough_running_jobs_to_end():
    p = AvailabilityProfile(now=0.0, free_now=1, running_ends=[(50.0, 2), (100.0, 1)])
    assert p.steps() == [(0.0, 1), (50.0, 3), (100.0, 4)]
    assert p.earliest_start(1, 1000.0) == 0.0
    assert p.earliest_start(3, 10.0) == 50.0
    assert p.earliest_start(4, 10.0) == 100.0
    assert p.earliest_start(5, 10.0) == math.inf


def test_reserve_blocks_later_jobs_and_leaves_gaps_usable():
    p = AvailabilityProfile(now=0.0, free_now=4)
    p.reserve(100.0, 200.0, 3)
    assert p.free_at(150.0) == 1
    assert p.fits_now(4, 100.0)  # ends exactly when the reservation starts
    assert not p.fits_now(4, 101.0)
    assert p.earliest_start(2, 150.0) == 200.0
    assert p.earliest_start(1, 1e9) == 0.0
    p.release(100.0, 200.0, 3)
    assert p.steps()[-1] == (200.0, 4) and p.free_at(150.0) == 4
    with pytest.raises(ValueError, match="before"):
        p.reserve(-1.0, 5.0, 1)


def test_reservation_to_infinity():
    p = AvailabilityProfile(now=10.0, free_now=2)
    p.reserve(20.0, math.inf, 1)
    assert p.free_at(1e12) == 1
    assert p.earliest_start(2, 5.0) == 10.0
    assert p.earliest_start(2, 20.0) == math.inf


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 50), st.integers(1, 40), st.integers(1, 3)), max_size=8),
    st.integers(1, 6),
    st.integers(1, 30),
)
def test_earliest_start_is_the_first_feasible_breakpoint(reservations, k, d):
    nodes = 6
    p = AvailabilityProfile(now=0.0, free_now=nodes)
    held = []
    for s, length, c in reservations:
        if p.fits_now(0, 0) and min(p.free_at(t) for t in range(s, s + length)) >= c:
            p.reserve(float(s), float(s + length), c)
            held.append((s, s + length, c))

    def free(t):  # brute force over integer times
        return nodes - sum(c for a, b, c in held if a <= t < b)

    got = p.earliest_start(k, float(d))
    feasible = [t for t, _ in p.steps() if all(free(x) >= k for x in range(int(t), int(t) + d))]
    assert got == (min(feasible) if feasible else math.inf)
