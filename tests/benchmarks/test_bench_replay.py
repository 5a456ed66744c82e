"""The replay benchmarks' tables: every table has ``freetrain`` with no cap beside its capped
rows, the start-up sensitivity covers both physics, and the exact-gap script finds no policy
above the exact optimum under either physics (a few tiny instances: fast)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _bench(name: str) -> Any:
    sys.path.insert(0, str(BENCHMARKS))  # the scripts import their neighbours
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # their dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_every_replay_table_has_freetrain_with_no_cap_beside_its_caps() -> None:
    bench = _bench("bench_replay")
    assert ("freetrain", None) in bench.SATURATED_RUNS
    assert ("freetrain", 10) in bench.SATURATED_RUNS
    assert ("freetrain", None) in bench.SUMMIT_EXTRA
    assert ("freetrain", 100) in bench.SUMMIT_EXTRA
    sweep = _bench("bench_replay_sweep")
    for scale in (sweep.FULL, sweep.QUICK):
        labels = [row.label for row in sweep.rows(scale)]
        assert "freetrain (cap none)" in labels and "freetrain (cap 10)" in labels


def test_the_start_up_table_runs_both_physics_at_every_start_up() -> None:
    bench = _bench("bench_replay")
    assert bench.STARTUPS == (5.0, 30.0, 120.0, 300.0)
    rows = {(policy, physics) for policy, _, physics in bench.STARTUP_ROWS}
    for policy in ("ours", "freetrain"):
        assert {(policy, "runtime"), (policy, "freetrain")} <= rows
    assert ("scavenger", "") in rows and ("scavenger, start-up only", "") in rows


@pytest.mark.parametrize("physics", ["runtime", "freetrain"])
def test_the_exact_gap_script_finds_no_policy_above_the_optimum(physics, capsys) -> None:
    bench = _bench("bench_exact_gap")
    bench.main(["--instances", "3", "--nodes", "2", "--jobs", "2", "--physics", physics])
    out = capsys.readouterr().out
    assert f"{physics} physics" in out
    rows = [
        line.split() for line in out.splitlines() if line.split()[:1] in (["ours"], ["scavenger"])
    ]
    assert len(rows) == 2
    assert all(row[-1] == "0" for row in rows), out  # none above the exact optimum
