"""One virtual node's share of an emulated block: ``python node_wrapper.py FD -- ARGV...``.

The emulated site starts this wrapper once per node of a block, each in a session (and so a
process group) of its own. It runs ARGV (the block's batch script) as its child in that group
and stays beside it to do what a node's daemon would:

* signals sent to the wrapper (USR1 for a yield or the walltime warning) are passed on to the
  batch shell only: the worker pools in the group must not see USR1 (harvest/block_script.py);
* when the driver process that owns the site dies, even by SIGKILL, the whole group ends:
  the read end FD of the site's lifeline pipe hits end-of-file (the driver held the only write
  end), and as a second sign the wrapper's parent changes (a child the driver forked could keep
  the pipe open). The group gets SIGTERM, then SIGKILL once every other process in it has
  exited or after :data:`DRIVER_LOSS_GRACE_S`, whichever comes first: the grace lets a rank
  finish the checkpoint it is writing, or write its last commit, before it goes (a rank that
  loses its coordinator or gets SIGTERM saves and exits). Without this, a crashed driver would
  leave worker pools running on this machine forever; without the grace, a save cut between
  its payload and its manifest lost the steps since the previous checkpoint.

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
# TERM to KILL once the driver is gone: long enough for a rank to write a checkpoint of a small
# or medium model to a local or parallel file system. The same as the driver watchdog's grace
# (parsl_malleable/watchdog.py, GRACE_S); the group is killed as soon as it is empty.
DRIVER_LOSS_GRACE_S = 10.0

_child: subprocess.Popen[bytes] | None = None


def _forward(signum: int, _frame: object) -> None:
    # A group-wide TERM (walltime, cancel) also reaches the child directly; passing it on
    # again is harmless, and keeps the wrapper alive until the child is gone.
    child = _child
    if child is not None and child.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)


def group_members(pgid: int) -> list[int]:
    """Pids of the live (not zombie) processes in process group ``pgid``, from /proc."""
    members = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as file:
                stat = file.read().decode(errors="replace")
        except OSError:
            continue
        # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
        fields = stat[stat.rindex(")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(name))
    return members


def _kill_group(grace_s: float = DRIVER_LOSS_GRACE_S) -> None:
    """TERM the wrapper's group, wait until nothing but the wrapper is left in it (at most
    ``grace_s``), then KILL the group, the wrapper included."""
    me = os.getpid()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(0, signal.SIGTERM)  # the wrapper's own handler just passes it on
    until = time.monotonic() + grace_s
    while time.monotonic() < until:
        if _child is not None:
            _child.poll()  # reap the batch shell, so that it does not count as alive
        if not [pid for pid in group_members(me) if pid != me]:
            break
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
