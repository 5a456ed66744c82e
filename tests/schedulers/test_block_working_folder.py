"""A block never runs in the driver's working folder, which may be a folder other users can write
(issue 49): an emulated block's processes run in its script's folder with ``PYTHONSAFEPATH``,
a Slurm block is submitted with ``--chdir`` to its script's folder, and the worker pool's own
``python -c`` children (multiprocessing's resource tracker) import nothing from the pool's
working folder, even in a block that did not get the driver's environment."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from parsl_malleable.schedulers.commands import CommandResult
from parsl_malleable.schedulers.emulated.blocks import EmulatedBlock
from parsl_malleable.schedulers.slurm import SlurmScheduler
from parsl_malleable.watchdog import process_start_time


def test_an_emulated_block_runs_in_its_scripts_folder_with_a_safe_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocks = tmp_path / "out" / "blocks"
    blocks.mkdir(parents=True)
    script = blocks / "block.sh"
    seen = blocks / "seen"
    script.write_text(f'echo "$PWD ${{PYTHONSAFEPATH:-unset}}" > {seen}\n')
    shared = tmp_path / "shared"
    shared.mkdir()
    monkeypatch.chdir(shared)  # the driver's working folder
    monkeypatch.delenv("PYTHONSAFEPATH", raising=False)
    life_r, life_w = os.pipe()
    block = EmulatedBlock("b1", "pm-test", ("n1",), time.time(), 60.0, ours=True)
    try:
        block.launch(Path(os.path.relpath(script)), life_r, {})  # a relative path, as given
        deadline = time.monotonic() + 30
        while block.exit_codes()["n1"] is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert block.exit_codes() == {"n1": 0}
    finally:
        block.signal_groups(signal.SIGKILL)
        os.close(life_w)
        os.close(life_r)
    assert seen.read_text().split() == [str(blocks), "1"]


def test_a_slurm_block_is_submitted_to_run_in_its_scripts_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[list[str]] = []

    def run(argv: list[str], *args: Any, **kwargs: Any) -> CommandResult:
        sent.append(argv)
        return CommandResult(tuple(argv), 0, "42\n", "")

    scheduler = SlurmScheduler()
    monkeypatch.setattr(scheduler, "run", run)
    blocks = tmp_path / "blocks"
    blocks.mkdir()
    script = blocks / "block.sh"
    script.write_text("#!/bin/bash\ntrue\n")
    monkeypatch.chdir(tmp_path)
    assert scheduler.submit(Path("blocks/block.sh"), nodes=1, walltime_s=600) == "42"
    assert f"--chdir={blocks}" in sent[-1]
    # A site's own choice stays; an argument vector has no folder of its own.
    scheduler.submit(script, nodes=1, walltime_s=600, workdir="/scratch/site")
    assert [a for a in sent[-1] if a.startswith("--chdir")] == ["--chdir=/scratch/site"]
    scheduler.submit(["/bin/true"], nodes=1, walltime_s=600)
    assert not [a for a in sent[-1] if a.startswith("--chdir")]


POOL = """
import multiprocessing.resource_tracker as tracker, sys
from parsl_malleable.harvest import worker_pool

sys.argv = ["parsl-malleable-pool", "--help"]  # Parsl's pool prints its usage and exits
try:
    worker_pool.main()
except SystemExit:
    pass
print(tracker._resource_tracker._pid)
"""


def test_the_worker_pools_tracker_imports_nothing_from_the_pools_working_folder(
    tmp_path: Path,
) -> None:
    """``parsl-malleable-pool`` started in a folder with a planted ``multiprocessing`` and
    without ``PYTHONSAFEPATH`` (a PBS block's login environment): the resource tracker it
    starts as ``python -c`` imports the standard library's."""
    shared = tmp_path / "shared"
    (shared / "multiprocessing").mkdir(parents=True)
    marker = tmp_path / "imported"
    (shared / "multiprocessing" / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    script = tmp_path / "mine" / "pool.py"  # its own folder, not the working one, on its path
    script.parent.mkdir()
    script.write_text(POOL)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONSAFEPATH"}
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=shared,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    tracker = int(done.stdout.split()[-1])  # it was started
    # It ends once the pool and its fork server are gone: by then it has made its imports.
    deadline = time.monotonic() + 30
    while process_start_time(tracker) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process_start_time(tracker) is None
    assert not marker.exists()
