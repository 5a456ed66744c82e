"""Online quantile recalibration: PIT values, resolution times, and the level it returns."""

from __future__ import annotations

import numpy as np
import pytest

from parsl_malleable.windows.calibrate import QuantileCalibration, pit


def test_pit_counts_draws_below_and_half_the_ties() -> None:
    samples = np.array([[10.0, 5.0], [20.0, 5.0], [30.0, 5.0], [40.0, 5.0]])
    assert pit(samples, np.array([25.0, 5.0])).tolist() == [0.5, 0.5]
    assert pit(samples, np.array([5.0, 1.0])).tolist() == [0.0, 0.0]
    assert pit(samples, np.array([40.0, 9.0])).tolist() == [0.875, 1.0]


def test_level_follows_over_optimistic_draws_and_uses_only_resolved_outcomes() -> None:
    rng = np.random.default_rng(0)
    # draws are exponential with mean 2; truth has mean 1: the draws are too long
    draws = rng.exponential(2.0, size=(400, 2000))
    actual = rng.exponential(1.0, size=2000)
    u = pit(draws, actual)
    cal = QuantileCalibration(min_count=200)
    assert cal.level(0.1, 0.0) == 0.1  # nothing known yet
    resolve_at = np.where(np.arange(2000) < 1000, 10.0, 99.0)
    cal.record(resolve_at, u)
    assert cal.level(0.1, 5.0) == 0.1  # nothing resolved by then
    level = cal.level(0.1, 10.0)
    # P(A < quantile_p(draws)) = 1 - (1 - p)^2 for these laws: 0.1 needs p = 1 - sqrt(0.9)
    assert level == pytest.approx(1 - np.sqrt(0.9), abs=0.02)
    assert cal.level(0.5, 100.0) == pytest.approx(1 - np.sqrt(0.5), abs=0.03)


def test_calibrated_draws_are_unchanged_when_already_calibrated() -> None:
    rng = np.random.default_rng(1)
    draws = rng.uniform(size=(200, 3000))
    cal = QuantileCalibration()
    cal.record(np.zeros(3000), pit(draws, rng.uniform(size=3000)))
    assert cal.level(0.1, 1.0) == pytest.approx(0.1, abs=0.02)
