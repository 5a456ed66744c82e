"""ruff finds nothing to report and nothing to reformat (settings: [tool.ruff] in pyproject.toml).

CI runs only the README's test command, so the lint is a test, like the type check
(``tests/test_types.py``). ruff comes with the ``test`` extra.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "argv", [["check", "."], ["format", "--check", "."]], ids=["check", "format"]
)
def test_ruff_is_clean(argv: list[str]) -> None:
    if importlib.util.find_spec("ruff") is None:
        pytest.skip("ruff comes with the test extra")
    out = subprocess.run(
        [sys.executable, "-m", "ruff", *argv, "--no-cache"], cwd=REPO, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
