"""BackfillProvider overhead: scheduler queries per poll and per hour, and planning time per poll.

Two parts:

1. Planning cost (offline, synthetic machines of 64 to 4,096 nodes with a busy queue and some
   of our blocks): the provider's own work per poll (the yield decision plus the windows and
   block sizing) against a baseline measured in the same run, one naive window prediction
   (``WindowPredictor.predict``): the provider plans twice (with and without our blocks), so
   the ratio should stay near 2.
2. Queries (``--live``, needs the local cluster: ``scripts/slurm-cluster start``): steady-state
   polls of a provider with running blocks, counting every scheduler command it runs, and the
   wall time of a poll against one bare ``squeue`` in the same run.

Run: ``python benchmarks/bench_provider.py [--live] [--repeat 5]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, peak_rss_mib

from parsl_malleable.harvest.blocks_to_submit import harvest_windows, plan_blocks
from parsl_malleable.harvest.site_profile import SiteProfile, load_profile
from parsl_malleable.harvest.yielding import blocks_in_the_way
from parsl_malleable.snapshot import Node, NodeState, PendingJob, RunningJob, Snapshot
from parsl_malleable.windows.predict import WindowPredictor

NOW = 1_800_000_000.0
HOUR = 3600.0


def best_of(repeat: int, work: Callable[[], object]) -> float:
    """Smallest wall time of ``repeat`` runs (the least disturbed by other processes)."""
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        work()
        times.append(time.perf_counter() - began)
    return min(times)


def synthetic_machine(n_nodes: int, seed: int = 0) -> tuple[Snapshot, dict[str, float]]:
    """A machine about 85% busy with native jobs, 5% ours, and a queue of 2 jobs per 10 nodes."""
    rng = np.random.default_rng(seed)
    names = [f"n{i}" for i in range(1, n_nodes + 1)]
    running: list[RunningJob] = []
    deadlines: dict[str, float] = {}
    i = 0
    busy_until = int(n_nodes * 0.85)
    while i < busy_until:
        k = int(min(rng.integers(1, max(2, n_nodes // 16)), busy_until - i))
        limit = float(rng.choice([1800, 3600, 7200, 14400]))
        ran = float(rng.uniform(0, limit * 0.9))
        running.append(RunningJob(f"r{i}", tuple(names[i : i + k]), NOW - ran, limit, "batch", "u"))
        i += k
    ours_until = i + max(1, n_nodes // 20)
    while i < ours_until:
        k = min(2, ours_until - i)
        job_id = f"b{i}"
        running.append(
            RunningJob(job_id, tuple(names[i : i + k]), NOW - 60, 1200.0, "harvest", "pm", True)
        )
        deadlines[job_id] = NOW - 60 + 1200.0
        i += k
    held = {n for job in running for n in job.nodes}
    nodes = [
        Node(n, NodeState.ALLOCATED if n in held else NodeState.IDLE, ("batch", "harvest"))
        for n in names
    ]
    pending = [
        PendingJob(
            f"p{j}",
            int(rng.integers(1, max(2, n_nodes // 8))),
            float(rng.choice([1800, 3600, 7200])),
            NOW - 100 + j,
            "batch",
            "u",
        )
        for j in range(max(2, n_nodes // 5))
    ]
    snap = Snapshot(NOW, nodes, running, pending, backfill="conservative")
    return snap, deadlines


def planning(repeat: int, profile: SiteProfile) -> None:
    predictor = WindowPredictor(model=None, samples=0)
    print(f"Planning per poll (best of {repeat}): provider vs one naive prediction")
    print(
        f"{'nodes':>6} {'running':>8} {'pending':>8} {'provider':>10} {'predict':>10} {'ratio':>6}"
    )
    for n_nodes in (64, 512, 4096):
        snap, deadlines = synthetic_machine(n_nodes)
        predictor.predict(snap)  # JIT warm-up, not timed

        def provider_work(snap: Snapshot = snap, deadlines: dict[str, float] = deadlines) -> None:
            blocks_in_the_way(snap, deadlines)
            windows = harvest_windows(snap, profile, predictor)
            plan_blocks(snap, profile.max_harvested_nodes, profile, predictor, windows=windows)

        ours = best_of(repeat, provider_work)
        base = best_of(repeat, lambda: predictor.predict(snap))  # noqa: B023
        print(
            f"{n_nodes:>6} {len(snap.running):>8} {len(snap.pending):>8} "
            f"{ours * 1e3:>8.1f}ms {base * 1e3:>8.1f}ms {ours / base:>6.2f}"
        )


def live(repeat: int) -> None:
    from parsl_malleable.provider import BackfillProvider

    env_line = subprocess.run(
        [str(REPO / "scripts" / "slurm-cluster"), "env"], capture_output=True, text=True
    ).stdout
    key, _, value = env_line.strip().removeprefix("export ").partition("=")
    env = {key: value}
    with tempfile.TemporaryDirectory() as scripts:
        provider = BackfillProvider(
            "slurm-test", env=env, autostart=False, script_dir=scripts, slots=2
        )
        provider.submit("sleep 600", 1, "parsl.bench.block-0")
        provider.submit("sleep 600", 1, "parsl.bench.block-1")
        try:
            for _ in range(6):  # fill the slots
                provider.poll_once()
                if len([b for b in provider.blocks() if b.start is not None]) == 2:
                    break
                time.sleep(1)
            start_counts = dict(provider.scheduler.queries)
            polls = max(repeat, 5)
            poll_s = best_of(polls, provider.poll_once)
            counts = {k: v - start_counts.get(k, 0) for k, v in provider.scheduler.queries.items()}
            per_poll = sum(counts.values()) / polls
            squeue = best_of(
                polls,
                lambda: subprocess.run(
                    ["squeue", "--noheader"], env={**os.environ, **env}, capture_output=True
                ),
            )
        finally:
            provider.close()
    default = SiteProfile().poll_interval_s
    print(f"\nLive steady state ({polls} polls, 2 running blocks):")
    by_command = ", ".join(f"{k} {v}" for k, v in counts.items() if v)
    print(f"  commands per poll: {per_poll:.1f}  ({by_command})")
    print(f"  per hour at the default {default:.0f} s interval: {per_poll * HOUR / default:.0f}")
    print(
        f"  poll wall time {poll_s * 1e3:.0f} ms vs one bare squeue {squeue * 1e3:.0f} ms: "
        f"ratio {poll_s / squeue:.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--live", action="store_true", help="also poll the local Slurm cluster")
    args = parser.parse_args()
    planning(args.repeat, load_profile("example-slurm"))
    if args.live:
        live(args.repeat)
    print(f"\npeak RSS {peak_rss_mib():.0f} MiB")


if __name__ == "__main__":
    main()
