"""A worker pool's start, alone: block launched -> a task that has torch ready, per launch command.

No scheduler and no training: Parsl's ``LocalProvider`` starts one block of one worker on this
machine, and the first task imports what a rank needs before its first step
(:mod:`parsl_malleable.elastic.warm`: torch and its first optimizer's lazy imports). Timed from
the moment the DFK is loaded (the strategy, run every 0.1 s, launches the block at once) to the
task's start and to its end, for each launch command, with the CPU seconds the block's pool
(all its processes: pool, fork server or manager server, worker) spent until torch was ready:

* ``launcher``: ``parsl-malleable-pool`` (:mod:`parsl_malleable.harvest.worker_pool`), what
  ``harvest_executor`` uses;
* ``parsl``: Parsl's own ``process_worker_pool.py``, the baseline.

The commands alternate, ``--reps`` each. ``--load`` runs them again with one CPU-bound process
per core beside them (a node shared with other work). A fresh compute node is the idle case:
the block gets the node to itself.

Run: ``python benchmarks/bench_pool_start.py [--reps 6] [--load]`` (about a minute).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_block_start import burn


def _torch_ready() -> tuple[float, float, float]:
    """In the worker: when the task started, when torch was ready, and the CPU seconds the
    block's whole pool (every process under its top process) has spent by then."""
    import time

    started = time.time()
    import parsl_malleable.elastic.warm  # noqa: F401  (what a rank needs before its first step)

    ready = time.time()
    import psutil

    scripts = {"parsl-malleable-pool", "process_worker_pool.py"}
    pool, process = None, psutil.Process()
    while process is not None:  # the pool's top process: the outermost one running a pool
        if scripts & {part.rsplit("/", 1)[-1] for part in process.cmdline()[:2]}:
            pool = process
        process = process.parent()
    assert pool is not None, "no worker pool among the task's ancestors"
    cpu = 0.0
    for member in [pool, *pool.children(recursive=True)]:
        times = member.cpu_times()
        cpu += times.user + times.system
    return started, ready, cpu


def one_start(launch_cmd: str) -> tuple[float, float, float]:
    """Seconds from the DFK's load to the first task's start and to torch ready, and the
    pool's CPU seconds until then."""
    import parsl
    from parsl.config import Config
    from parsl.executors import HighThroughputExecutor
    from parsl.providers import LocalProvider

    htex = HighThroughputExecutor(
        label="pool",
        max_workers_per_node=1,
        address="127.0.0.1",
        launch_cmd=launch_cmd,
        provider=LocalProvider(init_blocks=0, min_blocks=0, max_blocks=1),
    )
    config = Config(executors=[htex], run_dir=tempfile.mkdtemp(), strategy_period=0.1)
    with parsl.load(config):
        loaded = time.time()
        started, ready, cpu = parsl.python_app(_torch_ready)().result(timeout=300)
    return started - loaded, ready - loaded, cpu


def main() -> None:
    from parsl.executors.high_throughput.executor import DEFAULT_LAUNCH_CMD

    from parsl_malleable.provider import POOL_LAUNCH_CMD

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=6)
    parser.add_argument("--load", action="store_true")
    args = parser.parse_args()
    commands = {"launcher": POOL_LAUNCH_CMD, "parsl": DEFAULT_LAUNCH_CMD}
    print(
        f"{'launch command':<24} {'task start s':>13} {'torch ready s':>14} {'p90':>6} "
        f"{'pool CPU s':>11} {'n':>3}"
    )
    for load in [False, True] if args.load else [False]:
        burners = [
            multiprocessing.Process(target=burn, daemon=True)
            for _ in range((os.cpu_count() or 1) if load else 0)
        ]
        for burner in burners:
            burner.start()
        seen: dict[str, list[tuple[float, float, float]]] = {name: [] for name in commands}
        for _ in range(args.reps):
            for name, command in commands.items():
                seen[name].append(one_start(command))
        for burner in burners:
            burner.terminate()
        for name, times in seen.items():
            starts = sorted(t[0] for t in times)
            ready = sorted(t[1] for t in times)
            p90 = ready[min(len(ready) - 1, round(0.9 * (len(ready) - 1)))]
            label = f"{name}{' +load' if load else ''}"
            cpu = statistics.median(t[2] for t in times)
            print(
                f"{label:<24} {statistics.median(starts):>13.2f} "
                f"{statistics.median(ready):>14.2f} {p90:>6.2f} {cpu:>11.2f} {len(ready):>3d}"
            )


if __name__ == "__main__":
    main()
