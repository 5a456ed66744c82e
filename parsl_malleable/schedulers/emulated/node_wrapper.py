"""One virtual node's share of an emulated block: ``python node_wrapper.py FD -- ARGV...``.

The emulated site starts this wrapper once per node of a block, each in a session (and so a
process group) of its own. It runs ARGV (the block's batch script) as its child in that group
and stays beside it to do what a node's daemon would:

* signals sent to the wrapper (USR1 for a yield or the walltime warning) are passed on to the
  batch shell only: the worker pools in the group must not see USR1 (harvest/launch.py);
* when the driver process that owns the site dies, even by SIGKILL, the whole group is
  killed: the read end FD of the site's lifeline pipe hits end-of-file (the driver held the
  only write end), and as a second sign the wrapper's parent changes (a child the driver
  forked could keep the pipe open). Without this, a crashed driver would leave worker pools
  running on this machine forever.

Standard library only and run by path with ``-I -S``: it starts in tens of milliseconds and
does not import the package.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time

FORWARDED = (
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGHUP,
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGALRM,
)
CHECK_S = 0.2  # how often the child and the parent are looked at
ORPHAN_GRACE_S = 1.0  # TERM to KILL once the driver is gone

_child: subprocess.Popen[bytes] | None = None


def _forward(signum: int, _frame: object) -> None:
    # A group-wide TERM (walltime, cancel) also reaches the child directly; passing it on
    # again is harmless, and keeps the wrapper alive until the child is gone.
    child = _child
    if child is not None and child.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)


def _kill_group() -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(0, signal.SIGTERM)  # the wrapper's own handler just passes it on
    until = time.monotonic() + ORPHAN_GRACE_S
    while _child is not None and _child.poll() is None and time.monotonic() < until:
        time.sleep(0.05)
    os.killpg(0, signal.SIGKILL)  # ends the wrapper too


def main(argv: list[str]) -> int:
    """Run ``argv[2:]`` (after ``--``) under the lifeline ``argv[0]``; its exit status."""
    global _child
    if len(argv) < 3 or argv[1] != "--":
        print("usage: node_wrapper.py LIFELINE_FD -- ARGV...", file=sys.stderr)
        return 2
    lifeline = int(argv[0])
    parent = os.getppid()
    for signum in FORWARDED:  # before the child exists, so no signal can slip past
        signal.signal(signum, _forward)
    _child = subprocess.Popen(argv[2:], close_fds=True)
    while True:
        code = _child.poll()
        if code is not None:
            return code if code >= 0 else 128 - code
        ready, _, _ = select.select([lifeline], [], [], CHECK_S)
        if (ready and not os.read(lifeline, 1)) or os.getppid() != parent:
            _kill_group()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
