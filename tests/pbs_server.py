"""The live OpenPBS server the PBS tests run against (``scripts/pbs-server start``).

``.ci/run`` starts it and sets ``PM_PBS_LIVE=1``: there, a server that does not answer fails the
tests that need it. Elsewhere they are skipped with the command that starts one. The server has
one MoM carrying vnodes ``vn1..vnN`` (1 cpu each), the queues ``workq`` (natives, the default)
and ``backfill`` (blocks), strict ordering and job history. The suite runs as root: blocks are
submitted as root (the wrapper sets ``acl_roots``), natives as the user ``pbsnative``.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

PBS_EXEC = Path("/opt/pbs")
NATIVE_USER = "pbsnative"
# What `pbs-server env` prints; PBS_CONF_FILE names the server (PBS_SERVER=pbshost in it).
PBS_ENV = {
    "PBS_CONF_FILE": "/etc/pbs.conf",
    "PBS_EXEC": str(PBS_EXEC),
    "PBS_HOME": "/var/spool/pbs",
}
COMMAND_TIMEOUT_S = 30.0


@dataclass
class PBSServer:
    """A reachable live server: ``env`` for its commands, helpers to drive it as a site would."""

    env: dict[str, str]

    def run(self, *argv: str, user: str | None = None, check: bool = True) -> str:
        """Run a PBS command (as ``user`` when given, through runuser) and return its stdout."""
        full = ["runuser", "-u", user, "--", *argv] if user else list(argv)
        result = subprocess.run(
            full, env=self.env, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S,
            cwd="/tmp",  # a native's working folder: readable by its user
        )  # fmt: skip
        if check and result.returncode != 0:
            raise AssertionError(f"{' '.join(full)}: rc {result.returncode}: {result.stderr}")
        return result.stdout

    def qsub_native(self, *args: str) -> str:
        """Submit a native job as :data:`NATIVE_USER` to ``workq``; its id."""
        return self.run("qsub", "-q", "workq", *args, user=NATIVE_USER).strip()

    def jobs(self, *, history: bool = False) -> dict[str, Mapping]:
        """``qstat -f -t [-x] -F json``'s jobs by id."""
        argv = ["qstat", "-f", "-t", "-F", "json"] + (["-x"] if history else [])
        return json.loads(self.run(*argv)).get("Jobs", {})

    def vnodes(self) -> dict[str, Mapping]:
        """``pbsnodes -av -F json``'s vnodes by name."""
        return json.loads(self.run("pbsnodes", "-av", "-F", "json"))["nodes"]

    def compute_vnodes(self) -> list[str]:
        """The vnodes with cpus (not the MoM's natural vnode), in name order."""
        nodes = self.vnodes()
        return sorted(n for n, a in nodes.items() if a["resources_available"].get("ncpus", 0))

    def unfinished(self) -> dict[str, str]:
        """Every job not yet finished (any user): id -> state."""
        return {
            i: a["job_state"] for i, a in self.jobs().items() if a["job_state"] not in ("F", "X")
        }

    def clear(self) -> None:
        """Delete every unfinished job (left by a failed test) and wait until the vnodes are
        free, so that each test starts on an idle site."""
        left = list(self.unfinished())
        if left:
            self.run("qdel", "-W", "force", *left, check=False)
        assert wait_until(lambda: not self.unfinished() and self.all_free(), 60), (
            self.unfinished(),
            {n: a["state"] for n, a in self.vnodes().items()},
        )

    def all_free(self) -> bool:
        """Whether every compute vnode is free."""
        nodes = self.vnodes()
        return all(nodes[n]["state"] == "free" for n in self.compute_vnodes())


def wait_until(predicate: Callable[[], bool], timeout_s: float, step_s: float = 0.3) -> bool:
    """Poll ``predicate`` until it holds (True) or ``timeout_s`` passes (False)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if predicate():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(step_s)


def connect() -> PBSServer:
    """The live server, or skip (fail under ``PM_PBS_LIVE=1``) when none answers."""
    env = dict(os.environ)
    env.update(PBS_ENV)
    env["PATH"] = f"{PBS_EXEC / 'bin'}:{PBS_EXEC / 'sbin'}:{env.get('PATH', '')}"
    why = ""
    if not (PBS_EXEC / "bin" / "qstat").exists():
        why = f"no OpenPBS at {PBS_EXEC}"
    else:
        try:
            probe = subprocess.run(
                ["qstat", "-B", "-f", "-F", "json"], env=env, capture_output=True, text=True,
                timeout=COMMAND_TIMEOUT_S,
            )  # fmt: skip
            if probe.returncode != 0:
                why = f"qstat -B: rc {probe.returncode}: {probe.stderr.strip()}"
        except subprocess.TimeoutExpired:
            why = "qstat -B did not answer"
    if why:
        message = f"no live PBS server ({why}): scripts/pbs-server install && start"
        if os.environ.get("PM_PBS_LIVE") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return PBSServer(env)
