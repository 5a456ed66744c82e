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
:data:`LAUNCH_CMD`.
"""

from __future__ import annotations

import logging
import runpy
import sys

INTERCHANGE_MODULE = "parsl.executors.high_throughput.interchange"

LAUNCH_CMD = [sys.executable, "-P", "-m", "parsl_malleable.harvest.quiet_interchange"]
"""HTEX's ``interchange_launch_cmd`` for this module (``-P``: nothing is imported from the
driver's working folder, as the interchange script's own start does not)."""


def main() -> None:
    """Run Parsl's interchange with logging's error reports off."""
    # A record that cannot be written is dropped; nothing else of the interchange changes.
    logging.raiseExceptions = False
    runpy.run_module(INTERCHANGE_MODULE, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()


__all__ = ["INTERCHANGE_MODULE", "LAUNCH_CMD", "main"]
