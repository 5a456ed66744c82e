"""Native-job delay and harvest on the real local Slurm cluster, in each provider mode.

A stream of native jobs (1-3 nodes, seconds to a minute long, Slurm limits of 1-3 minutes,
fixed seed) is replayed in real time on the local cluster (``scripts/slurm-cluster start``):

* ``baseline`` twice, without harvesting: the difference between the two runs is Slurm's own
  run-to-run noise, the yardstick for any delay;
* ``poll``: a :class:`BackfillProvider` in polling mode (profile ``slurm-test``, partition
  ``harvest``, never preempted: the provider yields blocks itself; 5 s polls);
* ``poll-watch``: the same with ``watch_interval_s: 1`` (one small ``squeue`` a second between
  polls; a native arrival or end seen there starts a poll at once);
* ``preempt``: the provider in preemption mode (profile ``slurm-preempt``, partition
  ``scavenger``: Slurm cancels a block there when a native job needs its nodes);
* ``preempt-watch``: the same with the queue watch, which here refills slots as soon as a
  native job's start or end shows, instead of at the next poll.

The harvesting runs open every slot before the first native job arrives, so blocks hold the
idle machine and each arrival has to get its nodes back. Each native job records when it
started (its own clock, sub-second); each block node records when it started and ended.

Prints, per mode: per-job delay against the first baseline (mean, max, and how many jobs were
delayed more than the noise's max), harvested / idle node-seconds (idle: node-seconds the native
jobs left unused between the first submission and the last native end, in that run), and
yields (blocks the provider cancelled to yield, and blocks Slurm preempted).

Run: ``python benchmarks/bench_live_harvest.py [--jobs 26] [--seed 1] [--modes ...] [--out F]``
(about 4 minutes per run; modes ``poll,poll-watch,preempt`` by default).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO

from parsl_malleable.harvest.ledger import JobRecord
from parsl_malleable.harvest.states import CancelReason
from parsl_malleable.provider import BackfillProvider

NODES = 6
PAIRS = {"max_nodes_per_block": 2, "max_blocks": 3}
# mode -> (profile, overrides)
PROFILES: dict[str, tuple[str, dict[str, float | None]]] = {
    "poll": ("slurm-test", {}),
    "poll-watch": ("slurm-test", {"watch_interval_s": 1.0}),
    # The preemption runs of docs/benchmarks.md: 3 slots of up to 2 nodes, polls only (the
    # profile now has a block per node and the watch; bench_live_training.py measures that).
    "preempt": ("slurm-preempt", {**PAIRS, "watch_interval_s": None}),
    "preempt-watch": ("slurm-preempt", PAIRS),
}
# What a block runs on each node: a stand-in worker pool that records its life and, like
# Parsl's, exits on SIGTERM.
BLOCK_COMMAND = (
    'f="{dir}/block-$SLURM_JOB_ID-$SLURM_NODEID"; echo "$(date +%s.%N)" > "$f.start"; '
    'trap \'echo "$(date +%s.%N)" > "$f.end"; kill $pid 2>/dev/null; exit 0\' TERM; '
    'sleep 3600 & pid=$!; wait $pid; echo "$(date +%s.%N)" > "$f.end"'
)


@dataclass(frozen=True)
class Native:
    """One job of the stream: arrives ``at`` seconds after the first, ``nodes`` x ``run_s``."""

    index: int
    at: float
    nodes: int
    run_s: float
    limit_min: int


@dataclass
class RunResult:
    """What one replay measured."""

    mode: str
    waits: dict[int, float]
    idle_node_s: float
    harvested_node_s: float
    yields: int
    preempted: int
    blocks: int


def stream(jobs: int, seed: int) -> list[Native]:
    """The native job stream: Poisson arrivals (mean 6 s apart), 1-3 nodes, 5-40 s."""
    rng = random.Random(seed)
    t = 0.0
    out = []
    for i in range(jobs):
        run_s = rng.uniform(5, 40)
        out.append(Native(i, t, rng.randint(1, 3), run_s, 1 + rng.randint(0, 2)))
        t += rng.expovariate(1 / 6)
    return out


def slurm_env() -> dict[str, str]:
    conf = os.environ.get("SLURM_CONF", "/tmp/pm-slurm/slurm.conf")
    return {**os.environ, "SLURM_CONF": conf}


def slurm(*argv: str, check: bool = True) -> str:
    return subprocess.run(
        argv, env=slurm_env(), capture_output=True, text=True, timeout=30, check=check
    ).stdout


def wait_until(done: Callable[[], bool], timeout_s: float, step_s: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if done():
            return True
        time.sleep(step_s)
    return done()


def machine_idle() -> bool:
    # One line per node and partition: the three partitions share the nodes.
    rows = slurm("sinfo", "-h", "-N", "-o", "%N %T").split("\n")
    states = dict(row.split() for row in rows if row.strip())
    queue = slurm("squeue", "-h", "-o", "%i").split()
    return len(states) == NODES and all(s == "idle" for s in states.values()) and not queue


def replay(mode: str, natives: list[Native], work: Path, slots: int | None = None) -> RunResult:
    """Replay the stream once, harvesting with ``mode``'s profile unless it is a baseline."""
    if not wait_until(machine_idle, 120):
        raise RuntimeError("the cluster did not become idle; is another job running?")
    run_dir = work / f"{mode}-{time.monotonic_ns()}"
    run_dir.mkdir()
    provider = None
    if mode in PROFILES:
        profile, overrides = PROFILES[mode]
        provider = BackfillProvider(
            profile,
            script_dir=str(run_dir),
            env={"SLURM_CONF": slurm_env()["SLURM_CONF"]},
            slots=slots,
            **overrides,
        )
        for i in range(provider.slots):
            provider.submit(BLOCK_COMMAND.format(dir=run_dir), 1, f"parsl.block-{i}")

        def blocks_hold_machine() -> bool:
            held = sum(len(b.nodes) for b in provider.blocks() if b.start is not None)
            return held >= min(NODES, provider.profile.max_nodes)

        wait_until(blocks_hold_machine, 60)
    submitted: dict[int, float] = {}
    t0 = time.time()
    for job in natives:
        delay = t0 + job.at - time.time()
        if delay > 0:
            time.sleep(delay)
        script = f"date +%s.%N > {run_dir}/native-{job.index}; sleep {job.run_s:.1f}"
        submitted[job.index] = time.time()
        slurm(
            "sbatch", "--parsable", "--partition=batch", f"-N{job.nodes}",
            f"-t{job.limit_min}", "--output=/dev/null", f"--job-name=native-{job.index}",
            "--wrap", script,
        )  # fmt: skip

    def natives_done() -> bool:
        names = slurm("squeue", "-h", "-o", "%j").split()
        strangers.update(n for n in names if not n.startswith(("native-", "pm-block")))
        return not any(n.startswith("native-") for n in names)

    strangers: set[str] = set()

    wait_until(natives_done, 600)
    if strangers:
        # Another user's jobs shared the cluster: this run's delays are not comparable.
        print(f"# WARNING {mode}: other jobs ran meanwhile: {sorted(strangers)}", flush=True)
    if provider is not None:
        provider.close()
        wait_until(machine_idle, 120)
    starts = {j.index: float((run_dir / f"native-{j.index}").read_text()) for j in natives}
    span = (t0, max(starts[j.index] + j.run_s for j in natives))
    busy = sum(
        j.nodes * _overlap(starts[j.index], starts[j.index] + j.run_s, span) for j in natives
    )
    idle = NODES * (span[1] - span[0]) - busy
    harvested = _block_node_seconds(run_dir, span)
    history = provider.history() if provider is not None else []
    return RunResult(
        mode=mode,
        waits={i: starts[i] - submitted[i] for i in starts},
        idle_node_s=idle,
        harvested_node_s=harvested,
        yields=sum(r.cancel_reason is CancelReason.YIELD for r in history),
        preempted=sum(_preempted(r) for r in history),
        blocks=sum(r.start is not None for r in history),
    )


def _preempted(rec: JobRecord) -> bool:
    return rec.cancel_reason is None and "preempted" in rec.message


def _overlap(start: float, end: float, span: tuple[float, float]) -> float:
    return max(0.0, min(end, span[1]) - max(start, span[0]))


def _block_node_seconds(run_dir: Path, span: tuple[float, float]) -> float:
    total = 0.0
    for start_file in run_dir.glob("block-*.start"):
        end_file = start_file.with_suffix(".end")
        start = float(start_file.read_text())
        end = float(end_file.read_text()) if end_file.exists() else span[1]
        total += _overlap(start, end, span)
    return total


def report(results: list[RunResult], natives: list[Native]) -> None:
    base, *rest = results
    noise = next((r for r in rest if r.mode == "baseline"), None)
    noise_max = 0.0
    rows = []
    for res in rest:
        delays = [res.waits[j.index] - base.waits[j.index] for j in natives]
        if res.mode == "baseline":
            noise_max = max(abs(d) for d in delays)
        rows.append((res, delays))
    print(f"native jobs: {len(natives)}; delays are waits minus the first baseline's waits")
    print(
        f"{'run':<10} {'mean delay s':>12} {'max delay s':>11} {'> noise':>8} "
        f"{'idle node-s':>11} {'harvested':>10} {'blocks':>7} {'yields':>7} {'preempted':>9}"
    )
    for res, delays in rows:
        over = sum(d > noise_max for d in delays) if res.mode != "baseline" else 0
        share = res.harvested_node_s / res.idle_node_s if res.idle_node_s > 0 else math.nan
        harvest = f"{share:.0%}" if res.mode != "baseline" else "-"
        print(
            f"{res.mode:<10} {sum(delays) / len(delays):>12.2f} {max(delays):>11.2f} "
            f"{over:>8d} {res.idle_node_s:>11.0f} {harvest:>10} {res.blocks:>7d} "
            f"{res.yields:>7d} {res.preempted:>9d}"
        )
    if noise is not None:
        print(f"Slurm's own noise (baseline vs baseline): max |delay| {noise_max:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=26)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--slots", type=int, default=None, help="Parsl slots (max_blocks; default: the profile's)"
    )
    parser.add_argument("--out", help="also write every run's per-job waits to this JSON file")
    parser.add_argument(
        "--modes", default="poll,poll-watch,preempt", help="harvesting modes to run"
    )
    args = parser.parse_args()
    if shutil.which("sbatch") is None:
        sys.exit("needs the local Slurm cluster: scripts/slurm-cluster start")
    natives = stream(args.jobs, args.seed)
    modes = [m for m in args.modes.split(",") if m]
    for mode in modes:
        if mode not in PROFILES:
            sys.exit(f"unknown mode {mode!r}; one of {', '.join(PROFILES)}")
    os.chdir(REPO)
    with tempfile.TemporaryDirectory(prefix="bench-live-harvest-") as tmp:
        results = []
        for mode in ["baseline", *modes, "baseline"]:
            began = time.monotonic()
            results.append(replay(mode, natives, Path(tmp), args.slots))
            print(f"# {mode}: {time.monotonic() - began:.0f} s", flush=True)
        report(results, natives)
    if args.out:
        rows = [{"mode": r.mode, "waits": r.waits, "idle_node_s": r.idle_node_s,
                 "harvested_node_s": r.harvested_node_s} for r in results]  # fmt: skip
        Path(args.out).write_text(json.dumps({"natives": [vars(j) for j in natives], "runs": rows}))


if __name__ == "__main__":
    main()
