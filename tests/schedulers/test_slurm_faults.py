"""Fault injection: stand-in Slurm commands first on PATH that hang, print garbage or fail."""

from __future__ import annotations

import shlex

import pytest

from parsl_malleable.errors import SchedulerCommandError
from parsl_malleable.schedulers.records import JobState
from parsl_malleable.schedulers.slurm import SlurmScheduler

from .conftest import DATA

SINFO = DATA / "slurm" / "sinfo_busy.txt"


def scheduler(fake_bin, squeue_body: str, **kwargs) -> SlurmScheduler:
    fake_bin("sinfo", f"cat {shlex.quote(str(SINFO))}")
    env = fake_bin("squeue", squeue_body)
    return SlurmScheduler(env=env, reservations=False, backoff_s=0, **kwargs)


@pytest.mark.timeout(60)
def test_hanging_squeue(fake_bin) -> None:
    sched = scheduler(fake_bin, "sleep 100", timeout_s=2)
    with pytest.raises(SchedulerCommandError, match="timed out after 2 s") as info:
        sched.snapshot()
    assert info.value.argv[0] == "squeue"
    with pytest.raises(SchedulerCommandError, match=r"^squeue .*timed out"):
        sched.status(["1"])


def test_garbage_squeue(fake_bin) -> None:
    sched = scheduler(fake_bin, "echo 'Segmentation fault (core dumped)'")
    with pytest.raises(SchedulerCommandError, match="unparseable output: squeue line 1") as info:
        sched.snapshot()
    assert info.value.argv[0] == "squeue"


def test_failing_squeue(fake_bin) -> None:
    sched = scheduler(
        fake_bin, 'echo "squeue: error: Invalid user for SlurmUser slurm, ignored" >&2; exit 1'
    )
    with pytest.raises(SchedulerCommandError, match="exit status 1: squeue: error: Invalid user"):
        sched.snapshot()


def test_unknown_single_job_is_unknown_not_error(fake_bin) -> None:
    sched = scheduler(
        fake_bin, 'echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1'
    )
    assert sched.status(["77"])["77"].state is JobState.UNKNOWN


def test_controller_briefly_down_is_retried(fake_bin, tmp_path) -> None:
    flag = tmp_path / "tried"
    body = (
        f"if [ ! -e {flag} ]; then touch {flag}; "
        'echo "squeue: error: Unable to contact slurm controller (connect failure)" >&2; exit 1; fi'
    )
    sched = scheduler(fake_bin, body)
    snap = sched.snapshot()  # the retry gets an empty queue
    assert snap.running == [] and len(snap.nodes) == 6
