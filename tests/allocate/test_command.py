"""`parsl-malleable allocate` on the shared FreeTrain workload and Summit idle trace."""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from parsl_malleable.cli import main


def _rows(output: str) -> dict[str, list[int]]:
    rows = {}
    for line in output.splitlines():
        cells = [c.strip() for c in re.split(r"[│|]", line) if c.strip()]
        if len(cells) == 6 and cells[0].startswith("J0"):
            rows[cells[0]] = [int(c) for c in cells[1:]]
    return rows


def test_allocate_command_respects_node_count_and_no_migration(bftrainer_dir: Path) -> None:
    args = [
        "allocate", "--workload-dir", str(bftrainer_dir), "--jobs", "6", "--nodes", "40",
        "--idle-intervals", str(bftrainer_dir / "summit-idle-intervals-2021-02.csv.gz"),
        "--solver", "cbc",
    ]  # fmt: skip
    result = CliRunner().invoke(main, args, terminal_width=200)
    assert result.exit_code == 0, result.output
    rows = _rows(result.output)
    assert len(rows) == 6
    assert sum(after for _, after, *_ in rows.values()) <= 40
    for name, (before, after, added, released, expired) in rows.items():
        assert after == before + added - released - expired, name
        assert not (added and released), f"{name} migrates: adds and drops live nodes"
    assert "blocks to request" in result.output


def test_allocate_command_names_a_missing_workload(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["allocate", "--workload-dir", str(tmp_path)])
    assert result.exit_code != 0
    assert "imagenet-imgps-1001J" in result.output
