"""The runtime/limit model: strata, back-off, conditioning on elapsed time."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from parsl_malleable.windows.runtime_model import JobKey, RuntimeRatioModel, size_class


def _jobs(ratios: list[float], nodes: int = 4, queue: str = "q", user: str = "u") -> pd.DataFrame:
    n = len(ratios)
    limit = np.full(n, 1000.0)
    return pd.DataFrame(
        {
            "start": np.zeros(n),
            "end": np.asarray(ratios) * limit,
            "walltime": limit,
            "nodes": np.full(n, nodes),
            "queue": [queue] * n,
            "user": [user] * n,
        }
    )


def test_size_classes_are_powers_of_two() -> None:
    assert [size_class(n) for n in (1, 2, 3, 4, 5, 8, 9)] == [0, 1, 2, 2, 3, 3, 4]


def test_unfitted_model_ends_jobs_at_their_limit() -> None:
    model = RuntimeRatioModel()
    ends = model.sample_ends(
        [JobKey(2)], np.array([100.0]), np.array([500.0]), 200.0, 8, np.random.default_rng(0)
    )
    assert ends.shape == (8, 1)
    assert np.all(ends == 600.0)


def test_user_stratum_wins_when_it_has_enough_jobs() -> None:
    history = pd.concat([_jobs([0.1] * 30, user="alice"), _jobs([0.9] * 30, user="bob")])
    model = RuntimeRatioModel.fit(history)
    assert model.quantile(JobKey(4, "q", "alice"), 0.5) == pytest.approx(0.1)
    assert model.quantile(JobKey(4, "q", "bob"), 0.5) == pytest.approx(0.9)
    # an unknown user falls back to the queue/size stratum that mixes both
    assert 0.1 <= model.quantile(JobKey(4, "q", "carol"), 0.5) <= 0.9


def test_small_strata_back_off_to_coarser_ones() -> None:
    history = pd.concat([_jobs([0.2] * 40, user="many"), _jobs([1.0] * 3, user="few")])
    model = RuntimeRatioModel.fit(history, min_samples=20)
    assert ("user", "q", "few") not in model.strata
    assert model.quantile(JobKey(4, "q", "few"), 0.5) == pytest.approx(0.2)


def test_conditioning_on_elapsed_time_only_keeps_longer_jobs() -> None:
    ratios = list(np.linspace(0.0, 1.0, 101))
    model = RuntimeRatioModel.fit(_jobs(ratios))
    rng = np.random.default_rng(1)
    # job started at 0 with limit 1000 has run 600 s: it must end in [600, 1000]
    ends = model.sample_ends(
        [JobKey(4, "q", "u")], np.array([0.0]), np.array([1000.0]), 600.0, 500, rng
    )
    assert ends.min() >= 600.0 and ends.max() <= 1000.0
    assert np.median(ends) == pytest.approx(800.0, abs=40.0)
    unconditioned = model.sample_runtimes([JobKey(4, "q", "u")], np.array([1000.0]), 500, rng)
    assert np.median(unconditioned) == pytest.approx(500.0, abs=60.0)


def test_job_that_outlived_its_history_ends_between_now_and_limit() -> None:
    model = RuntimeRatioModel.fit(_jobs([0.1] * 50))
    ends = model.sample_ends(
        [JobKey(4, "q", "u")],
        np.array([0.0]),
        np.array([1000.0]),
        900.0,
        200,
        np.random.default_rng(2),
    )
    assert ends.min() >= 900.0 and ends.max() <= 1000.0
    assert ends.std() > 0


def test_unlimited_and_overdue_jobs() -> None:
    model = RuntimeRatioModel.fit(_jobs([0.5] * 50))
    ends = model.sample_ends(
        [JobKey(4), JobKey(4)],
        np.array([0.0, 0.0]),
        np.array([np.inf, 100.0]),
        500.0,
        4,
        np.random.default_rng(3),
    )
    assert np.all(np.isinf(ends[:, 0]))
    assert np.all(ends[:, 1] == 500.0)  # past its limit: ends now


def test_fit_ignores_jobs_without_limit_or_runtime_and_clips_overruns() -> None:
    history = _jobs([0.5] * 30 + [3.0] * 30)
    history.loc[0:4, "walltime"] = np.nan
    history.loc[5:9, "end"] = np.nan
    model = RuntimeRatioModel.fit(history)
    ratios = model.strata[("all",)]
    assert len(ratios) == 50
    assert ratios.max() == 1.0
