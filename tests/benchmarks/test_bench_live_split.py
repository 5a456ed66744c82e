"""``bench_live_harvest.describe_by_queueing``: natives split by what they did in the first
baseline (queued behind others, or started at once), each native's delay kept with its own
baseline wait (an earlier version zipped the delays with the baseline's job indexes)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_live_harvest.py"


def _bench() -> Any:
    sys.path.insert(0, str(SCRIPT.parent))  # the script imports its neighbours
    spec = importlib.util.spec_from_file_location("bench_live_harvest", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_each_delay_is_judged_by_its_own_baseline_wait() -> None:
    bench = _bench()
    # Natives 0 and 3 queued in the baseline (waits 12 s and 30 s), 1 and 2 started at once.
    base_waits = [12.0, 0.1, 0.0, 30.0]
    delays = [0.5, 2.0, 0.01, 1.5]
    line = bench.describe_by_queueing("poll", delays, base_waits, noise_max=0.04)
    assert line == (
        "poll: natives queued in the baseline: 2, delay mean +1.00 s, max +1.50 s, "
        "2 beyond the noise; started at once there: 2, delay mean +1.00 s, max +2.00 s, "
        "1 beyond the noise"
    )


def test_a_class_with_no_native_says_none() -> None:
    line = _bench().describe_by_queueing("poll", [0.2], [0.0], noise_max=0.5)
    assert line.endswith(
        "queued in the baseline: 0; started at once there: 1, delay mean "
        "+0.20 s, max +0.20 s, 0 beyond the noise"
    )
