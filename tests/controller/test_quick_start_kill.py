"""The quick start of docs/elastic.md (a ``LocalProvider``, no BackfillProvider, no campaign
runner): ``kill -9`` of the driver while it trains leaves nothing running 60 s later.

Before the driver's watchdog was started by the controller, the interchange, both worker pools
and their torch workers (944 MiB) were still alive four minutes after the kill: Parsl's
interchange does not watch its parent, and a pool waits for its silent interchange.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TAG = "PM_QUICK_START_TEST"

DRIVER = textwrap.dedent(
    """
    import sys
    import parsl
    from parsl.config import Config
    from parsl.executors import HighThroughputExecutor
    from parsl.providers import LocalProvider

    from parsl_malleable.app import malleable_app
    from parsl_malleable.apps.digits import train_elastic

    parsl.load(Config(executors=[HighThroughputExecutor(
        label="ranks", max_workers_per_node=1, cores_per_worker=1,
        heartbeat_period=2, heartbeat_threshold=10,
        provider=LocalProvider(init_blocks=2, max_blocks=4),
    )]))
    train = malleable_app(min_nodes=1, max_nodes=4, checkpoint_dir=sys.argv[1],
                          backend="torch")(train_elastic)
    job = train.submit(epochs=500, step_delay_s=0.02)
    assert job.coordinator.wait_for(lambda c: c.running_world_size() >= 1, 240), "no rank"
    print("training", flush=True)
    job.future.result()
    """
)


def tagged(tag: str) -> list[int]:
    """Live processes that carry ``TAG=tag`` in their environment (every process the driver
    started, and theirs, inherit it)."""
    needle = f"{TAG}={tag}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


@pytest.mark.slow
def test_kill_9_of_a_quick_start_driver_leaves_nothing_running(tmp_path: Path) -> None:
    tag = uuid.uuid4().hex
    bin_dir = os.path.dirname(sys.executable)
    env = {
        **os.environ,
        TAG: tag,
        "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(REPO),
    }
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(tmp_path / "ckpt")],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert driver.stdout is not None
        line = driver.stdout.readline().strip()
        assert line == "training", (driver.poll(), driver.stderr.read() if driver.stderr else "")
        before = tagged(tag)
        # The driver, its watchdog, the interchange, two pools and their workers at least.
        assert len(before) >= 6, before
        driver.send_signal(signal.SIGKILL)
        driver.wait(30)
        deadline = time.monotonic() + 60
        while tagged(tag) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert tagged(tag) == [], "processes of the run outlived its driver by 60 s"
    finally:
        for pid in tagged(tag):
            os.kill(pid, signal.SIGKILL)
        if driver.poll() is None:
            driver.kill()
