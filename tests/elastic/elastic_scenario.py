"""Drive an elastic job through block changes on a Parsl HTEX with LocalProvider blocks.

Shared by the world-size tests of both backends. Blocks are real ``process_worker_pool`` processes
that the test starts (scale out), drains and cancels (planned leave) or SIGKILLs (abrupt loss).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import parsl
from parsl.config import Config
from parsl.executors import HighThroughputExecutor
from parsl.providers import LocalProvider

from parsl_malleable.app import ElasticJob
from parsl_malleable.elastic.membership import OUT

REPO = Path(__file__).resolve().parents[2]


# ``train_paced(ctx, pace_file, step_delay_s, **kwargs)``: ``apps.digits.train_elastic`` on the
# rank's real context, pausing ``step_delay_s / world_size`` (its share of the step's work)
# before each gradient exchange while ``pace_file`` exists; the test removes the file once it
# has driven the group through its changes. With a fixed delay the whole run had to outlast the
# drive, whose block start-ups take much longer on a loaded machine; paced by the test, training
# cannot end during the drive, and the rest of it afterwards costs seconds instead of a minute.
# It travels to the workers by value (its module says __main__): they cannot import it by name,
# ``tests`` there being another distribution's package (globus-compute-endpoint's).
_PACED_SOURCE = """
import os
import time

from apps.digits import train_elastic


class PacedContext:
    def __init__(self, ctx, pace_file, step_delay_s):
        self._ctx = ctx
        self._pace_file = pace_file
        self._step_delay_s = step_delay_s

    def __getattr__(self, name):
        return getattr(self._ctx, name)

    def allreduce_gradients(self, *args, **kwargs):
        if os.path.exists(self._pace_file):
            # A rank's share of the fixed global batch: the step's work is split over the
            # ranks, so a bigger group trains more samples a second and the allocator, which
            # sizes jobs by measured throughput, has a reason to grow the job.
            time.sleep(self._step_delay_s / max(1, self._ctx.world_size))
        self._ctx.allreduce_gradients(*args, **kwargs)


def train_paced(ctx, pace_file, step_delay_s=0.1, **kwargs):
    return train_elastic(PacedContext(ctx, pace_file, step_delay_s), **kwargs)
"""


def _paced() -> Callable[..., dict[str, Any]]:
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(_PACED_SOURCE, "<paced training>", "exec"), namespace)
    return namespace["train_paced"]


train_paced = _paced()


def htex_config(run_dir: Path, init_blocks: int, workers_per_node: int = 1) -> Config:
    """``workers_per_node`` workers per block (one rank each) sharing one core; the test alone
    decides when blocks come and go."""
    provider = LocalProvider(
        init_blocks=init_blocks,
        min_blocks=0,
        max_blocks=16,
        nodes_per_block=1,
        worker_init=f"export PYTHONPATH={REPO}:$PYTHONPATH OMP_NUM_THREADS=1",
    )
    executor = HighThroughputExecutor(
        label="ranks",
        address="127.0.0.1",
        max_workers_per_node=workers_per_node,
        cores_per_worker=1 / workers_per_node,
        heartbeat_period=2,
        heartbeat_threshold=10,
        provider=provider,
        block_error_handler=False,
    )
    return Config(executors=[executor], strategy="none", run_dir=str(run_dir))


def environment_ready() -> None:
    """HTEX starts ``process_worker_pool.py`` by name: the interpreter's bin/ must be on PATH."""
    bindir = os.path.dirname(sys.executable)
    if bindir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")


def executor() -> HighThroughputExecutor:
    ex = parsl.dfk().executors["ranks"]
    assert isinstance(ex, HighThroughputExecutor)
    return ex


def cancel_blocks(block_ids: list[str]) -> None:
    """End these blocks through the provider (the workers there must be idle by now)."""
    ex = executor()
    job_ids = [ex.blocks_to_job_id[b] for b in block_ids if b in ex.blocks_to_job_id]
    ex.provider.cancel(job_ids)


def kill_block_of(pid: int) -> None:
    """SIGKILL the whole block (manager and worker) hosting process ``pid``: a lost node."""
    os.killpg(os.getpgid(pid), signal.SIGKILL)


def wait_size(job: ElasticJob, size: int, progress: int, timeout_s: float = 90.0) -> None:
    """Wait until a group of ``size`` has trained ``progress`` steps since this call."""
    start = job.coordinator.last_step()
    began = time.time()
    ok = job.coordinator.wait_for(
        lambda c: c.resumed_at(size, start + progress) or c.outcome is not None, timeout_s
    )
    epochs = job.coordinator.epochs()
    assert ok, f"no group of {size} ranks within {timeout_s} s; epochs: {epochs}"
    c = job.coordinator
    assert c.outcome is None, (
        f"training ended ({c.outcome}: {c.abort_message}) before size {size}: {epochs}"
    )
    print(f"size {size} after {time.time() - began:.1f} s, step {job.coordinator.last_step()}")


def wait_no_ranks(job: ElasticJob, timeout_s: float = 60.0) -> None:
    """Wait until every rank has left and none is running."""
    ok = job.coordinator.wait_for(
        lambda c: c.running_world_size() == 0 and all(m.phase in OUT for m in c.members()),
        timeout_s,
    )
    assert ok, f"ranks still present: {job.coordinator.members()}"


def drive(job: ElasticJob, progress: int, pace_file: Path | None = None) -> dict[str, Any]:
    """2 -> 4 -> 1 (one block SIGKILLed, two drained) -> 3 -> 0 -> 2, then wait for the result.

    With ``pace_file`` (the job runs :func:`train_paced`), the file is removed once the last
    group of 2 has trained ``progress`` steps, so the rest of the training runs at full speed.
    """
    ex = executor()
    wait_size(job, 2, progress)
    ex.scale_out_facade(2)
    wait_size(job, 4, progress)

    ranks = job.coordinator.current_members()
    killed_at = time.time()
    kill_block_of(ranks[1].pid)
    drained = [str(m.block_id) for m in ranks[2:]]
    job.drain_blocks(drained)
    wait_size(job, 1, progress)
    cancel_blocks(drained)

    ex.scale_out_facade(2)
    wait_size(job, 3, progress)

    last_blocks = [str(m.block_id) for m in job.coordinator.current_members()]
    job.drain_blocks(last_blocks)
    wait_no_ranks(job)
    cancel_blocks(last_blocks)
    idle_from = time.time()
    # Idle until the cancelled blocks' managers have left the interchange: from then on nothing
    # can host a rank, and none may have started meanwhile.
    deadline = time.monotonic() + 60
    while any(m.get("active") for m in ex.connected_managers()):
        assert time.monotonic() < deadline, f"managers still connected: {ex.connected_managers()}"
        time.sleep(0.1)
    assert job.coordinator.running_world_size() == 0
    idle_until = time.time()

    ex.scale_out_facade(2)
    if pace_file is not None:
        wait_size(job, 2, progress)
        pace_file.unlink()
    assert job.future is not None
    result = job.future.result(timeout=240)
    return {"result": result, "killed_at": killed_at, "idle": (idle_from, idle_until)}
