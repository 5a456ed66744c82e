"""A flood of connections to the driver's Parsl ports (issue 49): the run ends cleanly or
survives, its state intact, and the rerun resumes.

Parsl's HighThroughputExecutor binds three ZMQ sockets in the driver (127.0.0.1, ports
55000-56000), which any local user can reach; libzmq accepts every connection and holds a
descriptor for it until its handshake times out. With ``ulimit -n`` 20000, ~21,000 silent
connections killed a driver in 6 s with a traceback (in the Optuna journal of a search). Here
the driver, running jobs or a search, gets a limit of :data:`LIMIT` descriptors, so that a
bounded flood (at most :data:`MAX_CONNECTIONS` connections, to 127.0.0.1 only; it stops by
itself) outruns it quickly.
"""

from __future__ import annotations

import contextlib
import resource
import socket
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.campaign.runs import REPO, command, env, query, small_demo

LIMIT = 1024  # the driver's descriptors (soft = hard, so that it cannot raise them)
MAX_CONNECTIONS = 4000  # the flood's bound
PARSL_PORTS = range(55000, 56001)  # HighThroughputExecutor's interchange_port_range


def search_campaign(tmp: Path) -> Path:
    """A search whose trials the driver asks of its Optuna study (a journal file, which the
    tester's flood broke with "Too many open files"), each long enough to be flooded in."""
    data = {
        "site": "emulated",
        "python_path": [str(REPO)],
        "metric": {"name": "test_accuracy", "direction": "max"},
        "searches": [
            {
                "name": "flooded",
                "app": "apps.digits:train_elastic",
                "epochs": 10,
                "max_nodes": 2,
                "checkpoint_every": 10,
                "args": {"batch_size": 32, "hidden": [32], "step_delay_s": 0.05},
                "space": {"lr": {"type": "float", "low": 0.01, "high": 0.1, "log": True}},
                "trials": 3,
                "parallel": 2,
                "sampler": {"type": "random", "seed": 0},
            }
        ],
    }
    path = tmp / "search.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _limit_descriptors() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))


def listening_ports(pid: int) -> set[int]:
    """The TCP ports that process ``pid`` listens on at 127.0.0.1 (from /proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = str(fd.readlink())
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()
                address, port = fields[1].split(":")
                loopback = address in ("0100007F", "0000000000000000FFFF00000100007F")
                if fields[3] == "0A" and fields[9] in inodes and loopback:  # 0A: LISTEN
                    ports.add(int(port, 16))
    return ports


def wait_for(check: object, limit_s: float, what: str) -> object:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        value = check()  # type: ignore[operator]
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"no {what} within {limit_s:.0f} s")


def flood(ports: list[int], driver: subprocess.Popen[str]) -> int:
    """Open connections to ``ports`` in turn, holding them, until the driver exits or
    :data:`MAX_CONNECTIONS` are open; close them all; how many were opened."""
    own_soft, own_hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    budget = min(MAX_CONNECTIONS, own_hard - 256)
    if own_soft < budget + 256:
        resource.setrlimit(resource.RLIMIT_NOFILE, (budget + 256, own_hard))
    held: list[socket.socket] = []
    try:
        for i in range(budget):
            if i % 100 == 0 and driver.poll() is not None:
                break
            conn = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            conn.settimeout(2)
            try:
                conn.connect(("127.0.0.1", ports[i % len(ports)]))
            except OSError:  # refused (the listener closed) or the backlog full: go on
                conn.close()
                continue
            held.append(conn)
        return len(held)
    finally:
        for conn in held:
            conn.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (own_soft, own_hard))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["jobs", "search"])
def test_a_flood_of_connections_to_the_drivers_parsl_ports_ends_cleanly_and_resumes(
    tmp_path: Path, kind: str
) -> None:
    campaign = small_demo(tmp_path) if kind == "jobs" else search_campaign(tmp_path)
    output = tmp_path / "out"
    log = tmp_path / "driver.log"
    with log.open("w") as sink:
        driver = subprocess.Popen(
            command(campaign, output),
            env=env(),
            stdout=sink,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=_limit_descriptors,
        )
    try:
        # Once a job has a checkpoint (a commit every 10 steps, saved), so the rerun resumes.
        wait_for(
            lambda: query(output, "SELECT 1 FROM job_samples WHERE step >= 25 LIMIT 1"),
            300,
            "job past step 25",
        )
        ports = sorted(p for p in listening_ports(driver.pid) if p in PARSL_PORTS)
        assert len(ports) == 3, (ports, listening_ports(driver.pid))
        before = query(output, "SELECT MAX(step) FROM job_samples")
        opened = flood(ports, driver)
        assert opened > 0

        def tripped() -> bool:
            return "ran out of file descriptors" in (output / "campaign.log").read_text()

        # Either the driver stops (then it says so first) or it trains on.
        wait_for(
            lambda: (
                tripped()
                or driver.poll() is not None
                or query(output, "SELECT MAX(step) FROM job_samples") != before
            ),
            180,
            "end of the driver nor step after the flood",
        )
        if not tripped() and driver.poll() is None:  # it survived: stop it as Ctrl-C would
            driver.terminate()
        driver.wait(180)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait(30)
    text = log.read_text()
    assert "Traceback" not in text, text[-4000:]
    said = [line for line in text.splitlines() if "ran out of file descriptors" in line]
    if driver.returncode == 3 and said:  # it ended: in one line, which says the rerun resumes
        assert len(said) == 1, text[-4000:]
        assert "rerun the same command to resume" in said[0]
        outcome = query(output, "SELECT value FROM meta WHERE key = 'run1_outcome'")
        assert outcome == [("out of file descriptors",)], outcome
    else:  # it survived the flood and stopped when told to
        assert driver.returncode == 3 and not said, (driver.returncode, text[-4000:])
    db = sqlite3.connect(f"file:{output / 'state.sqlite'}?mode=ro", uri=True)
    try:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        db.close()
    assert not list(output.rglob("*.damaged"))  # a search's journal was not set aside either
    # The rerun resumes from the checkpoints: it says so for a job, then is stopped.
    rerun_log = tmp_path / "rerun.log"
    with rerun_log.open("w") as sink:
        rerun = subprocess.Popen(
            command(campaign, output), env=env(), stdout=sink, stderr=subprocess.STDOUT
        )
    try:
        wait_for(
            lambda: "resumes from its checkpoint at step" in rerun_log.read_text(),
            300,
            "resume line in the rerun",
        )
    finally:
        rerun.terminate()
        rerun.wait(180)
