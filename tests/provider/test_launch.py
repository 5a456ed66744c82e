"""The block script, run by bash on this machine (launcher ``none``: no Slurm needed)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from parsl_malleable.harvest.launch import write_block_files


def test_script_exports_the_deadline_and_runs_the_command(tmp_path: Path) -> None:
    out = tmp_path / "seen"
    command = f'echo "$PM_BLOCK_ID $PM_BLOCK_WALLTIME_S $PM_BLOCK_DEADLINE" > {out}'
    script = write_block_files(
        tmp_path / "blocks",
        slot_id="b.0",
        block_id="7",
        command=command,
        walltime_s=120.9,
        launcher="none",
        worker_init="export FROM_INIT=yes",
    )
    before = int(time.time())
    proc = subprocess.run(["bash", str(script)], env={**os.environ, "SLURM_JOB_ID": "42"})
    assert proc.returncode == 0
    block_id, walltime, deadline = out.read_text().split()
    assert (block_id, walltime) == ("7", "120")
    assert before + 120 <= int(deadline) <= int(time.time()) + 120
    assert (tmp_path / "blocks" / "b.0.command").read_text().strip() == command


def test_usr1_marks_the_signal_file_and_the_workers_keep_running(tmp_path: Path) -> None:
    done = tmp_path / "done"
    command = f"sleep 1.5; touch {done}; exit 3"
    script = write_block_files(
        tmp_path, slot_id="s", block_id="1", command=command, walltime_s=60, launcher="none"
    )
    proc = subprocess.Popen(["bash", str(script)], env={**os.environ, "SLURM_JOB_ID": "99"})
    time.sleep(0.5)
    proc.send_signal(signal.SIGUSR1)
    assert proc.wait(timeout=30) == 3  # the worker's own status, after it finished
    assert done.exists()
    assert (tmp_path / "usr1-99").exists()


def test_srun_launcher_starts_one_copy_per_node(tmp_path: Path) -> None:
    script = write_block_files(
        tmp_path, slot_id="s", block_id="1", command="true", walltime_s=60, launcher="srun"
    )
    text = script.read_text()
    assert 'srun --ntasks-per-node=1 --nodes="$SLURM_JOB_NUM_NODES"' in text
    with pytest.raises(ValueError, match="launcher 'mpirun'"):
        write_block_files(
            tmp_path, slot_id="s", block_id="1", command="true", walltime_s=60, launcher="mpirun"
        )


def test_self_signal_before_the_walltime(tmp_path: Path) -> None:
    # PBS has no --signal: the script signals itself signal_margin_s before its walltime.
    done = tmp_path / "done"
    script = write_block_files(
        tmp_path,
        slot_id="s",
        block_id="1",
        command=f"sleep 2; touch {done}",
        walltime_s=60,
        launcher="none",
        self_signal_s=59,
    )
    proc = subprocess.run(["bash", str(script)], env={**os.environ, "PBS_JOBID": "5.pbs"})
    assert proc.returncode == 0 and done.exists()
    assert (tmp_path / "usr1-5.pbs").exists()
