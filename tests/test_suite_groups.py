"""scripts/suite-groups sums a pytest durations log per xdist group (docs/benchmarks.md's
suite figures come from it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

LOG = """\
============================= slowest durations =============================
120.00s call     tests/a/test_x.py::test_one@slurm-cluster
 30.00s setup    tests/a/test_x.py::test_one@slurm-cluster
 60.00s call     tests/b/test_y.py::test_two
  0.50s teardown tests/b/test_y.py::test_two
1750 passed, 2 warnings in 1290.02s (0:21:30)
"""


def test_groups_files_and_the_wall_time_are_summed(tmp_path: Path) -> None:
    log = tmp_path / "ci.log"
    log.write_text(LOG)
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "suite-groups"), str(log)],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    rows = {
        line.split()[0]: line.split()
        for line in out.splitlines()
        if line[:1].isalpha() or line.startswith("(")
    }
    assert rows["slurm-cluster"][1:3] == ["1", "2.5"]  # one timed test, 150 s
    assert rows["(any"][2:4] == ["1", "1.0"]  # 60.5 s
    assert "3.5" in rows["all"] and "pytest's own wall time: 21.5 min" in out
    assert out.index("tests/a/test_x.py") < out.index("tests/b/test_y.py")


def test_a_log_without_durations_is_refused(tmp_path: Path) -> None:
    log = tmp_path / "ci.log"
    log.write_text("1 passed in 1.0s\n")
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "suite-groups"), str(log)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1 and "--durations=0" in done.stderr
