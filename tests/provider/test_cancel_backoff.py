"""Cancels that keep failing back off and are given up loudly; the book matches by name.

A scheduler written for the test (a class with the provider's scheduler interface, no
commands) and a clock the test moves: the give-up comes after minutes of backoff, which the
Slurm test (tests/provider/test_scheduler_faults.py) cannot wait for.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Self

import pytest

from parsl_malleable.errors import SchedulerCommandError
from parsl_malleable.harvest.ledger import JobRecord, Phase
from parsl_malleable.harvest.reconcile import CANCEL_ATTEMPTS, cancel_retry_in, match_blocks
from parsl_malleable.provider import BackfillProvider
from parsl_malleable.schedulers.base import BlockScheduler, Script, SiteDestination
from parsl_malleable.schedulers.records import JobState, JobStatus
from parsl_malleable.snapshot import Node, NodeState, PendingJob, RunningJob, Snapshot


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class StubbornSite(BlockScheduler):
    """Four idle nodes; blocks start at once; cancel always fails."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.queries: Counter[str] = Counter()
        self.jobs: dict[str, tuple[str, tuple[str, ...]]] = {}
        self.cancels = 0

    @classmethod
    def from_profile(cls, profile: SiteDestination, env: Mapping[str, str] | None = None) -> Self:
        raise NotImplementedError

    def snapshot(self) -> Snapshot:
        held = {n for _, nodes in self.jobs.values() for n in nodes}
        nodes = [
            Node(f"n{i}", NodeState.ALLOCATED if f"n{i}" in held else NodeState.IDLE)
            for i in range(1, 5)
        ]
        running = [
            RunningJob(j, nodes_, self.clock.now - 1, 600.0, ours=True, name=name)
            for j, (name, nodes_) in self.jobs.items()
        ]
        return Snapshot(now=self.clock.now, nodes=nodes, running=running)

    def submit(
        self,
        script: Script,
        *,
        nodes: int,
        walltime_s: float,
        node_ids: Sequence[str] = (),
        name: str | None = None,
    ) -> str:
        job_id = str(100 + len(self.jobs))
        self.jobs[job_id] = (name or "", tuple(node_ids))
        return job_id

    def status(self, job_ids: Sequence[str]) -> dict[str, JobStatus]:
        return {
            j: JobStatus(j, JobState.RUNNING if j in self.jobs else JobState.UNKNOWN)
            for j in job_ids
        }

    def cancel(self, job_ids: Sequence[str]) -> None:
        self.cancels += 1
        raise SchedulerCommandError(["scancel", *job_ids], "exit status 1: permission denied")

    def signal_batch(self, job_ids: Sequence[str], signal: str) -> None:
        return None


def test_the_backoff_doubles_up_to_a_minute_and_ends() -> None:
    delays = [cancel_retry_in(n) for n in range(1, CANCEL_ATTEMPTS + 1)]
    assert delays[:4] == [1.0, 2.0, 4.0, 8.0]
    assert max(d for d in delays if d is not None) <= 60.0
    assert delays[-1] is None


def test_a_cancel_that_never_works_is_given_up_with_an_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    site = StubbornSite(clock)
    provider = BackfillProvider(
        "emulated",
        scheduler=site,
        autostart=False,
        clock=clock,
        script_dir=str(tmp_path),
        test_start=False,
        min_block_s=30,
    )
    slots = [provider.submit("true", 1, f"parsl.htex.block-{i}") for i in range(2)]
    provider.poll_once()
    provider.poll_once()
    assert sum(b.phase is Phase.RUNNING for b in provider.blocks()) == 2
    assert provider.cancel([slots[0]]) == [False]
    caplog.set_level(logging.WARNING, logger="parsl_malleable")
    for _ in range(3 * CANCEL_ATTEMPTS):
        clock.now += 61
        provider.poll_once()
    assert site.cancels == CANCEL_ATTEMPTS
    assert provider.stats()["faults"]["cancel_given_up"] == 1
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("gave up cancelling jobs 100" in e for e in errors), errors
    # Still in the book: it holds nodes until the scheduler says it ended.
    assert "100" in {b.job_id for b in provider.blocks()}


def _record(job_id: str, name: str) -> JobRecord:
    return JobRecord(job_id, "s", "0", 1, 60.0, (), 0.0, 0.0, name=name)


def test_records_match_by_id_then_by_name_and_the_rest_are_strays() -> None:
    tag = "pm-block-x-abcd1234"
    snap = Snapshot(
        now=0.0,
        nodes=[],
        running=[
            RunningJob("101", ("n1",), 0.0, 60.0, ours=True, name=f"{tag}-0-0"),
            RunningJob("102", ("n2",), 0.0, 60.0, ours=True, name=f"{tag}-1-1"),
            RunningJob("7", ("n3",), 0.0, 60.0, ours=True, name="pm-block-x-99999999-0-0"),
        ],
        pending=[PendingJob("103", 1, 60.0, 0.0, ours=True, name=f"{tag}-2-2")],
    )
    found = match_blocks([_record("10", f"{tag}-0-0"), _record("102", f"{tag}-1-1")], snap, tag)
    assert found.renamed == [("10", "101")]
    assert set(found.running) == {"10", "102"}
    # 103 is ours but no record holds it; job 7 is another driver's block: left alone.
    assert found.strays == ["103"] and found.missing == []
    gone = match_blocks([_record("104", f"{tag}-3-3")], snap, tag)
    assert gone.missing == ["104"]
    assert found.named == {"10", "102"}


def test_an_id_the_snapshot_shows_under_another_name_is_not_the_block() -> None:
    # A submit printed "7", which is another driver's block (ours by prefix, not by name):
    # the record follows its own name to 101, and 7 is neither matched nor a stray.
    tag = "pm-block-x-abcd1234"
    other = RunningJob("7", ("n3",), 0.0, 60.0, ours=True, name="pm-block-x-99999999-0-0")
    snap = Snapshot(
        now=0.0,
        nodes=[],
        running=[RunningJob("101", ("n1",), 0.0, 60.0, ours=True, name=f"{tag}-0-0"), other],
    )
    found = match_blocks([_record("7", f"{tag}-0-0")], snap, tag)
    assert found.renamed == [("7", "101")] and found.running["7"].job_id == "101"
    assert found.strays == [] and found.named == {"7"}
    # Its name nowhere: missing (asked again), never matched to job 7.
    lost = match_blocks([_record("7", f"{tag}-5-5")], snap, tag)
    assert lost.missing == ["7"] and lost.running == {} and lost.named == set()
