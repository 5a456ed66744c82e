"""One driver at a time per output folder; ``status`` knows whether one runs, even after a
``kill -9`` (the kernel drops the lock), without trusting a file's presence."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from parsl_malleable.campaign.driver_lock import DriverLock, driver_running
from parsl_malleable.errors import ConfigError, UnsafePathError

HOLD = """
import sys, time
from pathlib import Path
from parsl_malleable.campaign.driver_lock import DriverLock
with DriverLock(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(300)
"""


def test_a_second_driver_is_refused_and_status_sees_the_first(tmp_path: Path) -> None:
    assert not driver_running(tmp_path)
    with DriverLock(tmp_path):
        assert driver_running(tmp_path)
        with pytest.raises(ConfigError, match="another driver is running into this folder"):
            DriverLock(tmp_path).__enter__()
    assert not driver_running(tmp_path)
    assert (tmp_path / "driver.lock").stat().st_mode & 0o077 == 0


def test_a_killed_driver_holds_no_lock(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    assert driver_running(tmp_path)
    holder.send_signal(signal.SIGKILL)
    holder.wait(30)
    assert not driver_running(tmp_path)
    with DriverLock(tmp_path):
        pass


def test_a_planted_link_is_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    (tmp_path / "driver.lock").symlink_to(target)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        DriverLock(tmp_path).__enter__()
    assert target.read_text() == "keep"


ASK = """
import sys
from pathlib import Path
from parsl_malleable.campaign.driver_lock import DriverLock, driver_running
from parsl_malleable.errors import UnsafePathError
folder = Path(sys.argv[1])
for ask in (lambda: driver_running(folder), lambda: DriverLock(folder).__enter__()):
    try:
        ask()
        print("answered")
    except UnsafePathError as exc:
        print(exc)
"""


def test_a_fifo_as_the_lock_is_refused_without_hanging(tmp_path: Path) -> None:
    """A FIFO planted as ``driver.lock`` blocked the open of ``status`` and ``retry`` forever
    (no writer ever comes); both questions are now answered at once, refusing it."""
    os.mkfifo(tmp_path / "driver.lock", 0o600)
    done = subprocess.run(
        [sys.executable, "-c", ASK, str(tmp_path)], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and all("is not a regular file" in line for line in lines), lines
    assert stat.S_ISFIFO(os.lstat(tmp_path / "driver.lock").st_mode)  # refused, left as it is


def test_status_refuses_a_planted_link_instead_of_reading_through_it(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    (tmp_path / "driver.lock").symlink_to(target)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        driver_running(tmp_path)
