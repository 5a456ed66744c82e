"""mypy finds no type error in parsl_malleable/ (settings: [tool.mypy] in pyproject.toml).

CI runs only the README's test command, so the type check is a test. It is skipped where mypy
is not installed (it comes with the ``test`` extra, pinned, so CI always has it).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(300)
def test_mypy_is_clean(tmp_path: Path) -> None:
    pytest.importorskip("mypy", reason="mypy comes with the test extra")
    done = subprocess.run(
        # a fresh cache: an old one from another checkout must not hide errors here
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"), "parsl_malleable"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success: no issues found" in done.stdout
