"""The block script, run by bash on this machine (launcher ``none``: no Slurm needed)."""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from parsl_malleable.errors import UnsafePathError
from parsl_malleable.harvest.block_script import write_block_files
from parsl_malleable.harvest.site_profile import load_profile
from parsl_malleable.private_files import PrivateFolder
from parsl_malleable.provider import BackfillProvider
from parsl_malleable.schedulers.command_scheduler import OPTIONS_MARK
from parsl_malleable.schedulers.emulated import EmulatedSite
from parsl_malleable.schedulers.emulated.native_load import NativeSchedule
from parsl_malleable.schedulers.emulated.settings import EmulatedSettings
from parsl_malleable.schedulers.pbs import PBSScheduler
from parsl_malleable.watchdog import group_members

from .conftest import wait_for
from .fake_pbs import FakePBS, kill_session


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


def test_without_worker_init_a_login_path_still_finds_the_drivers_interpreter(
    tmp_path: Path,
) -> None:
    # PBS starts a block in a login environment: the driver's interpreter folder (where
    # Parsl's process_worker_pool.py is) is not on its PATH. The script puts it first.
    out = tmp_path / "found"
    command = f"command -v {Path(sys.executable).name} > {out}"
    script = write_block_files(
        tmp_path, slot_id="s", block_id="1", command=command, walltime_s=60, launcher="none"
    )
    login = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PBS_JOBID": "5.pbs"}
    assert subprocess.run(["/bin/bash", str(script)], env=login).returncode == 0
    assert Path(out.read_text().strip()).parent == Path(sys.executable).parent


def test_usr1_marks_the_signal_file_and_the_workers_keep_running(tmp_path: Path) -> None:
    done, started = tmp_path / "done", tmp_path / "started"
    # The worker starts after the script has set its traps: its first act says so.
    command = f"touch {started}; sleep 1.5; touch {done}; exit 3"
    script = write_block_files(
        tmp_path, slot_id="s", block_id="1", command=command, walltime_s=60, launcher="none"
    )
    proc = subprocess.Popen(["bash", str(script)], env={**os.environ, "SLURM_JOB_ID": "99"})
    assert _appears(started, proc)
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


def _beat_at(path: Path, age_s: float) -> None:
    path.touch()
    then = time.time() - age_s
    os.utime(path, (then, then))


def test_the_watchdog_ends_a_block_whose_driver_stopped_beating(tmp_path: Path) -> None:
    beat = tmp_path / "driver.heartbeat"
    _beat_at(beat, 120)  # the driver died two minutes ago
    script = write_block_files(
        tmp_path, slot_id="s", block_id="1", command="sleep 600", walltime_s=900,
        launcher="none", heartbeat_file=beat, driver_timeout_s=10,
    )  # fmt: skip
    log = tmp_path / "stderr"
    began = time.monotonic()
    with log.open("w") as err:
        # Its own session, so that whatever it leaves behind can be cleaned up as a
        # scheduler would after the script's exit.
        proc = subprocess.Popen(
            ["bash", str(script)], stderr=err, start_new_session=True,
            env={**os.environ, "SLURM_JOB_ID": "7"},
        )  # fmt: skip
        try:
            proc.wait(timeout=60)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    # One watchdog period (5 s), the TERM and its 2 s wait; the command itself would run 600 s.
    assert time.monotonic() - began < 30
    said = log.read_text()
    assert "heartbeat" in said and "the block ends" in said


def test_a_nodes_workers_end_with_the_heartbeat_even_when_the_batch_script_is_gone(
    tmp_path: Path,
) -> None:
    """Slurm, finding a node back that it had marked down, killed a block's batch step there
    but left its job step (the workers) running: the dead-man switch must be on the node."""
    beat = tmp_path / "driver.heartbeat"
    beat.touch()
    started = tmp_path / "started"
    script = write_block_files(
        tmp_path, slot_id="s", block_id="1", command=f"touch {started}; exec sleep 600",
        walltime_s=900, launcher="none", heartbeat_file=beat, driver_timeout_s=2,
    )  # fmt: skip
    batch = subprocess.Popen(
        ["bash", str(script)], start_new_session=True, stderr=subprocess.PIPE,
        env={**os.environ, "SLURM_JOB_ID": "9"},
    )  # fmt: skip
    try:
        assert _appears(started, batch)
        batch.kill()  # the batch shell alone, as slurmd ends a batch step
        batch.wait(timeout=30)
        assert group_members(batch.pid), "the node script and its worker outlive the batch shell"
        _beat_at(beat, 60)  # the driver is gone
        # One watchdog period (5 s), the TERM and its 2 s wait.
        assert wait_for(lambda: not group_members(batch.pid), 30, step_s=0.2), group_members(
            batch.pid
        )
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(batch.pid, signal.SIGKILL)
        assert batch.stderr is not None
        said = batch.stderr.read().decode()
    assert "heartbeat" in said and "the block ends" in said, said


def test_a_beating_driver_keeps_its_block(tmp_path: Path) -> None:
    beat = tmp_path / "driver.heartbeat"
    beat.touch()
    done = tmp_path / "done"
    script = write_block_files(
        tmp_path, slot_id="s", block_id="1", command=f"sleep 8; touch {done}", walltime_s=900,
        launcher="none", heartbeat_file=beat, driver_timeout_s=10,
    )  # fmt: skip
    proc = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, timeout=60,
        env={**os.environ, "SLURM_JOB_ID": "8"},
    )  # fmt: skip
    assert proc.returncode == 0 and done.exists(), proc.stderr
    assert "heartbeat" not in proc.stderr


def test_sigterm_is_a_notice_the_script_waits_through(tmp_path: Path) -> None:
    # The workers ignore it here (a rank finishing its commit); the script must not leave first.
    done, started = tmp_path / "done", tmp_path / "started"
    command = f"trap '' TERM; touch {started}; sleep 1.5; touch {done}; exit 4"
    script = write_block_files(
        tmp_path, slot_id="s", block_id="1", command=command, walltime_s=60, launcher="none"
    )
    proc = subprocess.Popen(["bash", str(script)], env={**os.environ, "SLURM_JOB_ID": "77"})
    assert _appears(started, proc)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 4
    assert done.exists()
    assert (tmp_path / "usr1-77.term").exists()


def test_urg_to_the_whole_pbs_session_is_the_scripts_usr1_and_ends_nothing(
    tmp_path: Path,
) -> None:
    # PBS's qsig signals every process of a job's session: the login shell that runs the
    # script (reading its path on stdin, as pbs_mom starts it), the script, the workers.
    # SIGURG must reach the script's trap and leave every one of them running.
    started, go = tmp_path / "started", tmp_path / "go"
    command = f"touch {started}; until [ -e {go} ]; do sleep 0.05; done; exit 5"
    script = write_block_files(
        tmp_path, slot_id="s", block_id="1", command=command, walltime_s=60, launcher="none"
    )
    shell = subprocess.Popen(
        ["bash"], stdin=subprocess.PIPE, start_new_session=True,
        env={**os.environ, "PBS_JOBID": "9.pbs"},
    )  # fmt: skip
    try:
        assert shell.stdin is not None
        shell.stdin.write(f"{script}\n".encode())
        shell.stdin.close()
        assert wait_for(started.exists, 30, step_s=0.05)
        assert kill_session(shell.pid, signal.SIGURG) >= 3  # login shell, script, worker
        assert wait_for((tmp_path / "usr1-9.pbs").exists, 10, step_s=0.05)
        assert shell.poll() is None  # the login shell lives on (USR1 ended it)
        go.touch()
        # The worker's own status, through both shells: it outlived the signal too.
        assert shell.wait(timeout=30) == 5
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(shell.pid, signal.SIGKILL)


def _appears(path: Path, proc: subprocess.Popen[bytes], timeout_s: float = 30.0) -> bool:
    """Wait until ``path`` exists (the worker's readiness mark) while ``proc`` runs."""
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


# ------------------------------------------------- written into the folder checked (issue 49)


def _block(folder: Path | PrivateFolder, **kwargs: object) -> Path:
    args: dict[str, object] = dict(
        slot_id="s", block_id="1", command="true", walltime_s=60, launcher="none"
    )
    return write_block_files(folder, **{**args, **kwargs})  # type: ignore[arg-type]


def test_block_files_go_to_the_folder_checked_even_once_it_was_replaced(tmp_path: Path) -> None:
    """Another user renamed the block folder after its check and put their own in its place:
    the block's files are written into the folder checked (under its new name), none into
    theirs, and no script path is handed to the scheduler while the name leads to theirs."""
    with PrivateFolder(tmp_path / "blocks", what="block script folder") as folder:
        first = _block(folder, command="echo first")
        assert first == folder.path / "s-60.sh" and first.parent == (tmp_path / "blocks")
        (tmp_path / "blocks").rename(tmp_path / "moved")
        (tmp_path / "blocks").mkdir()
        with pytest.raises(UnsafePathError, match="no longer the folder that was checked"):
            _block(folder, command="echo second")
    assert list((tmp_path / "blocks").iterdir()) == []
    assert (tmp_path / "moved" / "s.command").read_text() == "echo second\n"
    assert sorted(p.name for p in (tmp_path / "moved").iterdir()) == [
        "s-60.sh",
        "s.command",
        "s.node",
    ]


def test_a_link_planted_under_a_block_file_name_is_replaced_not_written_through(
    tmp_path: Path,
) -> None:
    blocks = tmp_path / "blocks"
    blocks.mkdir(mode=0o700)
    target = tmp_path / "bashrc"
    target.write_text("kept\n")
    (blocks / "s.command").symlink_to(target)
    (blocks / "s-60.sh").symlink_to(tmp_path / "dangling")  # a write would create it
    script = _block(blocks, command="echo hi")
    assert target.read_text() == "kept\n" and not (tmp_path / "dangling").exists()
    assert not (blocks / "s.command").is_symlink()
    assert (blocks / "s.command").read_text() == "echo hi\n"
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in blocks.iterdir()}
    assert modes == {"s.command": 0o600, "s.node": 0o600, script.name: 0o700}


def test_a_block_folder_others_can_write_is_refused(tmp_path: Path) -> None:
    blocks = tmp_path / "blocks"
    blocks.mkdir()
    os.chmod(blocks, 0o770)
    with pytest.raises(UnsafePathError, match="mode is 0770"):
        _block(blocks)
    assert list(blocks.iterdir()) == []


def test_directives_are_written_with_the_script_and_not_again_by_the_scheduler(
    tmp_path: Path,
) -> None:
    directive = "#PBS -l filesystems=home"
    script = _block(tmp_path / "blocks", directives=[directive])
    lines = script.read_text().splitlines()
    assert lines[0].startswith("#!") and lines[1:3] == [OPTIONS_MARK, directive]
    before = script.read_bytes()
    PBSScheduler(submit_options=["-l filesystems=home"]).record_options(script)
    assert script.read_bytes() == before  # nothing to add: no rewrite by its path
    linked = tmp_path / "blocks" / "linked.sh"
    linked.symlink_to(script)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        PBSScheduler(submit_options=["-l filesystems=home"]).record_options(linked)


def test_the_provider_writes_blocks_and_its_heartbeat_through_the_folder_it_checked(
    tmp_path: Path,
) -> None:
    """The provider opens its block folder once, at its first block: after the folder was
    swapped, the next block's files and the heartbeat go into the folder checked, and the
    block is not submitted."""
    pbs = FakePBS(tmp_path / "pbs", {"n1": {"state": "free"}, "n2": {"state": "free"}})
    profile = load_profile("example-pbs").with_overrides(
        queue="workq",
        reservations=False,
        min_block_s=60,
        safety_margin_s=10,
        max_nodes_per_block=1,
    )
    blocks = tmp_path / "blocks"
    provider = BackfillProvider(profile, env=pbs.env, slots=2, script_dir=str(blocks))
    try:
        provider.submit("exec sleep 600", 1, "parsl.htex.block-0")
        assert wait_for(lambda: any(c.startswith("qsub") for c in pbs.calls()), 30)
        held = provider.launcher.scripts()
        assert held.path == blocks.resolve() and provider.launcher.scripts() is held
        blocks.rename(tmp_path / "moved")
        blocks.mkdir()
        provider.submit("exec sleep 600", 1, "parsl.htex.block-1")
        assert wait_for(lambda: "no longer the folder" in provider.last_error, 30), (
            provider.last_error
        )
        provider.beat()
        # Only the first job's output, which the (fake) PBS writes by its path: nothing of ours.
        assert [p.suffix for p in blocks.iterdir()] in ([], [".out"])
        moved = {p.name for p in (tmp_path / "moved").iterdir()}
        assert provider.heartbeat_file.name in moved
        assert sum(n.endswith(".command") for n in moved) == 2
        assert sum(c.startswith("qsub") for c in pbs.calls()) == 1
    finally:
        provider.close()
    assert held.fileno() == -1


def test_the_emulated_site_writes_no_block_output_through_a_planted_link(tmp_path: Path) -> None:
    """The emulated site (``run --demo``) appends each node's output beside the block script:
    a link planted under that name is refused, not followed as root, and no node starts."""
    no_natives = NativeSchedule((), time.time(), 0.0, 1.0, 2)
    site = EmulatedSite(EmulatedSettings(nodes=2), schedule=no_natives)
    try:
        script = tmp_path / "b.sh"
        script.write_text("#!/bin/bash\nexec sleep 60\n")
        target = tmp_path / "target"
        target.write_text("kept\n")
        (tmp_path / "pm-block-x-b1.vn2.out").symlink_to(target)
        with pytest.raises(OSError, match="Too many levels of symbolic links"):
            site.submit(script, nodes=2, walltime_s=60, name="pm-block-x")
        assert target.read_text() == "kept\n"
        assert site.snapshot().idle_nodes() == ["vn1", "vn2"]
    finally:
        site.close()


@pytest.mark.parametrize("theirs", ["group-writable", "another user's"])
def test_a_batch_script_runs_nothing_from_a_folder_swapped_in_after_the_submit(
    tmp_path: Path, theirs: str
) -> None:
    """The scheduler keeps the batch script from the submit on, but the job may start much
    later and reads the node script and the command from the block folder by name: a folder
    put in its place meanwhile (not this user's alone) is refused and nothing in it runs."""
    if theirs == "another user's" and os.geteuid() != 0:
        pytest.skip("chown to another user needs root")
    blocks = tmp_path / "blocks"
    kept = _block(blocks, command="echo mine").read_text()  # what sbatch or qsub stored
    blocks.rename(tmp_path / "moved")
    blocks.mkdir()
    marker = tmp_path / "ran"
    for name in ("s.node", "s.command"):
        (blocks / name).write_text(f"touch {marker}\n")
    if theirs == "group-writable":
        os.chmod(blocks, 0o770)
    else:
        os.chmod(blocks, 0o700)
        os.chown(blocks, 12345, 12345)
    stored = tmp_path / "stored.sh"
    stored.write_text(kept)
    done = subprocess.run(
        ["bash", str(stored)], capture_output=True, text=True, timeout=60,
        env={**os.environ, "SLURM_JOB_ID": "5"},
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "is not this user's alone" in done.stderr and "nothing is run" in done.stderr
    assert not marker.exists()
