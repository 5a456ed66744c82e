"""Parsl's HTEX interchange, started so that a log it cannot write stays out of the terminal.

The interchange is a process of its own (Parsl's ``interchange.py``) whose standard error is the
driver's, the user's terminal. It logs into ``interchange.log`` in the run directory; when that
disk is full, every record it logs makes Python's logging print a ``--- Logging error ---``
traceback there (five in a run whose disk filled as it started), above the one line that says
what happened and what to do (the state store's, see campaign/store_faults.py). The driver
drops logging's own errors for the same reason (``logging.raiseExceptions = False`` in
``campaign/command.py``); this does it in the interchange, then runs Parsl's interchange as its
script does (``interchange.py``: the module's ``__main__`` block, its configuration read from
standard input). :func:`~parsl_malleable.provider.harvest_executor` launches it with
:func:`launch_cmd`.

It also ends when the driver that started it dies (issue 49): Parsl never tells its interchange
of its parent, so a driver killed while ``parsl.load`` ran left it running for good (97-99 MiB,
seconds before the driver could register it with its watchdog). The wrapper is given the
driver's pid and watches for its own reparenting, which happens when that process dies however
it dies; it is a process-level test, unlike ``PR_SET_PDEATHSIG``, which fires when the *thread*
that started it ends.
"""

from __future__ import annotations

import logging
import os
import runpy
import signal
import sys
import threading
import time

INTERCHANGE_MODULE = "parsl.executors.high_throughput.interchange"

LAUNCH_CMD = [sys.executable, "-P", "-m", "parsl_malleable.harvest.quiet_interchange"]
"""The command that starts this module (``-P``: nothing is imported from the driver's working
folder, as the interchange script's own start does not); :func:`launch_cmd` adds the parent."""
ORPHAN_POLL_S = 0.5  # how soon an orphaned interchange notices; a getppid() is nothing


def launch_cmd(parent: int | None = None) -> list[str]:
    """HTEX's ``interchange_launch_cmd``: this module, watching ``parent`` (default: this
    process, the driver that calls :func:`~parsl_malleable.provider.harvest_executor`)."""
    return [*LAUNCH_CMD, "--parent", str(os.getpid() if parent is None else parent)]


def watch_parent(parent: int, *, poll_s: float = ORPHAN_POLL_S) -> threading.Thread:
    """A daemon thread that ends this process (SIGTERM, as a cancel would) once its parent is
    no longer ``parent``: the driver died and the process was handed to init or a subreaper."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os.kill(os.getpid(), signal.SIGTERM)

    thread = threading.Thread(target=watch, name="pm-orphan-watch", daemon=True)
    thread.start()
    return thread


def main(argv: list[str] | None = None) -> None:
    """Run Parsl's interchange with logging's error reports off, ending it with its driver
    when ``--parent PID`` is given."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 2 and argv[0] == "--parent":
        watch_parent(int(argv[1]))
    sys.argv = sys.argv[:1]  # the interchange's own module reads no arguments
    # A record that cannot be written is dropped; nothing else of the interchange changes.
    logging.raiseExceptions = False
    runpy.run_module(INTERCHANGE_MODULE, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()


__all__ = ["INTERCHANGE_MODULE", "LAUNCH_CMD", "launch_cmd", "main", "watch_parent"]
