"""The watchdog cleans up after a driver killed with SIGKILL, and leaves a clean exit alone."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from parsl_malleable.campaign.watchdog import alive, process_start_time

DRIVER = textwrap.dedent(
    """
    import subprocess, sys, time
    from pathlib import Path
    from parsl_malleable.campaign.watchdog import Lifeline
    victim = subprocess.Popen(["sleep", "300"])
    lifeline = Lifeline(Path(sys.argv[1]))
    lifeline.start()
    lifeline.watch_process(victim.pid)
    print(victim.pid, lifeline.proc.pid, flush=True)
    if sys.argv[2] == "clean":
        lifeline.release()
        print("released", flush=True)
    time.sleep(300)
    """
)


def start_driver(tmp_path: Path, mode: str) -> tuple[subprocess.Popen[str], int, int]:
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(tmp_path / "lifeline.json"), mode],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert driver.stdout is not None
    victim, watchdog = (int(x) for x in driver.stdout.readline().split())
    if mode == "clean":
        assert driver.stdout.readline().strip() == "released"
    return driver, victim, watchdog


def wait_gone(pid: int, timeout_s: float = 30.0) -> bool:
    started = process_start_time(pid)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive(pid, started):
            return True
        time.sleep(0.1)
    return False


def test_a_killed_driver_takes_what_it_listed_with_it(tmp_path: Path) -> None:
    driver, victim, watchdog = start_driver(tmp_path, "kill")
    try:
        assert alive(victim, None)
        driver.send_signal(signal.SIGKILL)
        driver.wait(10)
        assert wait_gone(victim), "the listed process outlived its driver"
        assert wait_gone(watchdog), "the watchdog did not exit after cleaning up"
        assert not (tmp_path / "lifeline.json").exists()
    finally:
        subprocess.run(["kill", "-9", str(victim)], capture_output=True)


def test_a_clean_exit_releases_the_watchdog_without_killing(tmp_path: Path) -> None:
    driver, victim, watchdog = start_driver(tmp_path, "clean")
    try:
        assert wait_gone(watchdog)
        driver.kill()
        driver.wait(10)
        # The watchdog left before the driver died, so nothing was there to kill the victim.
        assert alive(victim, None)
    finally:
        subprocess.run(["kill", "-9", str(victim)], capture_output=True)
