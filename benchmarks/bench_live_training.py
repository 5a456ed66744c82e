"""Training on the idle nodes of the real local Slurm cluster, under a stream of native jobs.

The stream of ``bench_live_harvest.py`` (26 native jobs, 1-3 nodes, 5-40 s, Poisson arrivals 6 s
apart, seed 1) is replayed in real time: twice without harvesting (``baseline``: the difference
between the two is Slurm's own run-to-run noise), and once per mode with three malleable digits
jobs (``train_elastic``, paced at ``--step-s`` a step, hidden layers 64 / 128 / 256, up to 2 /
2 / 3 nodes) trained by the controller on a :class:`BackfillProvider`:

* ``preempt``: preemption mode (profile ``slurm-preempt``: partition ``scavenger``, one node per
  block, the queue watched every second);
* ``poll``: polling mode (profile ``slurm-test``: partition ``harvest``, 5 s polls, the provider
  yields; with the queue watch every second and 6 slots of 1-2 nodes).

Every harvesting run starts once the jobs train on the whole idle machine; then the stream
starts (``t0``). Measured from ``t0`` to the last native end: the native jobs' delays (their
wait minus their wait in the first baseline); idle node-seconds (what the native jobs left);
harvested node-seconds (our blocks' nodes, Slurm's start to the provider seeing the end); node-
seconds in training steps (the controller's phase log: each epoch of each job from its first step
to its next membership change, pauses left out); samples trained (the coordinators' steps x
batch x world size). Then the same native stream is replayed by the replay engine on a simulated
clock (its idle timeline from the natives' own start times and nodes, the same three jobs with
the per-node rates measured here), with the calibration file of ``bench_block_start.py``, and its
samples are printed beside the live ones.

Run: ``python benchmarks/bench_live_training.py [--calibration F] [--out F]`` (about 4 minutes
per run, 4 runs).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hostlist

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO
from bench_live_harvest import (
    NODES,
    Native,
    _overlap,
    machine_idle,
    slurm,
    slurm_env,
    stream,
    wait_until,
)

NAMES = [f"n{i}" for i in range(1, NODES + 1)]  # the local cluster's nodes
BATCH = 32
# name: (hidden layer, max nodes); 7 nodes wanted on 6, so the allocator always has a choice
JOBS: dict[str, tuple[tuple[int, ...], int]] = {
    "small": ((64,), 2),
    "medium": ((128,), 2),
    "large": ((256,), 3),
}
MODES: dict[str, tuple[str, dict[str, Any]]] = {
    "preempt": ("slurm-preempt", {"max_nodes_per_block": 1, "slots": 6}),
    "poll": ("slurm-test", {"watch_interval_s": 1.0, "max_nodes_per_block": 2, "slots": 6}),
}


@dataclass
class LiveRun:
    """What one run measured (harvesting figures are zero for a baseline)."""

    mode: str
    waits: dict[int, float]
    native_nodes: dict[int, list[str]]
    native_starts: dict[int, float]
    t0: float
    t1: float
    idle_node_s: float
    harvested_node_s: float = 0.0
    training_node_s: float = 0.0
    samples: dict[str, float] = field(default_factory=dict)
    epochs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    rates: dict[str, dict[int, float]] = field(default_factory=dict)
    blocks: int = 0
    preempted: int = 0
    yields: int = 0
    startup_s: list[float] = field(default_factory=list)


def samples_trained(epochs: list[dict[str, Any]], until: float) -> float:
    """Samples the epochs trained (steps x batch x world size), counted up to ``until``."""
    total = 0.0
    for e in epochs:
        if e.get("resumed_at") is None or e.get("last_step") is None or e["resumed_at"] > until:
            continue
        total += (e["last_step"] - (e.get("start_step") or 0)) * BATCH * e["world_size"]
    return total


def per_node_rates(epochs: list[dict[str, Any]]) -> dict[int, float]:
    """Samples/s at each world size, over the epochs that trained at that size (from each
    epoch's first step to its last)."""
    done: dict[int, float] = {}
    spent: dict[int, float] = {}
    for e in epochs:
        if (
            e.get("resumed_at") is None
            or e.get("progress_at") is None
            or e.get("last_step") is None
        ):
            continue
        seconds = e["progress_at"] - e["resumed_at"]
        if seconds <= 1.0:
            continue
        n = int(e["world_size"])
        done[n] = done.get(n, 0.0) + (e["last_step"] - (e.get("start_step") or 0)) * BATCH * n
        spent[n] = spent.get(n, 0.0) + seconds
    return {n: done[n] / spent[n] for n in sorted(done)}


def submit_stream(natives: list[Native], run_dir: Path) -> tuple[float, dict[int, float]]:
    submitted: dict[int, float] = {}
    t0 = time.time()
    for job in natives:
        delay = t0 + job.at - time.time()
        if delay > 0:
            time.sleep(delay)
        out = run_dir / f"native-{job.index}"
        script = f'date +%s.%N > {out}; echo "$SLURM_JOB_NODELIST" >> {out}; sleep {job.run_s:.1f}'
        submitted[job.index] = time.time()
        slurm(
            "sbatch", "--parsable", "--partition=batch", f"-N{job.nodes}",
            f"-t{job.limit_min}", "--output=/dev/null", f"--job-name=native-{job.index}",
            "--wrap", script,
        )  # fmt: skip
    return t0, submitted


def natives_done() -> bool:
    return not any(n.startswith("native-") for n in slurm("squeue", "-h", "-o", "%j").split())


def read_natives(
    natives: list[Native], run_dir: Path
) -> tuple[dict[int, float], dict[int, list[str]]]:
    starts, nodes = {}, {}
    for j in natives:
        start, nodelist = (run_dir / f"native-{j.index}").read_text().split()[:2]
        starts[j.index] = float(start)
        nodes[j.index] = hostlist.expand_hostlist(nodelist)
    return starts, nodes


def idle_node_seconds(natives: list[Native], starts: dict[int, float], t0: float) -> float:
    t1 = max(starts[j.index] + j.run_s for j in natives)
    busy = sum(
        j.nodes * _overlap(starts[j.index], starts[j.index] + j.run_s, (t0, t1)) for j in natives
    )
    return NODES * (t1 - t0) - busy


def baseline(natives: list[Native], work: Path) -> LiveRun:
    if not wait_until(machine_idle, 120):
        raise RuntimeError("the cluster did not become idle; is another job running?")
    run_dir = Path(tempfile.mkdtemp(dir=work, prefix="baseline-"))
    t0, submitted = submit_stream(natives, run_dir)
    wait_until(natives_done, 600)
    starts, nodes = read_natives(natives, run_dir)
    t1 = max(starts[j.index] + j.run_s for j in natives)
    return LiveRun(
        "baseline",
        {i: starts[i] - submitted[i] for i in starts},
        nodes,
        starts,
        t0,
        t1,
        idle_node_seconds(natives, starts, t0),
    )


def harvest(mode: str, natives: list[Native], work: Path, step_s: float) -> LiveRun:
    import parsl
    from parsl.config import Config
    from parsl_malleable.apps.digits import train_elastic

    from parsl_malleable.app import malleable_app
    from parsl_malleable.controller import configure
    from parsl_malleable.controller.phases import percentile
    from parsl_malleable.harvest.states import CancelReason
    from parsl_malleable.provider import BackfillProvider, harvest_executor

    if not wait_until(machine_idle, 120):
        raise RuntimeError("the cluster did not become idle; is another job running?")
    run_dir = Path(tempfile.mkdtemp(dir=work, prefix=f"{mode}-"))
    profile, overrides = MODES[mode]
    provider = BackfillProvider(
        profile,
        script_dir=str(run_dir / "scripts"),
        env={"SLURM_CONF": slurm_env()["SLURM_CONF"]},
        worker_init=f"export PYTHONPATH={REPO}:$PYTHONPATH OMP_NUM_THREADS=1",
        **overrides,
    )
    htex = harvest_executor(provider)
    with parsl.load(Config(executors=[htex], run_dir=str(run_dir / "runinfo"))):
        controller = configure(htex)
        jobs = {}
        for seed, (name, (hidden, max_nodes)) in enumerate(JOBS.items()):
            app = malleable_app(
                checkpoint_dir=str(run_dir / name), max_nodes=max_nodes, checkpoint_every=200
            )(train_elastic)
            # Trains until the driver closes (the jobs then fail, which is expected here).
            jobs[name] = app.submit(
                epochs=100_000, hidden=hidden, seed=seed, step_delay_s=step_s, name=name
            )

        def whole_machine_trains() -> bool:
            return sum(j.coordinator.running_world_size() for j in jobs.values()) >= NODES

        if not wait_until(whole_machine_trains, 180, 0.5):
            print(f"# {mode}: the jobs did not train on all {NODES} nodes before the stream")
        training_before = controller.phases.training_s()
        before = {n: samples_trained(j.coordinator.epochs(), time.time()) for n, j in jobs.items()}
        t0, submitted = submit_stream(natives, run_dir)
        wait_until(natives_done, 600, 0.25)
        starts, nodes = read_natives(natives, run_dir)
        t1 = max(starts[j.index] + j.run_s for j in natives)
        # The phase log is read each controller tick (0.25 s): one more tick, then count.
        time.sleep(max(0.0, t1 + 2 * controller.tick_s - time.time()))
        training = controller.phases.training_s() - training_before
        epochs = {n: j.coordinator.epochs() for n, j in jobs.items()}
        startups = [
            s.first_step - s.submitted
            for s in controller.phases.startups()
            if s.submitted is not None and s.submitted >= t0
        ]
        history = provider.history()
        provider.close()
    harvested = sum(
        len(r.nodes) * _overlap(r.start, r.ended_at or t1, (t0, t1))
        for r in history
        if r.start is not None
    )
    run = LiveRun(
        mode,
        {i: starts[i] - submitted[i] for i in starts},
        nodes,
        starts,
        t0,
        t1,
        idle_node_seconds(natives, starts, t0),
        harvested_node_s=harvested,
        training_node_s=training,
        samples={n: samples_trained(e, t1) - before[n] for n, e in epochs.items()},
        rates={n: per_node_rates(e) for n, e in epochs.items()},
        epochs=epochs,
        blocks=sum(r.start is not None for r in history),
        preempted=sum(r.cancel_reason is None and "preempted" in r.message for r in history),
        yields=sum(r.cancel_reason is CancelReason.YIELD for r in history),
        startup_s=startups,
    )
    if startups:
        print(
            f"# {mode}: block submitted -> first step: median {statistics.median(startups):.2f} s,"
            f" p90 {percentile(startups, 0.9):.2f} s over {len(startups)} nodes"
        )
    wait_until(machine_idle, 120)
    return run


def replayed_samples(run: LiveRun, natives: list[Native], calibration: Path | None) -> float:
    """Samples the replay engine trains on this run's idle nodes with its measured rates."""
    import numpy as np

    from parsl_malleable.allocate.curve import ScalingCurve
    from parsl_malleable.replay.calibration import apply_calibration, load_calibration
    from parsl_malleable.replay.engine import replay
    from parsl_malleable.replay.idle import IdleTimeline
    from parsl_malleable.replay.policies import make_policy
    from parsl_malleable.replay.workload import ReplayJob

    busy: dict[str, list[tuple[float, float]]] = {n: [] for n in NAMES}
    for j in natives:
        for node in run.native_nodes[j.index]:
            start = run.native_starts[j.index]
            busy[node].append((start, start + j.run_s))
    node, lo, hi = [], [], []
    for k, name in enumerate(NAMES):
        t = run.t0
        for start, end in sorted(busy[name]):
            if start > t:
                node.append(k)
                lo.append(t)
                hi.append(start)
            t = max(t, end)
        node.append(k)
        lo.append(t)
        hi.append(run.t1)
    timeline = IdleTimeline.build(
        tuple(NAMES), np.array(node), np.array(lo), np.array(hi), "live stream", run.t0, run.t1
    )
    jobs = []
    for name, (_, max_nodes) in JOBS.items():
        rates = run.rates.get(name, {})
        points = [(n, rates[n]) for n in sorted(rates) if n <= max_nodes]
        if not points:
            print(f"# {run.mode}: job {name} has no measured rate; left out of the replay")
            continue
        jobs.append(
            ReplayJob(
                name=name,
                curve=ScalingCurve.from_points(points),
                min_nodes=1,
                max_nodes=max_nodes,
                scale_up_s=0.0,
                scale_down_s=0.0,
                samples=math.inf,
                submit=run.t0,
            )
        )
    if calibration is not None:
        timeline, jobs = apply_calibration(timeline, jobs, load_calibration(calibration))
    result = replay(timeline, jobs, make_policy("ours"), max_jobs=None)
    return sum(j.trained for j in result.jobs)


def report(runs: list[LiveRun], natives: list[Native], calibration: Path | None) -> None:
    if runs[0].mode != "baseline":  # --no-baselines: every native's delay reads as 0
        runs = [dataclasses.replace(runs[0], mode="baseline"), *runs, runs[0]]
    base, *rest = runs
    noise = max(abs(rest[-1].waits[j.index] - base.waits[j.index]) for j in natives)
    print(f"\nnative jobs: {len(natives)}; Slurm's own noise (baseline vs baseline): {noise:.2f} s")
    head = (
        f"{'run':<9} {'mean delay':>10} {'max delay':>9} {'> noise':>7} {'idle node-s':>11} "
        f"{'harvested':>9} {'training':>8} {'of harvest':>10} {'samples':>9} {'replayed':>9} "
        f"{'blocks':>6} {'preempted':>9} {'yields':>6}"
    )
    print(head)
    for run in rest:
        delays = [run.waits[j.index] - base.waits[j.index] for j in natives]
        over = sum(d > noise for d in delays)
        row = f"{run.mode:<9} {statistics.mean(delays):>+10.2f} {max(delays):>+9.2f} "
        if run.mode == "baseline":
            print(row + f"{'-':>7} {run.idle_node_s:>11.0f}")
            continue
        samples = sum(run.samples.values())
        replayed = replayed_samples(run, natives, calibration)
        print(
            row + f"{over:>7d} {run.idle_node_s:>11.0f} "
            f"{run.harvested_node_s / run.idle_node_s:>9.0%} "
            f"{run.training_node_s / run.idle_node_s:>8.0%} "
            f"{run.training_node_s / max(run.harvested_node_s, 1e-9):>10.0%} "
            f"{samples:>9.0f} {replayed:>9.0f} {run.blocks:>6d} {run.preempted:>9d} "
            f"{run.yields:>6d}"
        )
        print(
            f"{'':<9} replay/live samples {replayed / samples:.3f}; rates "
            + "; ".join(
                f"{n}: " + ", ".join(f"{k}->{v:.0f}/s" for k, v in r.items())
                for n, r in run.rates.items()
            )
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=26)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--modes", default="preempt,poll")
    parser.add_argument("--step-s", type=float, default=0.05)
    parser.add_argument("--calibration", type=Path, help="the replay's calibration file")
    parser.add_argument(
        "--no-baselines",
        action="store_true",
        help="skip the two baseline runs (no delays then: only harvest, training, replay)",
    )
    parser.add_argument("--out", type=Path, help="write every run as JSON")
    args = parser.parse_args()
    natives = stream(args.jobs, args.seed)
    os.chdir(REPO)
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-live-training-") as tmp:
        modes = args.modes.split(",")
        for mode in modes if args.no_baselines else ["baseline", *modes, "baseline"]:
            began = time.monotonic()
            if mode == "baseline":
                runs.append(baseline(natives, Path(tmp)))
            else:
                runs.append(harvest(mode, natives, Path(tmp), args.step_s))
            print(f"# {mode}: {time.monotonic() - began:.0f} s", flush=True)
            if args.out:
                args.out.write_text(json.dumps([vars(r) for r in runs], default=str))
    report(runs, natives, args.calibration)


if __name__ == "__main__":
    main()
