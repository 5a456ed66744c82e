"""The planner is loaded before the first poll, and the log says so with its duration."""

from __future__ import annotations

import logging

import pytest

from parsl_malleable.provider import BackfillProvider


def test_the_planner_load_is_logged_with_its_duration(
    tmp_path, caplog: pytest.LogCaptureFixture
) -> None:
    # No scheduler command runs: loading plans a built-in three-node machine.
    provider = BackfillProvider("slurm-test", script_dir=str(tmp_path), autostart=False)
    with caplog.at_level(logging.INFO, logger="parsl_malleable.provider"):
        seconds = provider.load_planner()
        again = provider.load_planner()
    said = [r.getMessage() for r in caplog.records]
    assert any("loading the window planner" in m for m in said)
    assert any(m.startswith("window planner ready in") for m in said)
    assert again == seconds  # loaded once per provider: the second call reads the first's time
    ready = next(m for m in said if m.startswith("window planner ready in"))
    assert ready == f"window planner ready in {seconds:.1f} s"  # the log says what it measured
    assert sum(m.startswith("loading the window planner") for m in said) == 1
    assert provider.polls == 0
