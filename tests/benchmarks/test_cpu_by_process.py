"""``benchmarks/cpu_by_process.py``: the CPU a command's own process burns lands in its row,
its exit status is passed on, and the rows never exceed the machine's total."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "cpu_by_process.py"
# Half a second of CPU in the command itself, measured by the command, then exit status 3.
BURN = (
    "import time, sys\n"
    "t = time.process_time()\n"
    "while time.process_time() - t < 0.5: pass\n"
    "sys.exit(3)\n"
)


def test_the_commands_cpu_is_counted_as_the_drivers_and_its_status_passed_on() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--", sys.executable, "-c", BURN],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 3, done.stderr
    rows = dict(re.findall(r"^  (.+?)\s+([\d.]+) CPU-s", done.stdout, re.MULTILINE))
    assert 0.4 <= float(rows["driver (the command)"]) <= 2.0, done.stdout
    machine = float(rows["the whole machine"])
    assert sum(float(v) for k, v in rows.items() if k != "the whole machine") <= machine + 0.5
