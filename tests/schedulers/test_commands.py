"""run_command on real processes: exit codes, retries, timeouts, missing commands."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from parsl_malleable.errors import SchedulerCommandError
from parsl_malleable.schedulers.commands import is_transient, run_command


def test_success_returns_output(fake_bin) -> None:
    env = fake_bin("hello", 'echo "out $1"; echo err >&2')
    result = run_command(["hello", "a b"], env=env)
    assert result.stdout == "out a b\n"
    assert result.stderr == "err\n"
    assert result.returncode == 0
    assert result.attempts == 1


def test_arguments_are_not_shell_interpreted(fake_bin, tmp_path: Path) -> None:
    env = fake_bin("show", 'printf "%s\\n" "$@"')
    evil = f"$(touch {tmp_path}/pwned); `id`"
    result = run_command(["show", evil, "x;y"], env=env)
    assert result.stdout.splitlines() == [evil, "x;y"]
    assert not (tmp_path / "pwned").exists()


def test_failure_names_command_status_and_stderr(fake_bin) -> None:
    env = fake_bin("squeue", 'echo "squeue: error: Invalid user: nobody2" >&2; exit 1')
    with pytest.raises(SchedulerCommandError) as info:
        run_command(["squeue", "-u", "nobody2"], env=env, retries=3)
    err = info.value
    assert err.argv == ["squeue", "-u", "nobody2"]
    assert "exit status 1" in str(err) and "Invalid user" in str(err)
    assert str(err).startswith("squeue -u nobody2:")


def test_non_transient_failure_is_not_retried(fake_bin, tmp_path: Path) -> None:
    counter = tmp_path / "count"
    env = fake_bin("sbatch", f'echo x >> {counter}; echo "sbatch: error: bad option" >&2; exit 1')
    with pytest.raises(SchedulerCommandError):
        run_command(["sbatch"], env=env, retries=3, backoff_s=0)
    assert counter.read_text().count("x") == 1


def test_transient_failure_is_retried_until_success(fake_bin, tmp_path: Path) -> None:
    counter = tmp_path / "count"
    body = (
        f"echo x >> {counter}\n"
        f'if [ "$(wc -l < {counter})" -lt 3 ]; then\n'
        '  echo "squeue: error: Unable to contact slurm controller (connect failure)" >&2\n'
        "  exit 1\n"
        "fi\n"
        "echo ok"
    )
    env = fake_bin("squeue", body)
    waits: list[float] = []
    result = run_command(["squeue"], env=env, retries=3, backoff_s=0.25, sleep=waits.append)
    assert result.stdout == "ok\n"
    assert result.attempts == 3
    assert waits == [0.25, 0.5]  # exponential backoff


def test_transient_failure_gives_up_after_retries(fake_bin) -> None:
    env = fake_bin("qstat", 'echo "Connection refused" >&2; exit 2')
    waits: list[float] = []
    with pytest.raises(SchedulerCommandError, match="after 3 attempts"):
        run_command(["qstat"], env=env, retries=2, backoff_s=1, sleep=waits.append)
    assert waits == [1, 2]


@pytest.mark.timeout(60)  # fails here, not after 100 s, if the kill does not work
def test_hang_is_killed_with_its_children(fake_bin, tmp_path: Path) -> None:
    # The stand-in's child (sleep) holds stdout open: only a group kill ends the wait.
    pidfile = tmp_path / "sleep.pid"
    env = fake_bin("squeue", f"sleep 100 & echo $! > {pidfile}; wait; echo late")
    with pytest.raises(SchedulerCommandError, match=r"timed out after 1 s") as info:
        run_command(["squeue"], env=env, timeout_s=1, retries=3)
    assert info.value.argv == ["squeue"]
    pid = int(pidfile.read_text())
    for _ in range(50):  # the kernel reaps the orphan shortly after SIGKILL
        if not Path(f"/proc/{pid}").exists() or "Z" in _proc_state(pid):
            break
        time.sleep(0.1)
    assert not Path(f"/proc/{pid}").exists() or "Z" in _proc_state(pid)


def _proc_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


def test_missing_command() -> None:
    with pytest.raises(SchedulerCommandError, match="not found on PATH"):
        run_command(["pm-no-such-command-xyz"], env={"PATH": "/nonexistent"})


def test_unchecked_failure_is_returned(fake_bin) -> None:
    env = fake_bin("squeue", 'echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1')
    result = run_command(["squeue", "-j", "5"], env=env, check=False)
    assert result.returncode == 1
    assert "Invalid job id" in result.stderr


@pytest.mark.parametrize(
    ("stderr", "transient"),
    [
        ("sbatch: error: Batch job submission failed: Socket timed out on send/recv", True),
        ("squeue: error: slurm_receive_msg: Zero Bytes were transmitted or received", True),
        ("qstat: cannot connect to server pbs-head (errno=15010)", True),
        ("sbatch: error: Invalid partition name specified", False),
        ("", False),
    ],
)
def test_transient_classification(stderr: str, transient: bool) -> None:
    assert is_transient(stderr) is transient
