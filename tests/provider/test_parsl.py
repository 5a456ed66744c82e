"""A Parsl script on harvested nodes: HighThroughputExecutor(provider=BackfillProvider(...))."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import parsl
import pytest
from parsl.config import Config
from parsl.executors import HighThroughputExecutor

from parsl_malleable.harvest import backfill_error_handler
from parsl_malleable.harvest.states import CancelReason
from parsl_malleable.provider import BackfillProvider

from .conftest import Natives, job_states, run_slurm, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


_WHERE = """
def where(i, gate=None):
    import os
    import time

    # A later app holds its worker until the test opens the gate (the yielded blocks are
    # gone), so it cannot finish on a block that was there before the yield however fast
    # the yield comes; a bound keeps a lost gate from hanging the worker for ever.
    deadline = time.monotonic() + 300
    while gate is not None and not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(0.5)
    return (
        i,
        os.environ.get("SLURMD_NODENAME"),
        os.environ.get("SLURM_JOB_ID"),
        os.environ.get("PARSL_WORKER_BLOCK_ID"),
    )
"""


def _where() -> Callable[..., tuple[int, str | None, str | None, str | None]]:
    """Where a task ran: the Slurm node and job, and the Parsl block. The workers cannot
    import this test module, so the function lives in a namespace of its own and is shipped
    by value."""
    namespace: dict[str, object] = {"__name__": "__main__"}
    exec(_WHERE, namespace)
    return namespace["where"]  # type: ignore[return-value]


def test_python_apps_finish_while_blocks_come_and_go(
    natives: Natives, providers: Callable[..., BackfillProvider], tmp_path: Path
) -> None:
    # n1 busy for 5 minutes; a 6-node native job waits for it: n2..n6 are a 5-minute hole.
    running = natives.submit("-N1", "-w", "n1", "-t", "5", "--wrap", "sleep 600")
    assert wait_for(lambda: job_states(natives.cluster, [running])[running][0] == "RUNNING", 20)
    big = natives.submit("-N6", "-t", "1", "--wrap", "sleep 8")
    provider = providers(slots=2, poll_interval_s=2, yield_grace_s=1)
    where = parsl.python_app(_where())
    htex = HighThroughputExecutor(
        label="harvest",
        provider=provider,
        max_workers_per_node=1,
        block_error_handler=backfill_error_handler,
        heartbeat_period=2,
        heartbeat_threshold=6,
    )
    config = Config(
        executors=[htex], run_dir=str(tmp_path / "runinfo"), retries=3, strategy_period=1
    )
    gate = tmp_path / "yielded"
    with parsl.load(config):
        first = [where(i) for i in range(6)]
        before = [f.result(timeout=120) for f in first]
        # The native job ends early: the 6-node job can start now, our blocks are in its way.
        later = [where(i, str(gate)) for i in range(6, 30)]
        run_slurm(natives.cluster, "scancel", running)
        first_blocks = {r[2] for r in before}

        def first_blocks_gone() -> bool:
            ended = {r.job_id for r in provider.history() if r.end_state is not None}
            return first_blocks <= ended

        assert wait_for(first_blocks_gone, 180), "the blocks did not leave for the 6-node job"
        gate.touch()
        after = [f.result(timeout=240) for f in later]
        assert not htex.bad_state_is_set
    results = before + after
    assert sorted(r[0] for r in results) == list(range(30))
    assert all(r[1] in natives.cluster.nodes for r in results)  # ran inside Slurm jobs
    assert {r[2] for r in after} - first_blocks, "no app ran on a block submitted after the yield"
    assert {r[3] for r in results} <= {"0", "1"}
    history = provider.history()
    yielded = [r for r in history if r.cancel_reason is CancelReason.YIELD]
    assert yielded and all(r.end_state is not None for r in yielded)
    assert {r.end_state.name for r in yielded} == {"TIMEOUT"}
    state = job_states(natives.cluster, [big]).get(big, ("GONE", ""))[0]
    assert state in ("RUNNING", "COMPLETING", "COMPLETED", "GONE")  # the native job ran
