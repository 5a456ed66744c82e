"""The ``parsl-malleable sim`` command."""

from __future__ import annotations

import pandas as pd
from click.testing import CliRunner

from parsl_malleable.cli import main

SWF = """; MaxNodes: 4
; MaxProcs: 4
1 0 0 100 3 -1 -1 3 100 -1 1 1 1 -1 1 -1 -1 -1
2 1 0 100 4 -1 -1 4 100 -1 1 1 1 -1 1 -1 -1 -1
3 2 0 50 1 -1 -1 1 50 -1 1 1 1 -1 1 -1 -1 -1
"""


def test_demo_prints_statistics_and_writes_csv(tmp_path):
    result = CliRunner().invoke(main, ["sim", "--demo", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "idle fraction" in result.output
    assert "jobs/s" in result.output
    jobs = pd.read_csv(tmp_path / "jobs.csv")
    idle = pd.read_csv(tmp_path / "idle.csv")
    assert len(jobs) == 5000
    assert {"sim_start", "sim_end", "sim_wait", "backfilled"} <= set(jobs.columns)
    assert list(idle.columns) == ["node", "idle_start", "idle_end"]
    assert (idle["idle_end"] > idle["idle_start"]).all()


def test_trace_file_with_policy_and_parquet(tmp_path):
    path = tmp_path / "small.swf"
    path.write_text(SWF)
    out = tmp_path / "out"
    args = ["sim", str(path), "--policy", "fcfs", "--out", str(out), "--format", "parquet"]
    result = CliRunner().invoke(main, [*args, "--end-cut", "last_end"])
    assert result.exit_code == 0, result.output
    jobs = pd.read_parquet(out / "jobs.parquet")
    assert jobs["sim_start"].tolist() == [0, 100, 200]
    idle = pd.read_parquet(out / "idle.parquet")
    assert idle["node"].str.startswith("n").all()


def test_usage_errors_are_explained(tmp_path):
    runner = CliRunner()
    result = runner.invoke(main, ["sim"])
    assert result.exit_code != 0 and "TRACE file or --demo" in result.output
    result = runner.invoke(main, ["sim", "--demo", "--policy", "sjf"])
    assert result.exit_code != 0 and "sjf" in result.output
    bad = tmp_path / "bad.swf"
    bad.write_text("1 2 3\n")
    result = runner.invoke(main, ["sim", str(bad)])
    assert result.exit_code != 0 and "bad.swf" in result.output
