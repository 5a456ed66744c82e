"""Moving a node between jobs in place, against stopping and restarting the job on a new block.

Real Parsl HTEX (LocalProvider blocks, one worker per block) and real digits training. Job
``base`` trains on both nodes. Then, ``--repeats`` times, a short job ``visitor-i`` with a
higher priority arrives: the allocator moves one node from ``base`` to it; when it finishes the
node moves back. Each move is timed from the moment the leaving rank has left its job at a
commit (the coordinator's ``left`` event) to the first step of the job that gains the node
(the first commit of the epoch that includes it). Nothing but the agent on the node changes
hands: no batch job and no Parsl task is started.

Baseline, in the same run: what a system without in-place moves does, a stop-and-restart of
the job on a new block. Job ``restart`` trains alone on one block; its block is drained (its
rank leaves at a commit and writes a checkpoint), cancelled, and a new block is started, where
the job resumes from the checkpoint. Timed the same way, from the leave to the first step.

    python benchmarks/bench_controller_move.py [--repeats N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import parsl  # noqa: E402
from parsl.config import Config  # noqa: E402
from parsl.executors import HighThroughputExecutor  # noqa: E402
from parsl.providers import LocalProvider  # noqa: E402

from apps.digits import train_elastic  # noqa: E402
from parsl_malleable.allocate.curve import ScalingCurve  # noqa: E402
from parsl_malleable.app import ElasticJob, malleable_app  # noqa: E402
from parsl_malleable.controller import CoreSettings, configure  # noqa: E402

LINEAR = ScalingCurve((1, 2), (100.0, 200.0))
VISITOR = ScalingCurve((1,), (1000.0,))  # worth more on one node than base on two


def left_at(job: ElasticJob, after: float) -> float:
    """Wall time the first rank of ``job`` left it after ``after``."""
    times = [e["time"] for e in job.coordinator.events() if e["event"] == "left"]
    return min(t for t in times if t >= after)


def first_step_with(job: ElasticJob, size: int, after: float) -> float | None:
    """Wall time of the first commit of a group of ``size`` formed after ``after``."""
    for epoch in job.coordinator.epochs():
        if epoch["world_size"] == size and epoch["formed_at"] >= after and epoch["resumed_at"]:
            return float(epoch["resumed_at"])
    return None


def wait(predicate, timeout_s: float = 120.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark step did not happen in time")
        time.sleep(0.05)


def app(directory: str, **options: object):  # type: ignore[no-untyped-def]
    return malleable_app(checkpoint_dir=directory, settle_s=0.2, **options)(train_elastic)


def in_place_moves(work: Path, repeats: int) -> list[float]:
    base = app(str(work / "base"), max_nodes=2, curve=LINEAR).submit(
        epochs=10_000, step_delay_s=0.02, name="base"
    )
    wait(lambda: base.coordinator.resumed_at(2, 5))
    moves: list[float] = []
    for i in range(repeats):
        began = time.time()
        visitor = app(str(work / f"visitor-{i}"), max_nodes=1, curve=VISITOR, priority=10.0)
        job = visitor.submit(epochs=1, step_delay_s=0.02, name=f"visitor-{i}")
        wait(lambda job=job, began=began: first_step_with(job, 1, began) is not None)
        moves.append(first_step_with(job, 1, began) - left_at(base, began))  # type: ignore[operator]
        job.future.result(timeout=120)
        ended = time.time()
        wait(lambda ended=ended: first_step_with(base, 2, ended) is not None)
        finished = max(e["time"] for e in job.coordinator.events() if e["event"] == "finished")
        moves.append(first_step_with(base, 2, ended) - finished)  # type: ignore[operator]
    base.cancel("benchmark over")
    return moves


def stop_and_restart(work: Path, executor: HighThroughputExecutor, repeats: int) -> list[float]:
    job = app(str(work / "restart"), max_nodes=1, checkpoint_every=0).submit(
        epochs=10_000, step_delay_s=0.02, name="restart"
    )
    wait(lambda: job.coordinator.resumed_at(1, 5))
    # Only the job's own block stays: the restart must come from a new block, not a free node.
    home = str(job.coordinator.current_members()[0].block_id)
    others = [b for b in executor.blocks_to_job_id if b != home]
    job.controller.drain_blocks(others)
    executor.provider.cancel([executor.blocks_to_job_id[b] for b in others])
    times: list[float] = []
    for _ in range(repeats):
        began = time.time()
        member = job.coordinator.current_members()[0]
        block = str(member.block_id)
        job.drain_blocks([block])
        wait(lambda: job.coordinator.running_world_size() == 0)
        executor.provider.cancel([executor.blocks_to_job_id[block]])
        executor.scale_out_facade(1)
        wait(lambda began=began: first_step_with(job, 1, began) is not None)
        times.append(first_step_with(job, 1, began) - left_at(job, began))  # type: ignore[operator]
    job.cancel("benchmark over")
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    bindir = os.path.dirname(sys.executable)
    os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        provider = LocalProvider(
            init_blocks=2,
            max_blocks=8,
            worker_init=f"export PYTHONPATH={REPO}:$PYTHONPATH OMP_NUM_THREADS=1",
        )
        executor = HighThroughputExecutor(
            label="ranks",
            address="127.0.0.1",
            max_workers_per_node=1,
            heartbeat_period=2,
            heartbeat_threshold=10,
            provider=provider,
            block_error_handler=False,
        )
        parsl.load(Config(executors=[executor], strategy="none", run_dir=str(work / "run")))
        try:
            configure(executor, settings=CoreSettings(debounce_s=0.1, max_delay_s=0.5))
            moves = in_place_moves(work, args.repeats)
            restarts = stop_and_restart(work, executor, args.repeats)
        finally:
            parsl.dfk().cleanup()
    move, restart = statistics.median(moves), statistics.median(restarts)
    print(
        f"node moved between jobs in place: median {move:.2f} s over {len(moves)} moves "
        f"(min {min(moves):.2f}, max {max(moves):.2f})"
    )
    print(
        f"stop-and-restart on a new block:  median {restart:.2f} s over {len(restarts)} "
        f"(min {min(restarts):.2f}, max {max(restarts):.2f})"
    )
    print(f"in-place move is {restart / move:.1f}x faster")


if __name__ == "__main__":
    main()
