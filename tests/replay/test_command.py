"""``parsl-malleable replay`` from the command line."""

from __future__ import annotations

import csv

from click.testing import CliRunner

from parsl_malleable.cli import main
from parsl_malleable.replay.command import COLUMNS, NARROW, result_table


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


class _Extreme:
    """A replay result with the widest figures a full Summit replay prints."""

    policy = "ours+curves"

    def summary(self) -> dict[str, object]:
        return {
            "finished": 1000,
            "jobs": 1001,
            "samples": 12_345.678e9,
            "of_upper": 1.0,
            "of_offline": 0.634,
            "time_to_result_h": 123.34,
            "mean_jct_h": 12.5,
            "harvested_fraction": 0.923,
            "rescales": 1_234_567,
            "decisions": 23_456,
            "wall_s": 1234.5,
            "efficiency": 0.987,
        }


def test_the_default_table_fits_80_columns_with_every_cell_whole():
    result = CliRunner().invoke(
        main,
        ["replay", "--demo", "--days", "0.2", "--jobs", "4", "--policy", "freetrain"],
        env={"COLUMNS": "80"},
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= 80, result.output
    assert "…" not in result.output
    (row,) = [line for line in lines if line.startswith("freetrain ")]
    cells = row.split()
    assert len(cells) == len(NARROW)
    assert cells[1] == "2/4" and cells[3].endswith("%"), row  # jobs done; % of upper bound
    assert "--wide" in result.output  # where the other columns are
    # The widest figures of a full replay fit too.
    from rich.console import Console

    table = result_table([_Extreme()], wide=False)  # type: ignore[list-item]
    assert Console(width=200).measure(table).maximum <= 80


def test_wide_shows_every_column_whole_on_80_columns():
    args = ["replay", "--demo", "--days", "0.2", "--jobs", "4", "--policy", "ours", "--wide"]
    result = CliRunner().invoke(main, args, env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert "…" not in result.output
    (row,) = [line for line in result.output.splitlines() if line.startswith("ours ")]
    assert len(row.split()) == len(COLUMNS)
    for header in ("efficiency", "decisions", "JCT (h)"):
        assert header in result.output


def test_a_time_limited_count_shows_only_when_some_decision_was_stopped():
    import dataclasses

    from rich.console import Console

    from parsl_malleable.replay.result import ReplayResult

    plain = ReplayResult("ours", "hand", 0.0, 10.0, 10.0, [], 3, 0.1, 0, 0.1)
    stopped = dataclasses.replace(plain, policy="freetrain", time_limited=2)
    assert plain.summary()["time_limited"] == 0

    def text(results: list[ReplayResult]) -> str:
        console = Console(width=200, record=True)
        console.print(result_table(results, wide=False))
        return console.export_text()

    assert "limited" not in text([plain])
    shown = text([plain, stopped])
    assert "limited" in shown
    (row,) = [line for line in shown.splitlines() if line.startswith("freetrain")]
    assert row.split()[1] == "2"


def test_the_physics_and_start_up_options_reach_the_replay():
    args = ["replay", "--demo", "--days", "0.2", "--jobs", "4", "--policy", "freetrain"]
    runs = {}
    for extra in (
        [],
        ["--startup", "300"],
        ["--physics", "freetrain"],
        ["--block-walltime", "600"],
    ):
        result = CliRunner().invoke(main, [*args, *extra])
        assert result.exit_code == 0, result.output
        (row,) = [line for line in result.output.splitlines() if line.startswith("freetrain ")]
        runs[" ".join(extra)] = float(row.split()[2])
    # A 300 s start-up trains less than the measured 7 s; FreeTrain's model differs again.
    assert runs["--startup 300"] < runs[""]
    assert runs["--physics freetrain"] != runs[""]
    # Blocks of 10 minutes: each a new start, so less trained than on whole holes.
    assert runs["--block-walltime 600"] < runs[""]
