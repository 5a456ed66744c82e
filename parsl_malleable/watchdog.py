"""The dead-man switch of a driver: when the driver dies, nothing it started survives it.

``kill -9`` of a driver (the campaign runner, or a notebook that loaded Parsl) leaves Parsl's
interchange running (it does not watch its parent), the worker pools of a ``LocalProvider``
connected to it, and on a real scheduler blocks that nobody will cancel. So the driver starts
this module as a small separate process, :class:`Watchdog`, and tells it what to clean up:
local processes and process groups (pid and start time, so a reused pid is never hit) and
scheduler jobs with the command that cancels them.

The driver tells it through the watchdog's standard input, a pipe only the driver holds: one
JSON line per change, the whole list each time. Nothing is read from a file, so no other user
can make the watchdog act, whatever the permissions of the folders a run writes to. The
watchdog checks every :data:`POLL_S` seconds whether the driver still lives (the pipe may also
reach end-of-file, when the driver dies and no child kept a copy of it). When the driver is gone
without a word, the watchdog

1. sends ``SIGTERM`` to every listed process and group, and runs the cancel commands (``scancel``
   and ``qdel`` give a job's processes ``SIGTERM`` first too), so that a rank can finish a save
   in progress;
2. waits up to :data:`GRACE_S` seconds for the processes to exit;
3. sends ``SIGKILL`` to whatever is left, and exits.

A clean exit sends ``{"release": true}``: the watchdog leaves without acting.

Besides what it is told, the watchdog follows the driver's whole process tree itself (issue 49):
every :data:`POLL_S` it reads ``/proc`` and adds each new descendant of the driver (pid and
start time), so a process the driver starts is under the switch from its first poll on, whether
or not anyone registers it. Parsl's interchange was registered only after ``parsl.load``
returned, seconds after it started (17 s on a busy host): a kill in between left it running for
good. The tree must be known before the driver dies, because its orphans are handed to init (or
a subreaper) at once; for a process started after the last poll, the sweep at the driver's death
also takes the processes of the driver's own process group (where Parsl's ``Popen`` puts the
interchange) that started since that poll. What the watchdog itself starts (the cancel
commands) is never part of the tree.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

# How often the driver's liveness and its process tree are read: often, because a process
# started since the last read is found only by the sweep of the driver's group; a /proc scan
# costs about 1-3 ms.
POLL_S = 0.2
GRACE_S = 10.0  # between SIGTERM and SIGKILL: long enough for a rank to finish a checkpoint
CANCEL_TIMEOUT_S = 60.0
_MAX_LINE = 1 << 20  # a list of pids and job ids; a longer line is not the driver's
SAFE_PATH_ENV = "PYTHONSAFEPATH"  # Python 3.11+: 1 is -P, no script or working folder on the path


def process_start_time(pid: int) -> str | None:
    """Field 22 of ``/proc/<pid>/stat`` (start time in clock ticks); None if there is no such
    process or it has exited (a zombie that its parent has not reaped yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] in ("Z", "X") else fields[19]


def alive(pid: int, started: str | None) -> bool:
    """Whether ``pid`` is the same process that had start time ``started``."""
    now = process_start_time(pid)
    return now is not None and (started is None or now == started)


@dataclass(frozen=True)
class ProcInfo:
    """What ``/proc/<pid>/stat`` says of one live process."""

    ppid: int
    pgid: int
    sid: int
    started: str  # start time in clock ticks since boot (field 22)


def process_table() -> dict[int, ProcInfo]:
    """Every live process (zombies left out): pid -> its parent, group and start time."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as file:
                stat = file.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2 :].split()
        if fields[0] in (b"Z", b"X"):
            continue
        table[int(name)] = ProcInfo(
            int(fields[1]), int(fields[2]), int(fields[3]), fields[19].decode()
        )
    return table


def _uptime_ticks() -> int:
    """Now, in the clock ticks of a process's start time (``/proc/uptime`` x ``CLK_TCK``)."""
    with open("/proc/uptime") as file:
        seconds = float(file.read().split()[0])
    return int(seconds * os.sysconf("SC_CLK_TCK"))


class ProcessTree:
    """The descendants of one process in its session, as seen by polling ``/proc``: pid ->
    start time.

    A descendant stays known after its parent dies (it is reparented, it is still ours); one
    that exits is dropped. ``exclude`` (the watchdog itself) is never added, nor anything under
    it. A descendant that left the session (``setsid``: a daemon such as a test's Slurm
    cluster, meant to outlive its starter, or a block's process group, which the driver lists
    by itself) is not followed, nor what it starts.
    """

    def __init__(self, root: int, root_started: str | None, *, exclude: int) -> None:
        self.root = root
        self.root_started = root_started
        self.exclude = exclude
        self.known: dict[int, str] = {}
        self.root_group: int | None = None
        self.root_session: int | None = None
        if root_started is not None:
            # The root may die between reading its start time and these: then there is no tree
            # to follow (and the watchdog cleans up what it was told, as before).
            with contextlib.suppress(ProcessLookupError):
                self.root_group, self.root_session = os.getpgid(root), os.getsid(root)
        # When the tree was last read with the root alive; before any read, the root's start
        # (so the sweep never takes what its group held before the root began).
        self.polled_ticks = int(root_started) if root_started is not None else 0

    def poll(self, table: dict[int, ProcInfo] | None = None) -> None:
        """Add the new descendants; drop the ones that exited."""
        ticks = _uptime_ticks()
        table = process_table() if table is None else table
        self.known = {
            pid: started
            for pid, started in self.known.items()
            if pid in table and table[pid].started == started
        }
        parents = set(self.known)
        if self.root in table and table[self.root].started == self.root_started:
            parents.add(self.root)
            self.polled_ticks = ticks
        grew = True
        while grew:  # a child can be listed before its parent: repeat until nothing is added
            grew = False
            for pid, info in table.items():
                if pid in self.known or pid == self.exclude or pid == self.root:
                    continue
                if info.ppid in parents and info.sid == self.root_session:
                    self.known[pid] = info.started
                    parents.add(pid)
                    grew = True

    def sweep_group(self, table: dict[int, ProcInfo] | None = None) -> None:
        """After the root died: add the members of its process group that started since the
        last poll and were handed to a reaper (children it made in the last moment).

        A member whose parent is another live member of the group is not the driver's orphan:
        the group is often a shell script's or a test runner's, whose next command (``run``
        then ``status``) starts in it as the driver dies. Parsl's interchange also ends by
        itself when its driver dies (``harvest/quiet_interchange.py``), whatever reaper
        takes it."""
        if self.root_group is None:
            return
        table = process_table() if table is None else table

        def orphaned(info: ProcInfo) -> bool:
            parent = table.get(info.ppid)
            return parent is None or parent.pgid != self.root_group or info.ppid in self.known

        for pid, info in table.items():
            if (
                info.pgid == self.root_group
                and pid not in (self.exclude, self.root)
                and int(info.started) >= self.polled_ticks - 1
                and pid not in self.known
                and orphaned(info)
            ):
                self.known[pid] = info.started
        self.poll(table)  # and whatever those started

    def pairs(self) -> list[list[Any]]:
        """The known descendants as state pairs ``[pid, start time]``."""
        return [[pid, started] for pid, started in self.known.items()]


def group_members(pgid: int) -> list[int]:
    """The live processes of process group ``pgid`` (read from ``/proc``)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] not in ("Z", "X") and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


class Watchdog:
    """The driver's side: start the watchdog process, keep it told what to clean up.

    One per driver process is enough: :func:`driver_watchdog` gives it. Thread-safe.
    """

    def __init__(self, *, grace_s: float = GRACE_S) -> None:
        self.grace_s = grace_s
        self._lock = threading.Lock()
        self._processes: dict[int, str | None] = {}
        self._groups: dict[int, str | None] = {}
        self._keyed_groups: dict[str, dict[int, str | None]] = {}  # key -> its groups
        self._jobs: dict[str, tuple[list[str], list[str]]] = {}  # key -> (cancel argv, ids)
        self._sent = ""
        self.owner_pid = os.getpid()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def started(self) -> bool:
        """Whether the watchdog process runs (and has not been released)."""
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        """Start the watchdog process for this (the calling) process; idempotent."""
        with self._lock:
            if self.proc is not None:
                return
            self.proc = subprocess.Popen(
                watchdog_argv(os.getpid(), self.grace_s),
                stdin=subprocess.PIPE,
                start_new_session=True,  # a Ctrl-C to the driver's group must not stop it first
                # Not the driver's working folder, which may be a shared one (issue 49): "/"
                # is root's, and the watchdog holds no folder of the user's busy.
                cwd="/",
                env=isolated_environment(),
            )
            self._send_locked(force=True)

    def watch_process(self, pid: int, *, group: bool = False) -> None:
        """Stop ``pid`` (its whole process group with ``group``) if the driver dies."""
        with self._lock:
            target = self._groups if group else self._processes
            if pid not in target:
                target[pid] = process_start_time(pid)
                self._send_locked()

    def forget_process(self, pid: int, *, group: bool = False) -> None:
        """No longer stop ``pid`` (it ended, or someone else owns it now)."""
        with self._lock:
            target = self._groups if group else self._processes
            if pid in target:
                del target[pid]
                self._send_locked()

    def set_groups(self, key: str, pgids: Iterable[int]) -> None:
        """The process groups of ``key`` (for example a LocalProvider's blocks) are exactly
        ``pgids``: new ones are watched, ones no longer listed are forgotten."""
        with self._lock:
            old = self._keyed_groups.get(key, {})
            self._keyed_groups[key] = {p: old.get(p) or process_start_time(p) for p in pgids}
            self._send_locked()

    def set_jobs(self, key: str, cancel_argv: Sequence[str], job_ids: Iterable[str]) -> None:
        """Scheduler jobs of ``key`` (a provider) to cancel with ``cancel_argv + job_ids`` if the
        driver dies; replaces what ``key`` listed before."""
        with self._lock:
            self._jobs[key] = (list(cancel_argv), [str(j) for j in job_ids])
            self._send_locked()

    def release(self) -> None:
        """Clean exit: the driver cleaned up itself; the watchdog leaves without acting."""
        with self._lock:
            proc, self.proc = self.proc, None
        if proc is None or proc.stdin is None:
            return
        with contextlib.suppress(OSError):
            proc.stdin.write(b'{"release": true}\n')
            proc.stdin.flush()
        with contextlib.suppress(OSError):
            proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)

    def state(self) -> dict[str, Any]:
        """What the watchdog would clean up now (JSON-ready)."""
        with self._lock:
            return self._state_locked()

    def _state_locked(self) -> dict[str, Any]:
        return {
            "processes": [[p, s] for p, s in self._processes.items()],
            "groups": [
                [p, s]
                for p, s in [
                    *self._groups.items(),
                    *(i for g in self._keyed_groups.values() for i in g.items()),
                ]
            ],
            "jobs": [[argv, ids] for argv, ids in self._jobs.values() if argv and ids],
        }

    def _send_locked(self, *, force: bool = False) -> None:
        if self.proc is None or self.proc.stdin is None:
            return
        line = json.dumps(self._state_locked(), separators=(",", ":"))
        if line == self._sent and not force:
            return
        try:
            self.proc.stdin.write(line.encode() + b"\n")
            self.proc.stdin.flush()
        except OSError as exc:  # the watchdog died: say so once, the run goes on
            logger.warning(
                "the driver's watchdog is gone (%s): nothing cleans up after a crash", exc
            )
            self.proc = None
            return
        self._sent = line


def isolate_child_imports() -> None:
    """From now on, no Python process that this one starts (or that those start) imports from
    its working folder or its script's folder (issue 49): ``PYTHONSAFEPATH=1``, Python's
    ``-P``, in this process's environment, which children inherit (multiprocessing passes a
    parent's ``-P`` on as well). Without it ``python -m`` and ``python -c`` (multiprocessing's
    resource tracker and fork server) put their working folder, often the driver's, first on
    ``sys.path``, and a package another user planted there runs as the user. ``PYTHONPATH``
    (a campaign's ``python_path``) is kept: it names folders the user chose."""
    os.environ[SAFE_PATH_ENV] = "1"


def isolated_environment() -> dict[str, str]:
    """This process's environment, with :func:`isolate_child_imports`'s setting."""
    return {**os.environ, SAFE_PATH_ENV: "1"}


def watchdog_argv(driver_pid: int, grace_s: float) -> list[str]:
    """The watchdog process's command line: ``-P``, so that ``-m`` does not put its working
    folder first on ``sys.path`` (it imports this package, which must be the installed one)."""
    return [sys.executable, "-P", "-m", __name__, str(driver_pid), repr(float(grace_s))]


_DRIVER: Watchdog | None = None
_DRIVER_LOCK = threading.Lock()


def driver_watchdog() -> Watchdog:
    """This process's watchdog, started on first use (a fork gets its own)."""
    global _DRIVER
    with _DRIVER_LOCK:
        if _DRIVER is None or _DRIVER.proc is None or _DRIVER.owner_pid != os.getpid():
            # The first thing a driver starts: from here on, no process it starts imports
            # from its working folder.
            isolate_child_imports()
            _DRIVER = Watchdog()
            _DRIVER.start()
        return _DRIVER


# ----------------------------------------------------------------------- the watchdog process


def _signal_all(state: dict[str, Any], sig: int, *, only_new: list[str] | None = None) -> list[str]:
    """Send ``sig`` to every live process and group of ``state``; with ``only_new`` (what was
    done so far), only to those not already in it (a process that appeared in the grace)."""
    done = []
    name = signal.Signals(sig).name
    for pid, started in state.get("groups", []):
        note = f"sent {name} to process group {pid}"
        if only_new is not None and note in only_new:
            continue
        if alive(int(pid), started) or group_members(int(pid)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(pid), sig)
                done.append(note)
    for pid, started in state.get("processes", []):
        note = f"sent {name} to process {pid}"
        if only_new is not None and note in only_new:
            continue
        if alive(int(pid), started):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(pid), sig)
                done.append(note)
    if only_new is not None:
        only_new += done
    return done


def _left(state: dict[str, Any]) -> bool:
    return any(alive(int(p), s) for p, s in state.get("processes", [])) or any(
        group_members(int(p)) for p, _ in state.get("groups", [])
    )


def clean_up(
    state: dict[str, Any], *, grace_s: float = GRACE_S, tree: ProcessTree | None = None
) -> list[str]:
    """TERM what ``state`` lists and cancel its jobs, KILL what is left after ``grace_s``;
    what was done, for the log. With ``tree`` (the dead driver's descendants), every process in
    it is stopped too, and so is whatever they start while the grace runs."""

    def with_tree() -> dict[str, Any]:
        if tree is None:
            return state
        tree.poll()  # their children, started since the last look
        return {**state, "processes": [*state.get("processes", []), *tree.pairs()]}

    done = _signal_all(with_tree(), signal.SIGTERM)
    for argv, ids in state.get("jobs", []):
        try:
            subprocess.run(
                [*argv, *ids], timeout=CANCEL_TIMEOUT_S, check=False, capture_output=True
            )
            done.append(f"ran {argv[0]} on {len(ids)} job(s)")
        except (OSError, subprocess.TimeoutExpired) as exc:
            done.append(f"{argv[0]} failed: {exc}")
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        now = with_tree()
        if not _left(now):
            break
        _signal_all(now, signal.SIGTERM, only_new=done)
        time.sleep(0.1)
    done += _signal_all(with_tree(), signal.SIGKILL)
    return done


def _is_pair(item: Any) -> bool:
    return (
        isinstance(item, list)
        and len(item) == 2
        and isinstance(item[0], int)
        and (item[1] is None or isinstance(item[1], str))
    )


def _is_job(item: Any) -> bool:
    return (
        isinstance(item, list)
        and len(item) == 2
        and all(isinstance(part, list) and all(isinstance(a, str) for a in part) for part in item)
    )


def _valid(state: Any) -> bool:
    """Whether ``state`` is a state line as :class:`Watchdog` writes it."""
    if not isinstance(state, dict):
        return False
    lists = [state.get(k, []) for k in ("processes", "groups", "jobs")]
    if not all(isinstance(x, list) for x in lists):
        return False
    processes, groups, jobs = lists
    return all(map(_is_pair, processes + groups)) and all(map(_is_job, jobs))


def watch(driver: int, grace_s: float, stream: int) -> list[str]:
    """Follow the state lines on file descriptor ``stream`` until ``driver`` dies (clean up,
    what was done) or releases the watchdog (nothing done)."""
    started = process_start_time(driver)
    tree = ProcessTree(driver, started, exclude=os.getpid())
    state: dict[str, Any] = {}
    buffer = b""
    closed = False
    while True:
        tree.poll()
        if not closed:
            ready, _, _ = select.select([stream], [], [], POLL_S)
            if ready:
                chunk = os.read(stream, 65536)
                closed = not chunk
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    with contextlib.suppress(ValueError):
                        message = json.loads(line)
                        if isinstance(message, dict) and message.get("release") is True:
                            return []
                        if _valid(message):
                            state = message
                buffer = buffer[-_MAX_LINE:]
        else:
            time.sleep(POLL_S)
        if not alive(driver, started):
            tree.sweep_group()
            return clean_up(state, grace_s=grace_s, tree=tree)


def main(argv: list[str]) -> int:
    """Watch the driver ``argv[0]`` (a pid), its state lines on standard input."""
    driver, grace_s = int(argv[0]), float(argv[1])
    # Neither the terminal's Ctrl-C nor a hang-up may stop the switch before its driver.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    for line in watch(driver, grace_s, sys.stdin.fileno()):
        print(f"watchdog: driver {driver} ended without releasing me: {line}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
