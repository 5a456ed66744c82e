"""Online quantile recalibration: PIT values, resolution times, and the level it returns."""

from __future__ import annotations

import numpy as np
import pytest

from parsl_malleable.windows.calibrate import (
    QuantileCalibration,
    WindowCalibration,
    km_quantile,
    pit,
)


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


def test_km_quantile_matches_the_plain_quantile_without_censoring() -> None:
    values = np.arange(1.0, 101.0)
    assert km_quantile(values, np.ones(100, dtype=bool), 0.1) == 10.0
    assert km_quantile(values, np.ones(100, dtype=bool), 0.5) == 50.0
    assert km_quantile(np.empty(0), np.empty(0, dtype=bool), 0.1) == np.inf


def test_km_quantile_takes_censored_values_as_lower_bounds() -> None:
    # 50 windows ended at 1..50; 50 more were still going at 0.5 (pending, seen only briefly):
    # counted as ends they would put the 0.1 quantile at 0.5; as lower bounds they leave the
    # risk set and the ends alone decide
    values = np.concatenate([np.arange(1.0, 51.0), np.full(50, 0.5)])
    events = np.concatenate([np.ones(50, dtype=bool), np.zeros(50, dtype=bool)])
    assert km_quantile(values, events, 0.1) == 5.0
    assert km_quantile(values, np.ones(100, dtype=bool), 0.1) == 0.5
    # too many censored high up: the median is never reached
    assert km_quantile(values, events, 0.99) == 50.0
    assert km_quantile(np.array([1.0, 9.0, 9.0]), np.array([True, False, False]), 0.5) == np.inf


def _biased_windows(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Bases that are 5x too long on average, with windows far below the base at times."""
    actual = rng.exponential(3600.0, size=n)
    base = 5 * 3600.0 * rng.uniform(0.5, 1.5, size=n)
    return base, actual


def test_conformal_factor_reaches_the_quantile_where_the_draws_level_cannot() -> None:
    rng = np.random.default_rng(2)
    cal = WindowCalibration(min_count=50)
    horizon = 86400.0
    naive = np.full(400, horizon)
    covered = []
    for step in range(60):  # one batch of 400 windows every 10 minutes
        t = step * 600.0
        base, actual = _biased_windows(rng, 400)
        groups = cal.groups(base, naive, horizon)
        window = cal.adjust(0.1, base, groups, naive, t)
        if step >= 30:  # scored once the calibrator has seen a few hours
            covered.append(np.mean(window > actual))
        cal.record(0.1, t, base, groups, actual, np.ones(400, dtype=bool), window)
    assert abs(np.mean(covered) - 0.1) < 0.03
    # the draws' own window here is over-predicted ~98% of the time
    base, actual = _biased_windows(rng, 10_000)
    assert np.mean(base > actual) > 0.9


def test_conformal_uses_no_outcome_before_it_is_known() -> None:
    cal = WindowCalibration(min_count=10, refresh=1.0)
    horizon = 86400.0
    base = np.full(100, 1000.0)
    naive = np.full(100, horizon)
    groups = cal.groups(base, naive, horizon)
    # every window turns out to last 10 s: a factor of 0.01 once known
    cal.record(0.1, 0.0, base, groups, np.full(100, 10.0), np.ones(100, dtype=bool))
    # at t = 5 none has ended: each is known to last at least 5 s, nothing is an end yet, so
    # the factor is that lower bound (not the 10 s seen later, not the naive window)
    assert cal.factors(0.1, 5.0)[groups[0]] == pytest.approx(0.005)
    assert cal.factors(0.1, 20.0)[groups[0]] == pytest.approx(0.01)
    # windows reaching the horizon stay censored forever
    cal2 = WindowCalibration(min_count=10, refresh=1.0)
    cal2.record(0.1, 0.0, base, groups, np.full(100, horizon), np.zeros(100, dtype=bool))
    assert cal2.factors(0.1, 10 * horizon)[groups[0]] == pytest.approx(86.4)
    assert cal2.adjust(0.1, base, groups, naive, 10 * horizon).tolist() == naive.tolist()


def test_groups_separate_reserved_from_free_nodes_and_horizon_buckets() -> None:
    cal = WindowCalibration()
    horizon = 86400.0
    g = cal.groups(
        np.array([60.0, 60.0, 7200.0, 30_000.0]),
        np.array([600.0, horizon, 9000.0, horizon]),
        horizon,
    )
    assert g.tolist() == [0, 4, 2, 7]
    assert len(set(g.tolist())) == 4
