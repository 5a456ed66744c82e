"""``parsl-malleable replay`` from the command line."""

from __future__ import annotations

import csv

from click.testing import CliRunner

from parsl_malleable.cli import main


def test_replay_demo_writes_a_row_per_policy(tmp_path):
    out = tmp_path / "out"
    args = ["replay", "--demo", "--days", "0.2", "--jobs", "4", "--out", str(out)]
    args += ["--policy", "freetrain", "--policy", "ours"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "freetrain" in result.output and "ours" in result.output
    with (out / "summary.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [r["policy"] for r in rows] == ["freetrain", "ours"]
    assert all(float(r["samples"]) > 0 and float(r["harvested_fraction"]) <= 1 for r in rows)
    with (out / "jobs.csv").open() as handle:
        jobs = list(csv.DictReader(handle))
    assert len(jobs) == 8


def test_replay_refuses_a_bad_option():
    result = CliRunner().invoke(main, ["replay", "--days", "-1"])
    assert result.exit_code != 0
    assert "--days" in result.output
