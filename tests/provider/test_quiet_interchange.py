"""Parsl's interchange, whose standard error is the user's terminal, prints no ``--- Logging
error ---`` traceback when its log cannot be written: a run whose disk filled printed five above
the one line that said what happened (issue 49)."""

from __future__ import annotations

import os
import pickle
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from parsl.executors.high_throughput.manager_selector import RandomManagerSelector

from parsl_malleable.harvest.quiet_interchange import INTERCHANGE_MODULE, LAUNCH_CMD, launch_cmd
from parsl_malleable.provider import BackfillProvider, harvest_executor
from parsl_malleable.watchdog import alive, process_start_time
from tests.provider.conftest import wait_for


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _stderr_of_interchange(command: list[str], logdir: Path) -> str:
    """Start the interchange with ``command`` as HTEX does (its configuration pickled on
    standard input), its log on a full disk, until it listens for workers; its stderr."""
    logdir.mkdir()
    (logdir / "interchange.log").symlink_to("/dev/full")  # every write: ENOSPC
    worker_port = _free_port()
    config = {
        "client_address": "127.0.0.1",
        "client_ports": (_free_port(), _free_port(), _free_port()),
        "interchange_address": "127.0.0.1",
        "worker_port": worker_port,
        "worker_port_range": (worker_port, worker_port),
        "hub_address": None,
        "hub_zmq_port": None,
        "logdir": str(logdir),
        "heartbeat_threshold": 10,
        "poll_period": 10,
        "logging_level": 20,
        "cert_dir": None,
        "manager_selector": RandomManagerSelector(),
        "run_id": "test",
        "log_config": None,
        "_check_python_mismatch": False,
    }
    proc = subprocess.Popen(
        command, stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=False, cwd=logdir
    )
    try:
        assert proc.stdin is not None
        proc.stdin.write(pickle.dumps(config))
        proc.stdin.close()
        # It logs three records on its way to listening for workers (each failing).
        assert wait_for(lambda: _listening(worker_port) or proc.poll() is not None, 30)
        assert proc.poll() is None, "the interchange ended"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert proc.stderr is not None
    with proc.stderr:
        return proc.stderr.read().decode(errors="replace")


def test_the_harvest_executor_starts_the_quiet_interchange() -> None:
    provider = BackfillProvider("slurm-test", autostart=False, slots=1)
    assert harvest_executor(provider).interchange_launch_cmd == launch_cmd()
    assert launch_cmd()[: len(LAUNCH_CMD)] == LAUNCH_CMD


# The driver's stand-in: starts the interchange's wrapper watching itself, its standard input a
# pipe the test holds open (so the interchange waits for its configuration, as after a start),
# says the child's pid, and dies at once without a word.
_DYING_DRIVER = """
import os, subprocess, sys
from parsl_malleable.harvest.quiet_interchange import launch_cmd
quiet = subprocess.DEVNULL  # none of the pipes that the test reads to their end
child = subprocess.Popen(launch_cmd(), stdin=int(sys.argv[1]), stdout=quiet, stderr=quiet)
print(child.pid, flush=True)
os._exit(0)
"""


def test_the_interchange_ends_when_its_driver_dies_however_it_dies() -> None:
    """A driver killed inside ``parsl.load`` left the interchange running for good: it was put
    under the watchdog only after ``parsl.load`` returned. It now watches its own parent."""
    read_end, write_end = os.pipe()
    try:
        driver = subprocess.run(
            [sys.executable, "-c", _DYING_DRIVER, str(read_end)],
            pass_fds=(read_end,),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert driver.returncode == 0, driver.stderr
        pid = int(driver.stdout)
        started = process_start_time(pid)
        # Without the watch it would wait on its standard input, held open here, for ever.
        assert wait_for(lambda: not alive(pid, started), 30), "the orphaned interchange lives"
    finally:
        os.close(read_end)
        os.close(write_end)


@pytest.mark.parametrize("quiet", [True, False])
def test_a_full_disk_under_the_interchanges_log_prints_no_logging_error(
    tmp_path: Path, quiet: bool
) -> None:
    # The other case shows that the setup does fail the log: Parsl's interchange, as started
    # before, prints logging's tracebacks.
    command = LAUNCH_CMD if quiet else [sys.executable, "-m", INTERCHANGE_MODULE]
    err = _stderr_of_interchange(command, tmp_path / "logs")
    if quiet:
        assert "Logging error" not in err and "Traceback" not in err, err
    else:
        assert err.count("--- Logging error ---") >= 3, err
        assert "No space left on device" in err
