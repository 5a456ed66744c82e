"""The stacks of a running process, Python and native (``py-spy dump --native``), for a test to
report when a process is slower than it should be: the evidence for the next look, whether or not
the test then passes."""

from __future__ import annotations

import re
import shutil
import subprocess

DUMP_TIMEOUT_S = 30.0


def stacks_of(pid: int) -> str:
    """Every thread's stack in process ``pid``: its Python threads (``py-spy``), then every
    thread's native stack (``gdb``: a library's own threads, gloo's, which py-spy does not
    list), then its TCP sockets (``ss``); or why each could not be read."""
    spy = _run(["py-spy", "dump", "--native", "--pid", str(pid)])
    native = _run(["gdb", "-p", str(pid), "-batch", "-nx", "-ex", "thread apply all bt 30"])
    tcp = _run(["ss", "-tanpe"])
    mine = "\n".join(line for line in tcp.splitlines() if f"pid={pid}," in line)
    return (
        f"{spy}\n--- native threads (gdb) ---\n{_frames(native)}\n"
        f"--- its TCP sockets (ss) ---\n{mine}"
    )


def _run(argv: list[str]) -> str:
    if shutil.which(argv[0]) is None:
        return f"({argv[0]} not installed)"
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=DUMP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"({argv[0]} took over {DUMP_TIMEOUT_S:.0f} s)"
    return (done.stdout + done.stderr).strip()


# Frames of the interpreter itself (its eval loop and calls): py-spy's listing already says
# which Python code runs there.
_INTERPRETER = re.compile(r" at (\./)?(Python|Objects|Modules|Include|Programs)/")


def _frames(gdb_output: str) -> str:
    """gdb's thread headers and frames, without its loading chatter or interpreter frames,
    each line cut to 160 characters."""
    keep = ("Thread ", "#")
    lines = [line for line in gdb_output.splitlines() if line.startswith(keep)]
    return "\n".join(line[:160] for line in lines if not _INTERPRETER.search(line))
