"""The first run says that it compiles the simulator, and for about how long, instead of
sitting silent (a cold numba cache took 15-25 s on 2 cores)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from parsl_malleable.harvest.warmup import (
    COLD_COMPILE_S,
    event_loop_cached,
    load_message,
    load_with_status,
)


@pytest.mark.parametrize("check", ["event_loop_cached", "planner_cached"])
def test_an_empty_numba_cache_is_seen_as_cold(tmp_path: Path, check: str) -> None:
    # NUMBA_CACHE_DIR: an empty cache for this process only; the shared one stays as it is.
    # planner_cached adds the masked kernel to the plain one event_loop_cached reports.
    probe = f"from parsl_malleable.harvest.warmup import {check} as c; print(c())"
    out = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_the_cold_message_says_what_happens_and_how_long() -> None:
    low, high = COLD_COMPILE_S
    cold = load_message(False)
    assert "compiling" in cold and "first run" in cold and f"{low}-{high} s" in cold
    assert "compiling" in load_message(None)  # unknown: say it may compile
    assert "compiling" not in load_message(True)


def test_a_loaded_event_loop_prints_nothing_more() -> None:
    stream = io.StringIO()
    console = Console(file=stream, force_terminal=False)
    load_with_status(console)  # compiles or loads, once per process
    took = load_with_status(console)
    assert took < 1.0 and event_loop_cached() is True
    assert stream.getvalue().count("simulator compiled") <= 1
