"""Node idle -> first training step, phase by phase, on the real local Slurm cluster.

A digits training job (``train_elastic``, paced at ``--step-s`` a step, up to 6 nodes) runs under
a :class:`BackfillProvider` in preemption mode (profile ``slurm-preempt``). Native "holder" jobs
(partition ``batch``, one per node) keep every node busy except the holes the benchmark opens:

1. at the start every holder but the one on ``n1`` is running; ``n1``'s hole is the job's cold
   start (first block, first group). With ``--first-nodes K`` (and ``--cycles 0``), ``n1`` to
   ``nK`` are idle at the start: the K first blocks of a campaign, started at once;
2. each cycle cancels the holders of ``--hole-nodes`` other nodes (default 1; the nodes are idle
   when ``scancel`` returns and squeue no longer lists them), waits until each freed node's rank has
   made its first step, then resubmits the holders there (Slurm preempts the blocks) and waits
   until they run.

Node idle is the moment the holder was gone. The controller's phase log
(``controller.phases``) gives each node's submitted, running (Slurm's start, whole seconds),
worker registered, rank joined and first step. Printed per variant: median and p90 of idle ->
first step, and of each phase, for the cold start and the warm joins.

Variants (``--variants``, each a fresh driver): ``before`` is what main shipped until this
benchmark (5 s polls without the queue watch; no agent warm-up: the rank imports torch, and its
first optimizer imports ``torch._dynamo``, after the node was given to it; the data split by
scikit-learn in every rank; a decision debounce of 0.5 s), except that agents import only their
own module (main imported the whole controller package with them: about 2 s more);
``after`` is the shipped profile and controller now; ``parsl-pool`` is ``after`` with Parsl's
own ``process_worker_pool.py`` instead of ``parsl-malleable-pool``. ``--load``
runs each variant a second time with one CPU-bound process beside it. The driver runs Parsl's
strategy every second, as a campaign does.

Run: ``python benchmarks/bench_block_start.py [--cycles 8] [--load] [--out F]`` (about 3
minutes per variant; ``PM_BENCH_EVENTS=F`` also dumps the job's coordinator events, epochs and
the phase log of each variant to ``F``). ``--calibration F`` writes the replay's calibration
file from the ``after`` run on an idle machine (docs/replay.md).
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO
from bench_live_harvest import slurm, wait_until

NODES = [f"n{i}" for i in range(1, 7)]
# variant -> (provider overrides, core settings, agent warm-up)
VARIANTS: dict[str, dict[str, Any]] = {
    "before": {
        "provider": {"watch_interval_s": None},
        "warm": False,
        "debounce_s": 0.5,
        "env": "PM_DATA_CACHE=none",
    },
    "after": {"provider": {}, "warm": True, "debounce_s": None},
    # As shipped, but the pool started by Parsl's own process_worker_pool.py (no launcher).
    "parsl-pool": {"provider": {}, "warm": True, "debounce_s": None, "htex": "parsl"},
}


def hold(node: str) -> str:
    """Submit a native holder job on ``node``; returns its id."""
    return slurm(
        "sbatch", "--parsable", "--partition=batch", "-N1", f"--nodelist={node}", "-t", "30",
        "--output=/dev/null", f"--job-name=holder-{node}", "--wrap", "sleep 1800",
    ).strip()  # fmt: skip


def holders_running() -> dict[str, str]:
    """node -> holder job id, for holders that run now."""
    out = slurm("squeue", "-h", "-p", "batch", "-t", "R", "-o", "%i %j %N")
    rows = [line.split() for line in out.splitlines() if line.strip()]
    return {r[2]: r[0] for r in rows if len(r) == 3 and r[1].startswith("holder-")}


def listed(job_id: str) -> bool:
    return bool(slurm("squeue", "-h", "-j", job_id, "-o", "%i", check=False).strip())


def burn() -> None:
    """A CPU-bound process: what a busy login node or a neighbour's job does to start-up."""
    x = 0
    while True:
        x = (x * 31 + 7) % 1_000_003


@dataclass
class Sample:
    """One freed node: when it went idle and the controller's stamps after that."""

    node: str
    cold: bool
    idle: float
    phases: dict[str, float] = field(default_factory=dict)

    @property
    def to_first_step(self) -> float | None:
        step = self.phases.get("first_step")
        return None if step is None else step - self.idle


def run_variant(
    name: str, cycles: int, hole_nodes: int, step_s: float, load: bool, first_nodes: int = 1
) -> tuple[list[Sample], list[tuple[str, float]]]:
    """Samples of one variant and the job's rescale pauses (kind, seconds). The first
    ``first_nodes`` nodes are idle from the start (cold starts); cycles free the others."""
    import parsl
    from parsl.config import Config
    from parsl_malleable.apps.digits import train_elastic

    from parsl_malleable.app import malleable_app
    from parsl_malleable.controller import CoreSettings, configure
    from parsl_malleable.controller.phases import BlockPhase, rescale_pauses
    from parsl_malleable.provider import BackfillProvider, harvest_executor

    variant = VARIANTS[name]
    burner = multiprocessing.Process(target=burn, daemon=True) if load else None
    if burner is not None:
        burner.start()
    work = Path(tempfile.mkdtemp(prefix=f"pm-bbs-{name}-"))
    cold_nodes, others = NODES[:first_nodes], NODES[first_nodes:]
    if cycles and not others:
        raise ValueError("cycles need a node held by a native job: lower --first-nodes")
    for node in others:
        hold(node)
    if not wait_until(lambda: set(holders_running()) >= set(others), 60, 0.1):
        raise RuntimeError("the holder jobs did not start: is the cluster idle?")
    provider = BackfillProvider(
        "slurm-preempt",
        script_dir=str(work / "scripts"),
        env={"SLURM_CONF": os.environ.get("SLURM_CONF", "/tmp/pm-slurm/slurm.conf")},
        worker_init=(
            f"export PYTHONPATH={REPO}:$PYTHONPATH OMP_NUM_THREADS=1 {variant.get('env', '')}"
        ),
        max_nodes_per_block=1,
        slots=6,
        **variant["provider"],
    )
    if variant.get("htex") == "parsl":
        from parsl.executors.high_throughput.executor import DEFAULT_LAUNCH_CMD

        htex = harvest_executor(provider, launch_cmd=DEFAULT_LAUNCH_CMD)
    else:
        htex = harvest_executor(provider)
    samples: list[Sample] = []
    pauses: list[tuple[str, float]] = []
    settings = {"debounce_s": variant["debounce_s"]} if variant["debounce_s"] is not None else {}
    # Parsl's strategy every second, as a campaign runs it (campaign/spec.py): it opens the
    # first blocks at its first run.
    config = Config(executors=[htex], run_dir=str(work / "runinfo"), strategy_period=1)
    with parsl.load(config):
        controller = configure(htex, settings=CoreSettings(**settings), warm_agents=variant["warm"])
        app = malleable_app(checkpoint_dir=str(work / "ckpt"), max_nodes=6, checkpoint_every=100)
        # Trains until the driver closes (the job then fails, which is expected here).
        job = app(train_elastic).submit(epochs=10_000, step_delay_s=step_s)

        def first_steps() -> dict[str, float]:
            return {
                e.node: e.time
                for e in controller.phases.events()
                if e.phase is BlockPhase.FIRST_STEP
            }

        def phases_of(sample: Sample) -> dict[str, float]:
            """The stamps of the block that gave the sample's node its first step after it
            went idle (that node's and the block's own)."""
            events = controller.phases.events()
            block = next(
                (
                    e.block
                    for e in events
                    if e.phase is BlockPhase.FIRST_STEP
                    and e.node == sample.node
                    and e.time >= sample.idle - 2
                ),
                None,
            )
            phases: dict[str, float] = {}
            for e in events:
                if e.block == block and e.node in ("", sample.node):
                    phases.setdefault(str(e.phase), e.time)
            return phases

        # cold starts: the first nodes were never held (a campaign's first blocks)
        started = time.time()
        cold = [Sample(node, True, started) for node in cold_nodes]
        if not wait_until(lambda: set(cold_nodes) <= set(first_steps()), 180, 0.1):
            raise RuntimeError(f"{name}: no first step on {cold_nodes}: {controller.state()}")
        samples.extend(cold)
        for cycle in range(cycles):
            freed = [others[(cycle * hole_nodes + i) % len(others)] for i in range(hole_nodes)]
            held = holders_running()
            before = {n: t for n, t in first_steps().items()}
            for node in freed:
                slurm("scancel", held[node])
            wait_until(lambda h=held, f=freed: not any(listed(h[n]) for n in f), 30, 0.05)
            idle = time.time()
            cycle_samples = [Sample(n, False, idle) for n in freed]

            def all_stepped(
                nodes: list[str] = freed, since: dict[str, float] = before, t0: float = idle
            ) -> bool:
                now = first_steps()
                return all(now.get(n, 0) > since.get(n, 0) and now[n] >= t0 - 2 for n in nodes)

            if not wait_until(all_stepped, 120, 0.1):
                print(f"# {name} cycle {cycle}: not every freed node trained within 120 s")
            samples.extend(cycle_samples)
            for node in freed:
                hold(node)
            wait_until(lambda f=freed: set(holders_running()) >= set(f), 90, 0.1)
        # A block preempted before a poll saw it run gets its submission and start stamps
        # from the provider's record once a poll has seen it end: read the phases last.
        poll_s = provider.profile.poll_interval_s
        wait_until(lambda: all("submitted" in phases_of(s) for s in samples), 3 * poll_s, 0.2)
        for sample in samples:
            sample.phases = phases_of(sample)
        pauses.extend(rescale_pauses(job.coordinator.epochs()))
        if os.environ.get("PM_BENCH_EVENTS"):
            Path(os.environ["PM_BENCH_EVENTS"]).write_text(
                json.dumps(
                    {
                        "events": job.coordinator.events(),
                        "epochs": job.coordinator.epochs(),
                        "phases": [vars(e) for e in controller.phases.events()],
                    },
                    default=str,
                )
            )
        provider.close()
    if burner is not None:
        burner.terminate()
    for job in holders_running().values():
        slurm("scancel", job, check=False)
    wait_until(lambda: not slurm("squeue", "-h", "-o", "%i").strip(), 120, 0.1)
    return samples, pauses


def summary(samples: list[Sample]) -> dict[str, Any]:
    def stats(values: list[float]) -> dict[str, float]:
        if not values:
            return {}
        ordered = sorted(values)
        p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
        return {"median": statistics.median(ordered), "p90": p90, "n": len(ordered)}

    phases = ["submitted", "running", "worker", "joined", "first_step"]
    totals = [s.to_first_step for s in samples if s.to_first_step is not None]
    out: dict[str, Any] = {"idle->first step": stats(totals)}
    marks = ["idle", *phases]
    for a, b in itertools.pairwise(marks):
        gaps = []
        for s in samples:
            t = {"idle": s.idle, **s.phases}
            if a in t and b in t:
                gaps.append(t[b] - t[a])
        out[f"{a}->{b}"] = stats(gaps)
    return out


def print_variant(label: str, samples: list[Sample], pauses: list[tuple[str, float]]) -> None:
    """One table per variant: median and p90 of each phase, cold start and warm joins apart."""
    print(f"\n{label}: {len(samples)} nodes ({sum(s.cold for s in samples)} cold starts)")
    print(f"{'phase':<24} {'median s':>9} {'p90 s':>7} {'n':>3}")
    for phase, row in summary(samples).items():
        if row:
            print(f"{phase:<24} {row['median']:>9.2f} {row['p90']:>7.2f} {row['n']:>3d}")
    for kind, cold in (("cold", True), ("warm", False)):
        row = summary([s for s in samples if s.cold is cold])["idle->first step"]
        if row:
            print(f"{'idle->first step, ' + kind:<24} {row['median']:>9.2f} {row['p90']:>7.2f}")
    for kind in ("up", "down"):
        values = [p for k, p in pauses if k == kind]
        if values:
            print(f"rescale pause {kind:<10} {statistics.median(values):>9.2f}  n={len(values)}")


def write_calibration(path: Path, samples: list[Sample], pauses: list[tuple[str, float]]) -> None:
    """The replay's costs from the measured run: warm joins' idle -> first step, pauses."""
    from parsl_malleable.replay.calibration import Calibration, save_calibration

    starts = [s.to_first_step for s in samples if not s.cold and s.to_first_step is not None]
    ups = [p for k, p in pauses if k == "up"] or [0.0]
    downs = [p for k, p in pauses if k == "down"] or [0.0]
    calibration = Calibration(
        node_start_s=statistics.median(starts),
        scale_up_s=statistics.median(ups),
        scale_down_s=statistics.median(downs),
        measured_by="benchmarks/bench_block_start.py (local Slurm, preemption mode, idle machine)",
        samples=len(starts),
    )
    save_calibration(calibration, path)
    print(f"wrote {path}: {calibration}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cycles", type=int, default=8)
    parser.add_argument("--hole-nodes", type=int, default=1)
    parser.add_argument("--step-s", type=float, default=0.05)
    parser.add_argument("--variants", default="before,after")
    parser.add_argument("--load", action="store_true")
    parser.add_argument(
        "--first-nodes", type=int, default=1, help="nodes idle at the start (cold starts)"
    )
    parser.add_argument("--out", help="write every sample as JSON")
    parser.add_argument("--calibration", help="write the replay's calibration file here")
    args = parser.parse_args()
    results: dict[str, Any] = {}
    for load in [False, True] if args.load else [False]:
        for name in args.variants.split(","):
            label = f"{name}{' +load' if load else ''}"
            samples, pauses = run_variant(
                name, args.cycles, args.hole_nodes, args.step_s, load, args.first_nodes
            )
            results[label] = {
                "summary": summary(samples),
                "samples": [s.__dict__ for s in samples],
                "pauses": pauses,
            }
            print_variant(label, samples, pauses)
            if args.calibration and label == "after":
                write_calibration(Path(args.calibration), samples, pauses)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
