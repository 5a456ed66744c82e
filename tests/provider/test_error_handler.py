"""The block error handler on a real (unstarted) HighThroughputExecutor and provider book."""

from __future__ import annotations

import threading
from pathlib import Path

from parsl.executors import HighThroughputExecutor
from parsl.jobs.states import JobState, JobStatus

from parsl_malleable.harvest.error_handler import backfill_error_handler
from parsl_malleable.harvest.ledger import JobRecord, Phase
from parsl_malleable.provider import BackfillProvider, harvest_executor


def _executor_with_ended_blocks(ends: list[JobState], folder: Path) -> HighThroughputExecutor:
    # submit() starts the heartbeat, whose file goes to the script folder
    provider = BackfillProvider(
        "slurm-test", autostart=False, recycle=False, script_dir=str(folder)
    )
    htex = HighThroughputExecutor(provider=provider, block_error_handler=backfill_error_handler)
    for i, end in enumerate(ends):
        slot_id = provider.submit("true", 1, f"parsl.htex.block-{i}")
        rec = JobRecord(str(100 + i), slot_id, str(i), 1, 60, ("n1",), 0.0, 0.0)
        rec.phase, rec.end_state = Phase.ENDED, end
        provider.book.slots[slot_id].job = rec  # the book as a poll would leave it
        htex.blocks_to_job_id[str(i)] = slot_id
    return htex


def test_blocks_that_end_before_a_worker_connects_do_not_trip_it(tmp_path: Path) -> None:
    htex = _executor_with_ended_blocks(
        [JobState.TIMEOUT, JobState.CANCELLED, JobState.TIMEOUT], tmp_path
    )
    missing = {str(i): JobStatus(JobState.MISSING) for i in range(3)}
    backfill_error_handler(htex, missing)
    assert not htex.bad_state_is_set


def test_real_failures_still_do(tmp_path: Path) -> None:
    htex = _executor_with_ended_blocks([JobState.FAILED] * 3, tmp_path)
    missing = {str(i): JobStatus(JobState.MISSING, f"block {i}") for i in range(3)}
    backfill_error_handler(htex, missing)
    assert htex.bad_state_is_set
    assert "block 2" in str(htex.executor_exception)


def test_a_good_block_among_failures_keeps_the_executor(tmp_path: Path) -> None:
    htex = _executor_with_ended_blocks(
        [JobState.FAILED, JobState.TIMEOUT, JobState.FAILED], tmp_path
    )
    status = {
        "0": JobStatus(JobState.FAILED),
        "1": JobStatus(JobState.MISSING),
        "2": JobStatus(JobState.FAILED),
    }
    backfill_error_handler(htex, status)
    assert not htex.bad_state_is_set
    backfill_error_handler(htex, {"0": JobStatus(JobState.FAILED)})  # too few to judge
    assert not htex.bad_state_is_set


def test_harvest_executor_defaults() -> None:
    provider = BackfillProvider("slurm-test", autostart=False, slots=2)
    htex = harvest_executor(provider, heartbeat_period=2)
    assert htex.provider is provider and htex.label == "harvest"
    assert htex.max_workers_per_node == 1 and htex.heartbeat_period == 2
    assert htex.block_error_handler is backfill_error_handler
    # Every Parsl strategy leaves the block count alone: min == init == max.
    assert (provider.min_blocks, provider.init_blocks, provider.max_blocks) == (2, 2, 2)
    assert provider.status_polling_interval == 5 and provider.label == "backfill"


def test_a_provider_polled_by_hand_still_beats_for_its_blocks(tmp_path: Path) -> None:
    """With ``autostart=False`` the caller polls, but the blocks' dead-man switch must still see
    a live driver: the first submit starts the heartbeat, and close() stops it."""
    provider = BackfillProvider(
        "slurm-test", label="by-hand", autostart=False, script_dir=str(tmp_path)
    )
    assert not provider.heartbeat_file.exists()
    provider.submit("true", 1, "parsl.htex.block-0")
    assert provider.heartbeat_file.is_file()
    beating = [t for t in threading.enumerate() if t.name == "backfill-by-hand-heartbeat"]
    assert len(beating) == 1 and beating[0].is_alive()
    assert provider.polls == 0  # nothing polled for the caller
    provider.close(cancel=False)
    assert not beating[0].is_alive()
