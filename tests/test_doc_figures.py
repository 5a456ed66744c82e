"""Seeded, machine-independent figures in docs/benchmarks.md match what the code gives today.

Timings move with the machine; optima of seeded instances and row counts of the carried traces
do not. Each figure is read from the doc's table (so a stale doc fails here) and recomputed
with the code the benchmark script runs.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from parsl_malleable import data
from parsl_malleable.allocate import allocate, load_workload
from parsl_malleable.allocate.instances import make_instance, summit_remaining_windows
from parsl_malleable.traces import read_swf

DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


def _row(first_cell: str, having: str = "") -> str:
    """The doc's table row that starts with ``| first_cell |`` (and contains ``having``)."""
    for line in DOC.read_text().splitlines():
        if line.startswith(f"| {first_cell} |") and having in line:
            return line
    raise AssertionError(f"docs/benchmarks.md has no row '| {first_cell} |' with {having!r}")


def _numbers(text: str) -> list[float]:
    return [float(n.replace(",", "")) for n in re.findall(r"\d[\d,]*(?:\.\d+)?", text)]


@pytest.mark.parametrize(
    ("trace", "first_cell"),
    [
        ("theta_2022.swf", "theta_2022.swf.gz"),
        ("UniLu-Gaia-2014-1.swf", "UniLu-Gaia-2014-1.swf.gz"),
    ],
)
def test_trace_row_counts(trace: str, first_cell: str) -> None:
    cells = _row(first_cell).split("|")
    assert len(read_swf(data.path(trace)).jobs) == int(cells[2].strip().replace(",", ""))


def test_horizon_optima_of_the_seeded_10_by_100_instance() -> None:
    """The 10 jobs x 100 nodes row: optimum with and without shrink pauses, and the greedy
    rule's value, as bench_allocate.py computes them (seed 1)."""
    cells = _row("10 x 100", "optimal").split("|")
    with_pauses = _numbers(cells[2].split("optimal")[1])[0]
    without = _numbers(cells[3].split("optimal")[1])[0]
    greedy = _numbers(cells[4].split(",", 1)[1])[0]
    workloads = data.data_dir() / "bftrainer"
    jobs = load_workload(workloads, "imagenet-imgps-1001J", limit=10)
    remaining = summit_remaining_windows(
        workloads / "summit-idle-intervals-2021-02.csv.gz", 100, seed=1
    )
    inst = make_instance(jobs, 100, remaining, seed=1)

    def value(solver: str, shrink_pauses: bool) -> float:
        alloc = allocate(
            inst.jobs,
            inst.free_nodes,
            inst.windows,
            solver=solver,
            time_limit=10.0,
            max_horizon_s=3600.0,
            shrink_pauses=shrink_pauses,
            gap_rel=1e-4,
            objective="throughput",  # bench_allocate.py's model (FreeTrain's)
            pause_rate="before",
            threads=None,
        )
        return float(alloc.objective)

    assert value("highs", True) == pytest.approx(with_pauses, abs=1.0)
    assert value("highs", False) == pytest.approx(without, abs=1.0)
    assert value("greedy", True) == pytest.approx(greedy, abs=1.0)
