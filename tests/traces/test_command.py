"""The ``parsl-malleable trace`` command through click's CliRunner."""

from __future__ import annotations

import pandas as pd
from click.testing import CliRunner

from parsl_malleable.cli import main
from parsl_malleable.traces import JOB_COLUMNS

HEADER = "; Computer: Tiny\n; MaxNodes: 4\n; MaxProcs: 16\n"
LINES = [
    "1 0 10 100 4 -1 -1 4 200 -1 1 1 1 -1 1 -1 -1 -1",
    "2 50 0 50 40 -1 -1 40 60 -1 1 2 1 -1 1 -1 -1 -1",
]


def write(tmp_path, extra=""):
    path = tmp_path / "tiny.swf"
    path.write_text(HEADER + "\n".join(LINES) + "\n" + extra)
    return path


def test_summary_printed(tmp_path):
    result = CliRunner().invoke(main, ["trace", str(write(tmp_path))])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "Tiny: 4 nodes x 4 cores" in out
    assert "nodes_clamped" in out and "nodes_req_clamped" in out  # job 2 asks 40 of 16 cores
    # 1 node x 100 s + 4 nodes x 50 s over 4 nodes x 50 s of submits = 150%
    assert "150.0%" in out


def test_export_csv_and_parquet(tmp_path):
    path = write(tmp_path)
    for name in ("jobs.csv", "jobs.parquet"):
        out = tmp_path / name
        result = CliRunner().invoke(main, ["trace", str(path), "--out", str(out)])
        assert result.exit_code == 0, result.output
        frame = pd.read_csv(out) if name.endswith("csv") else pd.read_parquet(out)
        assert list(frame.columns) == list(JOB_COLUMNS)
        assert frame["nodes"].tolist() == [1, 4]


def test_bad_line_and_skip_bad(tmp_path):
    path = write(tmp_path, "3 x\n")
    result = CliRunner().invoke(main, ["trace", str(path)])
    assert result.exit_code != 0
    assert "tiny.swf:6: expected 18 fields, found 2" in result.output
    result = CliRunner().invoke(main, ["trace", str(path), "--skip-bad"])
    assert result.exit_code == 0, result.output
    assert "tiny.swf:6" in result.output


def test_options_validated(tmp_path):
    path = write(tmp_path)
    result = CliRunner().invoke(main, ["trace", str(path), "--out", str(tmp_path / "x.json")])
    assert result.exit_code != 0 and ".csv or .parquet" in result.output
    result = CliRunner().invoke(main, ["trace", str(path), "--format", "cobalt"])
    assert result.exit_code != 0 and "nodes" in result.output
    result = CliRunner().invoke(main, ["trace", str(path), "--cores-per-node", "2"])
    assert result.exit_code == 0 and "cores_per_node_option_ignored" in result.output
