"""The dead-man switch of a campaign driver: when the driver dies, nothing it started survives.

``kill -9`` of the driver leaves Parsl's interchange running (it does not watch its parent) and,
on a real scheduler, blocks that nobody will cancel. The runner starts this module as a small
separate process (``python -m parsl_malleable.campaign.watchdog DRIVER_PID LIFELINE``) and keeps
``LIFELINE`` (a JSON file) up to date with what to clean up: local processes (pid and start time,
so that a reused pid is never hit) and scheduler jobs with the argument list that cancels them.
The watchdog checks every half second whether the driver still lives; when it is gone without
having removed the file (a clean exit removes it), it kills the processes, runs the cancel
commands, and exits. It never reads anything but that file, which only the user can write.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

POLL_S = 0.5


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


class Lifeline:
    """The driver's side: what the watchdog must clean up if the driver dies."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.processes: dict[int, str | None] = {}
        self.groups: dict[int, str | None] = {}
        self.cancel_argv: list[str] = []
        self.job_ids: list[str] = []
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Write the file and start the watchdog process for this (the calling) process."""
        self.save()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", __name__, str(os.getpid()), str(self.path)],
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C to the driver's group must not stop it first
        )

    def watch_process(self, pid: int, *, group: bool = False) -> None:
        """Kill ``pid`` (its whole process group with ``group``) if the driver dies."""
        target = self.groups if group else self.processes
        target[pid] = process_start_time(pid)
        self.save()

    def set_jobs(self, cancel_argv: list[str], job_ids: list[str]) -> None:
        """Scheduler jobs to cancel with ``cancel_argv + job_ids`` if the driver dies."""
        if cancel_argv == self.cancel_argv and job_ids == self.job_ids:
            return
        self.cancel_argv, self.job_ids = list(cancel_argv), list(job_ids)
        self.save()

    def save(self) -> None:
        """Write the file atomically, readable by the user only."""
        data = {
            "processes": [[p, s] for p, s in self.processes.items()],
            "groups": [[p, s] for p, s in self.groups.items()],
            "cancel_argv": self.cancel_argv,
            "job_ids": self.job_ids,
        }
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as file:
            json.dump(data, file)
        os.replace(tmp, self.path)

    def release(self) -> None:
        """Clean exit: the driver cleaned up itself; the watchdog leaves without acting."""
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)


def clean_up(data: dict[str, Any]) -> list[str]:
    """Kill and cancel what ``data`` lists; what was done, for the log."""
    done = []
    for pid, started in data.get("groups", []):
        if alive(pid, started):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
                done.append(f"killed process group {pid}")
    for pid, started in data.get("processes", []):
        if alive(pid, started):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                done.append(f"killed process {pid}")
    argv, ids = data.get("cancel_argv") or [], data.get("job_ids") or []
    if argv and ids:
        try:
            subprocess.run([*argv, *ids], timeout=60, check=False, capture_output=True)
            done.append(f"ran {' '.join(argv)} on {len(ids)} job(s)")
        except (OSError, subprocess.TimeoutExpired) as exc:
            done.append(f"{argv[0]} failed: {exc}")
    return done


def main(argv: list[str]) -> int:
    """Watch ``argv[0]`` (a pid); on its death, clean up what file ``argv[1]`` lists."""
    driver, path = int(argv[0]), Path(argv[1])
    started = process_start_time(driver)
    while alive(driver, started):
        time.sleep(POLL_S)
        if not path.exists():
            return 0
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return 0  # removed at a clean exit, just as the driver ended
    for line in clean_up(data):
        print(f"watchdog: driver {driver} died: {line}", file=sys.stderr)
    with contextlib.suppress(OSError):
        path.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
