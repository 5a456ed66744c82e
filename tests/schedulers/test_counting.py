"""The query counter is fed by the command runner: every subprocess really started counts,
a retried transient failure included, and every attempt is logged with its exit status."""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path

import pytest

from parsl_malleable.errors import SchedulerCommandError
from parsl_malleable.schedulers.commands import run_command
from parsl_malleable.schedulers.pbs import PBSScheduler
from parsl_malleable.schedulers.slurm import SlurmScheduler

BUSY = "squeue: error: Unable to contact slurm controller (connect failure)"


def fails_once(log: Path, busy: str, then: str = "") -> str:
    """A stand-in body: logs each run; the first one fails transiently, later ones succeed."""
    return (
        f"echo run >> {log}\n"
        f'if [ "$(wc -l < {log})" -lt 2 ]; then echo "{busy}" >&2; exit 1; fi\n'
        f"{then}"
    )


def runs(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_counter_counts_each_attempt_of_a_retried_command(fake_bin, tmp_path: Path) -> None:
    log = tmp_path / "runs"
    env = fake_bin("squeue", fails_once(log, BUSY, "echo ok"))
    counter: Counter[str] = Counter()
    result = run_command(["squeue"], env=env, backoff_s=0, counter=counter)
    assert result.stdout == "ok\n" and result.attempts == 2
    assert runs(log) == 2
    assert counter == Counter({"squeue": 2})


def test_counter_counts_a_command_that_does_not_start_and_one_that_fails(
    fake_bin, tmp_path: Path
) -> None:
    counter: Counter[str] = Counter()
    with pytest.raises(SchedulerCommandError, match="not found"):
        run_command(["pm-missing-xyz"], env={"PATH": str(tmp_path)}, counter=counter)
    env = fake_bin("qstat", 'echo "qstat: bad option" >&2; exit 2')
    with pytest.raises(SchedulerCommandError, match="exit status 2"):
        run_command(["qstat", "-x"], env=env, retries=3, counter=counter, label="qstat -x")
    assert counter == Counter({"pm-missing-xyz": 1, "qstat -x": 1})  # not transient: no retry


def test_scheduler_queries_match_the_processes_it_ran(fake_bin, tmp_path: Path) -> None:
    log = tmp_path / "runs"
    env = fake_bin("squeue", fails_once(log, BUSY))  # then prints no job: forgotten ids
    sched = SlurmScheduler(env=env, backoff_s=0, reservations=False)
    assert sched.status(["41", "42"])["42"].state.name == "UNKNOWN"
    assert runs(log) == 2
    assert sched.queries == Counter({"squeue": 2})


def test_pbs_cancel_and_signal_are_counted_by_command(fake_bin, tmp_path: Path) -> None:
    env = fake_bin("qdel", "exit 0")
    env = fake_bin("qsig", 'echo "qsig: Unknown Job Id 7.pbs" >&2; exit 1')  # gone: fine
    pbs = PBSScheduler(env=env)
    pbs.cancel(["7.pbs"])
    pbs.signal_batch(["7.pbs"], "USR1")
    pbs.cancel([])  # nothing to do: no command
    assert pbs.queries == Counter({"qdel": 1, "qsig": 1})


def test_every_attempt_is_logged_with_its_exit_status(
    fake_bin, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    env = fake_bin("sinfo", fails_once(tmp_path / "runs", BUSY, "echo ok"))
    with caplog.at_level(logging.DEBUG, logger="parsl_malleable.schedulers.commands"):
        run_command(["sinfo", "-N", "a b"], env=env, backoff_s=0)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert lines[0].startswith("ran sinfo -N 'a b' in ")
    assert "exit status 1 (squeue: error: Unable to contact" in lines[0]
    assert lines[1].endswith("exit status 0")
