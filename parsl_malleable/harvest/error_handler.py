"""A Parsl block error handler that knows harvested blocks end on purpose.

Parsl's ``simple_error_handler`` declares an executor broken when every block it knows has
FAILED or is MISSING, and HTEX calls a block MISSING when it ended before a worker connected.
A harvested block often ends that way for good reasons: its window was short, it yielded to a
native job, it never started and was withdrawn. This handler asks the provider what really
happened to each MISSING block and counts only real failures (the block's own command failed),
using Parsl's windowed rule: the executor is broken when the last ``threshold`` blocks all
failed. Pass it as ``HighThroughputExecutor(block_error_handler=backfill_error_handler)``.
"""

from __future__ import annotations

from typing import Any

from parsl.jobs.error_handlers import _get_error
from parsl.jobs.states import JobState, JobStatus


def _block_order(block_id: str) -> tuple[int, str]:
    return (int(block_id), "") if block_id.isdigit() else (1 << 62, block_id)


def is_real_failure(executor: Any, block_id: str, status: JobStatus) -> bool:
    """True when block ``block_id`` failed by its own fault, asking the provider for MISSING."""
    if status.state is JobState.FAILED:
        return True
    if status.state is not JobState.MISSING:
        return False
    explain = getattr(executor.provider, "ended_as", None)
    job_id = getattr(executor, "blocks_to_job_id", {}).get(block_id)
    if explain is None or job_id is None:
        return True  # not a backfill block: keep Parsl's meaning
    real = explain(job_id)
    return real is None or real is JobState.FAILED


def backfill_error_handler(executor: Any, status: dict[str, JobStatus], threshold: int = 3) -> None:
    """Set ``executor``'s bad state when its last ``threshold`` blocks all really failed."""
    recent = sorted(status, key=_block_order)[-threshold:]
    if len(recent) < threshold:
        return
    if all(is_real_failure(executor, b, status[b]) for b in recent):
        executor.set_bad_state_and_fail_all(_get_error({b: status[b] for b in recent}))


__all__ = ["backfill_error_handler", "is_real_failure"]
