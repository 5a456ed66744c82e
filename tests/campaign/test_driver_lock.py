"""One driver at a time per output folder; ``status`` knows whether one runs, even after a
``kill -9`` (the kernel drops the lock), without trusting a file's presence."""

from __future__ import annotations

import signal
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
