"""The stacks of a running process, Python and native (``py-spy dump --native``), for a test to
report when a process is slower than it should be: the evidence for the next look, whether or not
the test then passes."""

from __future__ import annotations

import shutil
import subprocess

DUMP_TIMEOUT_S = 30.0


def stacks_of(pid: int) -> str:
    """Every thread's stack in process ``pid``, or why they could not be read."""
    spy = shutil.which("py-spy")
    if spy is None:
        return "(py-spy not installed)"
    try:
        done = subprocess.run(
            [spy, "dump", "--native", "--pid", str(pid)],
            capture_output=True, text=True, timeout=DUMP_TIMEOUT_S,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return f"(py-spy dump of {pid} took over {DUMP_TIMEOUT_S:.0f} s)"
    return (done.stdout + done.stderr).strip()
