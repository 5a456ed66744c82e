"""Checks that need CPU but no waiting, started in the background when the session begins.

mypy takes about 35 s of CPU, while many tests sit waiting on Slurm, sockets or a dead-man
switch. ``tests/conftest.py`` starts it, at the lowest priority, once the session has collected
``tests/test_types.py``; that test collects the answer. The suite's wall time no longer pays for
it.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


class BackgroundCheck:
    """One command running beside the tests; :meth:`result` waits for its exit and output."""

    def __init__(self, argv: list[str]) -> None:
        self.cache = Path(tempfile.mkdtemp(prefix="pm-check-"))
        nice = ["nice", "-n", "19"] if shutil.which("nice") else []
        self._process = subprocess.Popen(
            [*nice, *argv, "--cache-dir", str(self.cache)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def result(self, timeout_s: float) -> tuple[int, str]:
        """``(exit status, output)``; the command is killed if it outlives ``timeout_s``."""
        try:
            output, _ = self._process.communicate(timeout=timeout_s)
        finally:
            self._process.kill()
            self._process.wait()
            shutil.rmtree(self.cache, ignore_errors=True)
        return self._process.returncode, output


_started: dict[str, BackgroundCheck] = {}


def mypy() -> BackgroundCheck | None:
    """``mypy parsl_malleable`` with a fresh cache (an old one from another checkout must not
    hide errors here), started on the first call; None where mypy is not installed."""
    if "mypy" not in _started:
        if importlib.util.find_spec("mypy") is None:
            return None
        _started["mypy"] = BackgroundCheck([sys.executable, "-m", "mypy", "parsl_malleable"])
    return _started["mypy"]
