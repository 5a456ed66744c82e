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

``--scheduler pbs`` runs it on the live OpenPBS server (``scripts/pbs-server start``, vnodes
vn1..vn6): the natives go to ``workq`` as ``pbsnative`` (``select=N:ncpus=1``,
``place=scatter``, ``walltime=`` the limit), the jobs train on blocks of profile ``pbs-test``
(queue ``backfill``, polling mode: PBS here preempts nothing; 3 s polls, a block per vnode), one
mode: ``poll``. There the three jobs are a campaign of ``--epochs`` epochs each (default 30; on
Slurm they train until the driver closes, ``--epochs 0``); after the last native ends they get
``--finish-s`` more seconds, and it prints how many were done by then, besides what
``bench_live_harvest.py`` prints on PBS: block jobs left after close, natives that waited for a
block.
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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO
from bench_live_harvest import (
    NODES,
    SITES,
    BlockWaits,
    Native,
    Site,
    SlurmSite,
    _overlap,
    _start_of,
    block_waits,
    close_and_check,
    describe_waits,
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
# PBS: polling mode, the profile as it is (a block per vnode, 6 slots).
PBS_MODES: dict[str, tuple[str, dict[str, Any]]] = {"poll": ("pbs-test", {})}
MODES_OF = {"slurm": MODES, "pbs": PBS_MODES}
DEFAULT_MODES = {"slurm": "preempt,poll", "pbs": "poll"}
DEFAULT_EPOCHS = {"slurm": 0, "pbs": 30}  # 0: train until the driver closes


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
    # Printed on PBS only:
    natives_done: int = 0
    blocks_left: list[str] = field(default_factory=list)
    gone_after_s: float | None = None
    block_waits: BlockWaits | None = None
    jobs_done: dict[str, float] = field(default_factory=dict)  # job -> done, s after t0
    jobs_failed: dict[str, str] = field(default_factory=dict)
    # Each node's start-up phases (NodeStartup.gaps) for blocks submitted after t0.
    startup_phases: list[dict[str, float | None]] = field(default_factory=list)
    # Each block: submitted, start, ended (s after t0), nodes, walltime, how it ended; kept in
    # raw records so a replay's disagreement with live can be traced to the blocks.
    block_history: list[dict[str, Any]] = field(default_factory=list)


def epoch_samples(epoch: dict[str, Any]) -> float:
    """Samples one membership epoch trained: its steps x ``BATCH``, the apps' global batch (a
    step of N ranks trains BATCH samples, BATCH / N on each: ``apps/digits.py``)."""
    return (epoch["last_step"] - (epoch.get("start_step") or 0)) * BATCH


def block_walltime_s(site_key: str, mode: str) -> float:
    """The walltime the run's provider gave its blocks (its profile's ``max_walltime_s``):
    what a replay of the run serves nodes in (the replay's ``block_walltime_s``)."""
    from parsl_malleable.harvest.site_profile import load_profile

    return load_profile(MODES_OF[site_key][mode][0]).max_walltime_s


def samples_trained(epochs: list[dict[str, Any]], until: float) -> float:
    """Samples the epochs trained (:func:`epoch_samples`), counted up to ``until``. (Counting
    BATCH per rank, as this did before, doubled every two-node step and made a second node
    look 3.7x as fast as the first.)"""
    total = 0.0
    for e in epochs:
        if e.get("resumed_at") is None or e.get("last_step") is None or e["resumed_at"] > until:
            continue
        total += epoch_samples(e)
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
        done[n] = done.get(n, 0.0) + epoch_samples(e)
        spent[n] = spent.get(n, 0.0) + seconds
    return {n: done[n] / spent[n] for n in sorted(done)}


def submit_stream(
    natives: list[Native], run_dir: Path, site: Site
) -> tuple[float, dict[int, float], dict[int, str]]:
    submitted: dict[int, float] = {}
    ids: dict[int, str] = {}
    t0 = time.time()
    for job in natives:
        delay = t0 + job.at - time.time()
        if delay > 0:
            time.sleep(delay)
        submitted[job.index] = time.time()
        ids[job.index] = site.submit_native(job, run_dir / f"native-{job.index}")
    return t0, submitted, ids


def stream_span_s(natives: list[Native]) -> float:
    """Seconds from the stream's first arrival to its last native's planned end."""
    return max(j.at + j.run_s for j in natives)


def natives_done(site: Site) -> bool:
    return not any(n.startswith("native-") for n in site.queue_names())


def read_natives(
    natives: list[Native], run_dir: Path, ids: dict[int, str], site: Site
) -> tuple[dict[int, float], dict[int, list[str]]]:
    starts = {j.index: _start_of(run_dir / f"native-{j.index}") for j in natives}
    return starts, site.native_nodes(ids, run_dir)


def idle_node_seconds(natives: list[Native], starts: dict[int, float], t0: float) -> float:
    t1 = max(starts[j.index] + j.run_s for j in natives)
    busy = sum(
        j.nodes * _overlap(starts[j.index], starts[j.index] + j.run_s, (t0, t1)) for j in natives
    )
    return NODES * (t1 - t0) - busy


def baseline(natives: list[Native], work: Path, site: Site | None = None) -> LiveRun:
    site = site or SlurmSite()
    if not wait_until(site.machine_idle, 120):
        raise RuntimeError("the cluster did not become idle; is another job running?")
    run_dir = Path(tempfile.mkdtemp(dir=work, prefix="baseline-"))
    site.prepare(run_dir)
    t0, submitted, ids = submit_stream(natives, run_dir, site)
    wait_until(lambda: natives_done(site), 600)
    starts, nodes = read_natives(natives, run_dir, ids, site)
    t1 = max(starts[j.index] + j.run_s for j in natives)
    run = LiveRun(
        "baseline",
        {i: starts[i] - submitted[i] for i in starts},
        nodes,
        starts,
        t0,
        t1,
        idle_node_seconds(natives, starts, t0),
    )
    if site.reports_leftovers:
        run.natives_done = site.natives_finished(ids)
    return run


def harvest(
    mode: str,
    natives: list[Native],
    work: Path,
    step_s: float,
    site: Site | None = None,
    epochs: int = 0,
    finish_s: float = 0.0,
    jobs_spec: dict[str, tuple[tuple[int, ...], int]] | None = None,
    lead: bool = True,
) -> LiveRun:
    """One harvesting run of ``natives`` in ``mode``: the training jobs ``jobs_spec`` (default
    :data:`JOBS`: name -> (hidden layers, max nodes)). With ``lead`` the stream starts once the
    jobs train on the whole machine; without, the stream and the jobs start together (``t0``:
    the jobs' submission)."""
    import parsl
    from parsl.config import Config
    from parsl_malleable.apps.digits import train_elastic

    from parsl_malleable.app import malleable_app
    from parsl_malleable.controller import configure
    from parsl_malleable.controller.phases import percentile
    from parsl_malleable.harvest.states import CancelReason
    from parsl_malleable.provider import BackfillProvider, harvest_executor

    site = site or SlurmSite()
    spec = JOBS if jobs_spec is None else jobs_spec
    if not wait_until(site.machine_idle, 120):
        raise RuntimeError("the cluster did not become idle; is another job running?")
    run_dir = Path(tempfile.mkdtemp(dir=work, prefix=f"{mode}-"))
    site.prepare(run_dir)
    profile, overrides = MODES_OF[site.key][mode]
    init = f"export PYTHONPATH={REPO}:$PYTHONPATH OMP_NUM_THREADS=1"
    provider = BackfillProvider(
        profile,
        label=site.label,
        script_dir=str(run_dir / "scripts"),
        env=site.provider_env(),
        worker_init="\n".join(filter(None, [site.worker_init(), init])),
        **overrides,
    )
    htex = harvest_executor(provider)
    done_at: dict[str, float] = {}
    # Parsl's strategy opens the first blocks at its first run after load: every second, as a
    # campaign runs it (campaign/spec.py), not Parsl's default 5 s, which held the first blocks
    # back 4-5 s in the site run of 2026-12-05.
    config = Config(executors=[htex], run_dir=str(run_dir / "runinfo"), strategy_period=1)
    with parsl.load(config):
        controller = configure(htex)
        jobs = {}
        submitted_jobs_at = time.time()
        for seed, (name, (hidden, max_nodes)) in enumerate(spec.items()):
            app = malleable_app(
                checkpoint_dir=str(run_dir / name), max_nodes=max_nodes, checkpoint_every=200
            )(train_elastic)
            # Without a campaign size (epochs 0): trains until the driver closes (the jobs
            # then fail, which is expected here).
            jobs[name] = app.submit(
                epochs=epochs or 100_000, hidden=hidden, seed=seed, step_delay_s=step_s, name=name
            )
            jobs[name].future.add_done_callback(
                lambda _f, n=name: done_at.setdefault(n, time.time())
            )

        def whole_machine_trains() -> bool:
            # (A campaign's job may end first: then the machine the others can use.)
            wanted = sum(spec[n][1] for n, j in jobs.items() if not j.future.done())
            running = sum(j.coordinator.running_world_size() for j in jobs.values())
            return running >= min(NODES, wanted)

        if lead and not wait_until(whole_machine_trains, 180, 0.5):
            print(f"# {mode}: the jobs did not train on all {NODES} nodes before the stream")
        training_before = controller.phases.training_s() if lead else 0.0
        before = {
            n: samples_trained(j.coordinator.epochs(), time.time()) if lead else 0.0
            for n, j in jobs.items()
        }
        t0, submitted, ids = submit_stream(natives, run_dir, site)
        if not lead:
            t0 = submitted_jobs_at
        wait_until(lambda: natives_done(site), stream_span_s(natives) + 600, 0.25)
        starts, nodes = read_natives(natives, run_dir, ids, site)
        t1 = max(starts[j.index] + j.run_s for j in natives)
        # The phase log is read each controller tick (0.25 s): one more tick, then count.
        time.sleep(max(0.0, t1 + 2 * controller.tick_s - time.time()))
        training = controller.phases.training_s() - training_before
        epochs_of = {n: j.coordinator.epochs() for n, j in jobs.items()}
        rows = [
            s for s in controller.phases.startups() if s.submitted is not None and s.submitted >= t0
        ]
        startups = [s.first_step - s.submitted for s in rows if s.submitted is not None]
        history = provider.history()
        if epochs and finish_s > 0:
            # The campaign's jobs get finish_s more to end (on whatever the machine gives).
            wait_until(lambda: all(j.future.done() for j in jobs.values()), finish_s, 0.5)
        finished = {n for n, j in jobs.items() if j.future.done()}
        failed = {
            n: repr(jobs[n].future.exception())[:120]
            for n in finished
            if jobs[n].future.exception() is not None
        }
        if site.reports_leftovers:
            left, gone_s = close_and_check(provider, site, mode)
        else:
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
        samples={n: samples_trained(e, t1) - before[n] for n, e in epochs_of.items()},
        rates={n: per_node_rates(e) for n, e in epochs_of.items()},
        epochs=epochs_of,
        blocks=sum(r.start is not None for r in history),
        preempted=sum(r.cancel_reason is None and "preempted" in r.message for r in history),
        yields=sum(r.cancel_reason is CancelReason.YIELD for r in history),
        startup_s=startups,
        startup_phases=[s.gaps() for s in rows],
        block_history=[block_row(r, t0) for r in history],
    )
    if site.reports_leftovers:
        run.natives_done = site.natives_finished(ids)
        run.blocks_left, run.gone_after_s = left, gone_s
        grace = provider.profile.yield_grace_s
        run.block_waits = block_waits(history, natives, submitted, starts, nodes, grace)
    if epochs:
        run.jobs_done = {n: done_at[n] - t0 for n in sorted(finished - set(failed))}
        run.jobs_failed = failed
    if startups:
        print(
            f"# {mode}: block submitted -> first step: median {statistics.median(startups):.2f} s,"
            f" p90 {percentile(startups, 0.9):.2f} s over {len(startups)} nodes"
        )
    wait_until(site.machine_idle, 120)
    return run


def block_row(record: Any, t0: float) -> dict[str, Any]:
    """One block's :class:`JobRecord` as plain figures, times in seconds after ``t0``."""

    def since(t: float | None) -> float | None:
        return None if t is None else round(t - t0, 3)

    return {
        "block": record.block_id,
        "nodes": list(record.nodes or record.planned_nodes),
        "walltime_s": record.walltime_s,
        "window_end": since(record.window_end),
        "submitted": since(record.submitted_at),
        "start": since(record.start),
        "ended": since(record.ended_at),
        "cancel": record.cancel_reason.name if record.cancel_reason else None,
        "end_state": str(record.end_state) if record.end_state is not None else None,
        "message": record.message[:80],
    }


def live_timeline(
    run: LiveRun, natives: list[Native], names: Sequence[str], end: float, source: str
) -> Any:
    """The idle timeline of ``names`` from ``run.t0`` to ``end``: every node idle except while
    a native ran on it (its live start and nodes)."""
    import numpy as np

    from parsl_malleable.replay.idle import IdleTimeline

    busy: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    for j in natives:
        for node in run.native_nodes[j.index]:
            start = run.native_starts[j.index]
            busy[node].append((start, start + j.run_s))
    node, lo, hi = [], [], []
    for k, name in enumerate(names):
        t = run.t0
        for start, stop in sorted(busy[name]):
            if start > t:
                node.append(k)
                lo.append(t)
                hi.append(start)
            t = max(t, stop)
        node.append(k)
        lo.append(t)
        hi.append(end)
    return IdleTimeline.build(
        tuple(names), np.array(node), np.array(lo), np.array(hi), source, run.t0, end
    )


def measured_jobs(
    run: LiveRun, spec: dict[str, tuple[tuple[int, ...], int]], samples: float
) -> list[Any]:
    """The jobs of ``spec`` as replay jobs submitted at ``run.t0``, each ``samples`` long, at
    the per-node rates measured live (a job with none is left out, and said so)."""
    from parsl_malleable.allocate.curve import ScalingCurve
    from parsl_malleable.replay.workload import ReplayJob

    jobs = []
    for name, (_, max_nodes) in spec.items():
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
                samples=samples,
                submit=run.t0,
            )
        )
    return jobs


def replayed_samples(
    run: LiveRun,
    natives: list[Native],
    calibration: Path | None,
    names: Sequence[str] = NAMES,
    walltime_s: float | None = None,
) -> float:
    """Samples the replay engine trains on this run's idle nodes (``names``) with its measured
    rates; ``walltime_s``: served in blocks of that walltime, as the run's provider served
    them (the replay's ``block_walltime_s``)."""
    from parsl_malleable.replay.calibration import apply_calibration, load_calibration
    from parsl_malleable.replay.engine import replay
    from parsl_malleable.replay.policies import make_policy

    timeline = live_timeline(run, natives, names, run.t1, "live stream")
    jobs = measured_jobs(run, JOBS, math.inf)
    if calibration is not None:
        timeline, jobs = apply_calibration(timeline, jobs, load_calibration(calibration))
    result = replay(timeline, jobs, make_policy("ours"), max_jobs=None, block_walltime_s=walltime_s)
    return sum(j.trained for j in result.jobs)


def report(
    runs: list[LiveRun], natives: list[Native], calibration: Path | None, site: Site | None = None
) -> None:
    site = site or SlurmSite()
    measured = runs
    if runs[0].mode != "baseline":  # --no-baselines: every native's delay reads as 0
        runs = [dataclasses.replace(runs[0], mode="baseline"), *runs, runs[0]]
    base, *rest = runs
    noise = max(abs(rest[-1].waits[j.index] - base.waits[j.index]) for j in natives)
    print(
        f"\nnative jobs: {len(natives)}; {site.name}'s own noise (baseline vs baseline): "
        f"{noise:.2f} s"
    )
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
        walltime = block_walltime_s(site.key, run.mode)
        replayed = replayed_samples(run, natives, calibration, site.nodes, walltime)
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
    if site.reports_leftovers:
        report_campaign(measured, natives, base)


def report_campaign(runs: list[LiveRun], natives: list[Native], base: LiveRun) -> None:
    """Natives done, the campaign's jobs done, blocks left, waits for blocks (printed for PBS);
    delays against ``base``."""
    for run in runs:
        line = f"{run.mode}: natives done {run.natives_done} of {len(natives)}"
        if run.mode != "baseline":
            done = ", ".join(f"{n} at +{t:.0f} s" for n, t in run.jobs_done.items()) or "none"
            line += (
                f"; training jobs done {len(run.jobs_done)} of {len(JOBS)} ({done}; the last "
                f"native ended at +{run.t1 - run.t0:.0f} s)"
            )
            if run.jobs_failed:
                line += f"; failed: {run.jobs_failed}"
            left = ", ".join(run.blocks_left) if run.blocks_left else "none"
            gone = f"{run.gone_after_s:.1f}" if run.gone_after_s is not None else "?"
            line += f"; block jobs left unfinished after close: {left} (all gone {gone} s after)"
        print(line)
        if run.block_waits is not None:
            waits = run.block_waits
            waits.delays = [run.waits[i] - base.waits[i] for i in waits.jobs]
            print(describe_waits(run.mode, waits, len(natives)))
    print(f"block jobs of ours left behind: {sum(len(r.blocks_left) for r in runs)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scheduler", choices=sorted(SITES), default="slurm")
    parser.add_argument("--jobs", type=int, default=26)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--modes", default=None, help="default: preempt,poll on slurm, poll on pbs")
    parser.add_argument("--step-s", type=float, default=0.05)
    parser.add_argument(
        "--epochs",
        type=int,
        default=None,
        help="epochs of each training job (0: until the driver closes; default 0 on slurm, "
        "30 on pbs)",
    )
    parser.add_argument(
        "--finish-s",
        type=float,
        default=120.0,
        help="with --epochs: seconds the jobs get after the last native ends",
    )
    parser.add_argument("--calibration", type=Path, help="the replay's calibration file")
    parser.add_argument(
        "--no-baselines",
        action="store_true",
        help="skip the two baseline runs (no delays then: only harvest, training, replay)",
    )
    parser.add_argument("--out", type=Path, help="write every run as JSON")
    args = parser.parse_args()
    site = SITES[args.scheduler]()
    if why := site.missing():
        sys.exit(why)
    epochs = DEFAULT_EPOCHS[args.scheduler] if args.epochs is None else args.epochs
    natives = stream(args.jobs, args.seed)
    os.chdir(REPO)
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-live-training-") as tmp:
        modes = (args.modes or DEFAULT_MODES[args.scheduler]).split(",")
        for mode in modes:
            if mode not in MODES_OF[args.scheduler]:
                sys.exit(f"unknown mode {mode!r}; one of {', '.join(MODES_OF[args.scheduler])}")
        for mode in modes if args.no_baselines else ["baseline", *modes, "baseline"]:
            began = time.monotonic()
            if mode == "baseline":
                runs.append(baseline(natives, Path(tmp), site))
            else:
                runs.append(
                    harvest(mode, natives, Path(tmp), args.step_s, site, epochs, args.finish_s)
                )
            print(f"# {mode}: {time.monotonic() - began:.0f} s", flush=True)
            if args.out:
                args.out.write_text(json.dumps([vars(r) for r in runs], default=str))
    report(runs, natives, args.calibration, site)
    if any(r.blocks_left for r in runs):
        sys.exit("block jobs of ours were left behind after close (cancelled since)")


if __name__ == "__main__":
    main()
