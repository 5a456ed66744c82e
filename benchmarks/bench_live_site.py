"""Training at a site's time scale on the real local Slurm cluster: Summit's own holes, 1:1.

The other live benchmarks squeeze a site's day into minutes (natives of 5-40 s), so that a few
seconds of start-up weigh what minutes would at a site. Here the native stream is a window of
the Summit idle-node trace (``summit-idle-intervals-2021-02``) replayed in real time on the six
nodes of the local cluster: every busy interval of six Summit nodes inside the window is a
native job that arrives when it started on Summit and runs as long (one clipped at the window's
end runs to it; one busy when the window opens arrives at once), with a time limit of 1.5x its
run rounded up to a minute; busy intervals of several nodes that start and end together are one
job of that many nodes. The window and its nodes are chosen by a written rule,
not by hand: among windows of ``--minutes`` starting every 10 minutes in the trace's first
three days (after its first hour), on each window's six nodes with the most hole ends, those
30-70% idle with at least 8 native jobs; of them the one whose holes (whole, not clipped) have
the median length nearest the trace's own (475 s). Holes are never shortened.

Six digits MLPs (``--epochs`` epochs each, ``--step-s`` a step on one node) train from the
first second (no lead: the stream and the jobs start together, ``t0``), in each of:

* ``baseline`` (twice, first and last: no training; the difference is Slurm's own noise);
* ``poll`` / ``preempt``: the controller on a :class:`BackfillProvider` (as in
  ``bench_live_training.py``), each job elastic on up to 2 nodes;
* ``scavenger``: the submitit-style baseline, what users run today: each job a one-node batch
  job on the preemptable partition ``scavenger`` (``scavenger_trial.py``) that checkpoints
  every 200 steps and on Slurm's preemption notice, and is submitted again by this driver the
  moment it ends unfinished (submitit requeues in place, which Slurm then holds about 120 s:
  this baseline is not charged that hold).

Printed per run: native delay (wait minus the first baseline's) against the noise; idle
node-seconds of the window; node-seconds in training steps (ours: the controller's phase log;
scavenger: each run's first to last checkpointed step) as a share of them; each job's time to
result (its last epoch done, from ``t0``) and the last; start-up per phase (median); blocks,
preemptions, restarts. Then each harvesting run replayed on a simulated clock (its natives' own
starts and nodes, the rates measured live, the replay's default runtime physics) and its time
to result and samples trained beside the live ones.

Run: ``python benchmarks/bench_live_site.py [--minutes 20] [--modes poll,preempt,scavenger]
[--out F]`` (each run lasts the window plus what the jobs still need; about 1 h 45 min with the
defaults). ``--list`` prints the chosen window and its natives and exits. ``--out F`` keeps each
run's raw record too, and ``--replay-from F`` reprints the report from it, replays included,
without the cluster: a change to the replay is checked against a recorded live run in seconds.
``benchmarks/records/site-2026-12-05.json`` is the run of docs/benchmarks.md (poll, preempt).
"""

from __future__ import annotations

import argparse
import dataclasses
import getpass
import json
import math
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO
from bench_live_harvest import NODES, Native, SlurmSite, slurm, wait_until
from bench_live_training import (
    BATCH,
    NAMES,
    LiveRun,
    baseline,
    block_walltime_s,
    harvest,
    idle_node_seconds,
    live_timeline,
    measured_jobs,
    natives_done,
    per_node_rates,
    read_natives,
    samples_trained,
    stream_span_s,
    submit_stream,
)

# name -> (hidden layers, most nodes ours gives it): six jobs wanting 12 nodes on 6.
SITE_JOBS: dict[str, tuple[tuple[int, ...], int]] = {
    "h64": ((64,), 2),
    "h128": ((128,), 2),
    "h256": ((256,), 2),
    "h64x2": ((64, 64), 2),
    "h128x2": ((128, 128), 2),
    "h256x2": ((256, 256), 2),
}
TRACE_MEDIAN_HOLE_S = 475.0  # the whole Summit trace's median idle interval
LIMIT_FACTOR = 1.5
FIRST_S, SEARCH_S, EVERY_S = 3600.0, 3 * 86400.0, 600.0
IDLE_SHARE = (0.3, 0.7)
MIN_NATIVES = 8


@dataclass(frozen=True)
class Window:
    """The chosen window of the Summit trace (seconds from its start) and its nodes."""

    start_s: float
    length_s: float
    nodes: tuple[str, ...]
    idle_share: float
    median_hole_s: float


def _natives_of(tl: Any, six: np.ndarray, w0: float, w1: float) -> list[Native]:
    """The natives of nodes ``six`` in ``[w0, w1)``: each busy interval, those of several nodes
    that start and end together as one job of that many nodes, by arrival."""
    busy: list[tuple[float, float]] = []
    for k in six:
        mine = (tl.node == k) & (tl.end > w0) & (tl.start < w1)
        holes = sorted(
            (max(s, w0), min(e, w1)) for s, e in zip(tl.start[mine], tl.end[mine], strict=True)
        )
        t = w0
        for s, e in [*holes, (w1, w1)]:
            if s > t:  # busy from t to s
                busy.append((float(t - w0), float(s - t)))
            t = max(t, e)
    return [
        Native(i, at, nodes, run_s, max(1, math.ceil(LIMIT_FACTOR * run_s / 60.0)))
        for i, ((at, run_s), nodes) in enumerate(sorted(Counter(busy).items()))
    ]


def summit_stream(minutes: float) -> tuple[Window, list[Native]]:
    """The window the module docstring's rule picks, and its natives (by arrival)."""
    from parsl_malleable.replay.scenario import summit_timeline

    tl = summit_timeline()
    length = minutes * 60.0
    best: tuple[float, Window, list[Native]] | None = None
    for w0 in np.arange(tl.t0 + FIRST_S, tl.t0 + SEARCH_S, EVERY_S):
        w1 = w0 + length
        inside = (tl.end > w0) & (tl.start < w1)
        node = tl.node[inside]
        arrivals = np.bincount(node, weights=(tl.end[inside] < w1), minlength=len(tl.names))
        six = np.lexsort((np.arange(len(arrivals)), -arrivals))[:NODES]
        mine = np.isin(node, six)
        lo = np.maximum(tl.start[inside][mine], w0)
        hi = np.minimum(tl.end[inside][mine], w1)
        share = float((hi - lo).sum() / (NODES * length))
        if not IDLE_SHARE[0] <= share <= IDLE_SHARE[1]:
            continue
        natives = _natives_of(tl, six, w0, w1)
        if len(natives) < MIN_NATIVES:
            continue
        median = float(np.median(tl.end[inside][mine] - tl.start[inside][mine]))
        score = abs(median - TRACE_MEDIAN_HOLE_S)
        if best is None or score < best[0]:
            names = tuple(tl.names[k] for k in six)
            window = Window(float(w0 - tl.t0), length, names, share, median)
            best = (score, window, natives)
    if best is None:
        raise SystemExit(f"no {minutes}-minute window of the trace meets the rule")
    return best[1], best[2]


# ----------------------------------------------------------------- submitit-style baseline


@dataclass
class Trial:
    name: str
    hidden: tuple[int, ...]
    seed: int
    job_id: str = ""
    submitted: float = 0.0
    runs: int = 0
    done_at: float | None = None


def _submit_trial(trial: Trial, run_dir: Path, epochs: int, step_s: float) -> None:
    script = run_dir / "trial.sh"
    hidden = [str(h) for h in trial.hidden]
    trial.job_id = slurm(
        "sbatch", "--parsable", "--partition=scavenger", "-N1", "-t60",
        f"--output={run_dir}/{trial.name}-%j.out", f"--job-name=trial-{trial.name}",
        str(script), "--name", trial.name, "--dir", str(run_dir), "--hidden", *hidden,
        "--epochs", str(epochs), "--seed", str(trial.seed), "--step-s", str(step_s),
    ).strip()  # fmt: skip
    trial.submitted = time.time()
    trial.runs += 1


def scavenger(
    natives: list[Native], work: Path, epochs: int, step_s: float, finish_s: float
) -> tuple[LiveRun, dict[str, Any]]:
    """The submitit-style baseline run (see the module docstring)."""
    site = SlurmSite()
    if not wait_until(site.machine_idle, 120):
        raise RuntimeError("the cluster did not become idle; is another job running?")
    run_dir = Path(tempfile.mkdtemp(dir=work, prefix="scavenger-"))
    (run_dir / "trial.sh").write_text(
        f"#!/bin/bash\nexport PYTHONPATH={REPO}:$PYTHONPATH OMP_NUM_THREADS=1\n"
        f'exec {sys.executable} -u {REPO / "benchmarks" / "scavenger_trial.py"} "$@"\n'
    )
    (run_dir / "trial.sh").chmod(0o700)
    trials = [
        Trial(name, hidden, seed) for seed, (name, (hidden, _)) in enumerate(SITE_JOBS.items())
    ]
    submits: dict[str, float] = {}  # job id -> when it was submitted
    t0 = time.time()
    for trial in trials:
        _submit_trial(trial, run_dir, epochs, step_s)
        submits[trial.job_id] = trial.submitted
    stream: dict[str, Any] = {}

    def submit() -> None:
        stream["t0"], stream["submitted"], stream["ids"] = submit_stream(natives, run_dir, site)

    thread = threading.Thread(target=submit, daemon=True)
    thread.start()
    deadline = time.time() + stream_span_s(natives) + finish_s
    user = getpass.getuser()
    while time.time() < deadline and any(t.done_at is None for t in trials):
        queued = set(slurm("squeue", "-h", "-u", user, "-o", "%i").split())
        for trial in trials:
            if trial.done_at is not None or trial.job_id in queued:
                continue
            done = run_dir / f"{trial.name}.done"
            if done.exists():
                trial.done_at = json.loads(done.read_text())["at"]
            else:  # ended unfinished (preempted): again, at once
                _submit_trial(trial, run_dir, epochs, step_s)
                submits[trial.job_id] = trial.submitted
        time.sleep(1.0)
    thread.join()
    leftover = [t.job_id for t in trials if t.done_at is None]
    site.cancel(leftover)
    wait_until(lambda: natives_done(site), stream_span_s(natives) + 600, 0.5)
    starts, nodes = read_natives(natives, run_dir, stream["ids"], site)
    t1 = max(starts[j.index] + j.run_s for j in natives)
    segments = [json.loads(p.read_text()) for p in run_dir.glob("*.seg-*.json")]
    training = sum(
        max(0.0, min(s["last_step_at"], t1) - max(s["first_step"], t0))
        for s in segments
        if s["first_step"] is not None and s["last_step_at"] is not None
    )
    samples = sum((s["step"] - s["start_step"]) * BATCH for s in segments)
    run = LiveRun(
        "scavenger",
        {i: starts[i] - stream["submitted"][i] for i in starts},
        nodes,
        starts,
        t0,
        t1,
        idle_node_seconds(natives, starts, t0),
        training_node_s=training,
        samples={"all": samples},
        blocks=len(submits),
        preempted=sum(t.runs for t in trials) - len(trials),
        jobs_done={t.name: t.done_at - t0 for t in trials if t.done_at is not None},
    )
    # Cold start per run: submitted -> its Python started -> imports and data -> first step.
    phases = []
    for s in segments:
        if s["first_step"] is None or s["job"] not in submits:
            continue
        phases.append(
            {
                "submitted->started": s["started"] - submits[s["job"]],
                "started->ready": s["ready"] - s["started"],
                "ready->first step": s["first_step"] - s["ready"],
                "started->first step": s["first_step"] - s["started"],
            }
        )
    run.startup_phases = phases
    wait_until(site.machine_idle, 120)
    return run, {"runs": {t.name: t.runs for t in trials}}


# ----------------------------------------------------------------- replay of a live run


def replay_of(
    run: LiveRun, natives: list[Native], epochs: int, *, as_live: bool = True
) -> dict[str, float]:
    """The run's natives (their live starts and nodes) replayed on a simulated clock with the
    same six jobs, at the per-node rates measured live: each job's time to result from ``t0``
    (missing: not done by the end).

    ``as_live``: the nodes are served as the run's provider served them, in blocks of its
    profile's ``max_walltime_s`` whose deadlines the controller plans with (the replay's
    ``block_walltime_s``); else as the replay's own default, windows predicted from the
    history of idle intervals."""
    from parsl_malleable.apps.digits import load_data

    from parsl_malleable.replay.engine import replay
    from parsl_malleable.replay.policies import make_policy

    end = run.t0 + max(max(run.jobs_done.values(), default=0.0), run.t1 - run.t0) + 3600.0
    timeline = live_timeline(run, natives, NAMES, end, "live site stream")
    per_epoch = len(load_data()[0])  # the digits training split
    jobs = measured_jobs(run, SITE_JOBS, float(epochs * per_epoch))
    walltime = block_walltime_s(SlurmSite.key, run.mode) if as_live else None
    result = replay(timeline, jobs, make_policy("ours"), max_jobs=None, block_walltime_s=walltime)
    return {j.name: j.finished - run.t0 for j in result.jobs if j.finished is not None}


# ----------------------------------------------------------------- raw records


def raw_record(natives: list[Native], runs: list[LiveRun], epochs: int) -> dict[str, Any]:
    """What the report and the replays are computed from, for ``--replay-from``: a 1:1 run
    takes almost two hours, a change to the replay's model should not need another."""
    return {
        "epochs": epochs,
        "natives": [dataclasses.asdict(j) for j in natives],
        "runs": [dataclasses.asdict(r) for r in runs],
    }


def load_raw(path: Path) -> tuple[list[Native], list[LiveRun], int]:
    """The natives, runs and epochs :func:`raw_record` wrote into ``path`` (JSON turned the
    integer keys into strings; they are turned back)."""
    raw = json.loads(path.read_text())["raw"]
    natives = [Native(**j) for j in raw["natives"]]
    runs = []
    for fields in raw["runs"]:
        for name in ("waits", "native_nodes", "native_starts"):
            fields[name] = {int(k): v for k, v in fields[name].items()}
        # Rates and samples are derived from the epochs: derived again, so that a record
        # written before a fix to their counting (samples_trained) is read as it is now.
        fields["rates"] = {job: per_node_rates(e) for job, e in fields["epochs"].items()}
        fields["samples"] = {
            job: samples_trained(e, fields["t1"]) for job, e in fields["epochs"].items()
        }
        fields["block_waits"] = None  # printed on PBS only; not part of this report
        runs.append(LiveRun(**fields))
    return natives, runs, int(raw["epochs"])


# ----------------------------------------------------------------- report


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.1f}" if values else "-"


def report(runs: list[LiveRun], natives: list[Native], epochs: int) -> dict[str, Any]:
    base, *rest = runs
    last_base = next((r for r in reversed(rest) if r.mode == "baseline"), None)
    noise = (
        max(abs(last_base.waits[j.index] - base.waits[j.index]) for j in natives)
        if last_base is not None
        else math.nan
    )
    print(f"\nnative jobs: {len(natives)}; Slurm's own noise (baseline vs baseline): {noise:.2f} s")
    head = (
        f"{'run':<9} {'mean delay':>10} {'max delay':>9} {'> noise':>7} {'idle node-s':>11} "
        f"{'in steps':>8} {'jobs done':>9} {'last done':>9} {'mean done':>9} {'blocks':>6} "
        f"{'preempted':>9}"
    )
    print(head)
    figures: dict[str, Any] = {"noise_s": noise, "runs": {}}
    for run in rest:
        delays = [run.waits[j.index] - base.waits[j.index] for j in natives]
        over = sum(d > noise for d in delays)
        row = f"{run.mode:<9} {statistics.mean(delays):>+10.2f} {max(delays):>+9.2f} "
        if run.mode == "baseline":
            print(row + f"{'-':>7} {run.idle_node_s:>11.0f}")
            continue
        done = run.jobs_done
        last = max(done.values()) if len(done) == len(SITE_JOBS) else math.nan
        mean = statistics.mean(done.values()) if len(done) == len(SITE_JOBS) else math.nan
        print(
            row + f"{over:>7d} {run.idle_node_s:>11.0f} "
            f"{run.training_node_s / run.idle_node_s:>8.0%} "
            f"{len(done):>4d} of {len(SITE_JOBS)} {last:>9.0f} {mean:>9.0f} "
            f"{run.blocks:>6d} {run.preempted:>9d}"
        )
        phases: dict[str, list[float]] = {}
        for gaps in run.startup_phases:
            for name, seconds in gaps.items():
                if seconds is not None:
                    phases.setdefault(name, []).append(seconds)
        print(
            f"{'':<9} start-up (median s, {len(run.startup_phases)} starts): "
            + "; ".join(f"{name} {_median(v)}" for name, v in phases.items())
        )
        if run.startup_s:
            # In the order of their first steps: the first blocks (started at once) lead.
            print(
                f"{'':<9} submitted -> first step, each start (s): "
                + ", ".join(f"{seconds:.1f}" for seconds in run.startup_s)
            )
        figures["runs"][run.mode] = {
            "mean_delay_s": statistics.mean(delays),
            "max_delay_s": max(delays),
            "over_noise": over,
            "idle_node_s": run.idle_node_s,
            "in_steps_share": run.training_node_s / run.idle_node_s,
            "jobs_done": done,
            "startup_median_s": {k: statistics.median(v) for k, v in phases.items()},
        }
        if run.mode == "scavenger":
            continue
        for as_live, label in ((True, "replay"), (False, "history windows")):
            replayed = replay_of(run, natives, epochs, as_live=as_live)
            if not len(replayed) == len(done) == len(SITE_JOBS):
                print(f"{'':<9} {label}: {len(replayed)} jobs done, live {len(done)}")
                continue
            ratio = max(replayed.values()) / max(done.values())
            mean_ratio = statistics.mean(replayed.values()) / statistics.mean(done.values())
            print(
                f"{'':<9} {label}: last done {max(replayed.values()):.0f} s (replay/live "
                f"{ratio:.3f}), mean {statistics.mean(replayed.values()):.0f} s "
                f"({mean_ratio:.3f}); per job "
                + ", ".join(f"{n} {replayed[n]:.0f}/{done[n]:.0f}" for n in sorted(done))
            )
            key = "replay" if as_live else "replay_history_windows"
            figures["runs"][run.mode][f"{key}_last_done_ratio"] = ratio
            figures["runs"][run.mode][f"{key}_mean_done_ratio"] = mean_ratio
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--minutes", type=float, default=20.0, help="the window's length")
    parser.add_argument("--modes", default="poll,preempt,scavenger")
    parser.add_argument("--epochs", type=int, default=90, help="epochs of each of the six jobs")
    parser.add_argument("--step-s", type=float, default=0.1, help="a step's pace on one node")
    parser.add_argument(
        "--finish-s", type=float, default=900.0, help="most seconds after the window's end"
    )
    parser.add_argument(
        "--squeeze",
        type=float,
        default=1.0,
        help="divide the stream's times by this (a quick check of the script only: it "
        "shortens the holes below a site's)",
    )
    parser.add_argument("--list", action="store_true", help="print the window and exit")
    parser.add_argument(
        "--out", type=Path, help="write the figures, and each run's raw record, as JSON"
    )
    parser.add_argument(
        "--replay-from",
        type=Path,
        help="no live runs: the report and replays of the runs recorded in F (an --out file)",
    )
    args = parser.parse_args()
    if args.replay_from is not None:
        natives, runs, epochs = load_raw(args.replay_from)
        report(runs, natives, epochs)
        return
    window, natives = summit_stream(args.minutes)
    if args.squeeze != 1.0:
        natives = [
            dataclasses.replace(j, at=j.at / args.squeeze, run_s=j.run_s / args.squeeze)
            for j in natives
        ]
    print(
        f"# Summit window: +{window.start_s:.0f} s, {window.length_s:.0f} s, nodes "
        f"{', '.join(window.nodes)}; {len(natives)} natives, "
        f"idle {window.idle_share:.0%}, median hole {window.median_hole_s:.0f} s (trace "
        f"{TRACE_MEDIAN_HOLE_S:.0f} s)"
    )
    if args.list:
        for j in natives:
            print(
                f"  native {j.index}: at {j.at:.0f} s, {j.nodes} x {j.run_s:.0f} s, "
                f"limit {j.limit_min} min"
            )
        return
    site = SlurmSite()
    if why := site.missing():
        sys.exit(why)
    os.chdir(REPO)
    runs: list[LiveRun] = []
    extra: dict[str, Any] = {}
    modes = args.modes.split(",")
    with tempfile.TemporaryDirectory(prefix="bench-live-site-") as tmp:
        for mode in ["baseline", *modes, "baseline"]:
            began = time.monotonic()
            if mode == "baseline":
                runs.append(baseline(natives, Path(tmp), site))
            elif mode == "scavenger":
                run, extra["scavenger"] = scavenger(
                    natives, Path(tmp), args.epochs, args.step_s, args.finish_s
                )
                runs.append(run)
            else:
                runs.append(
                    harvest(
                        mode,
                        natives,
                        Path(tmp),
                        args.step_s,
                        site,
                        args.epochs,
                        args.finish_s,
                        jobs_spec=SITE_JOBS,
                        lead=False,
                    )
                )
            print(f"# {mode}: {time.monotonic() - began:.0f} s", flush=True)
            if args.out:  # a crash later in a two-hour run keeps the runs done so far
                args.out.write_text(json.dumps({"raw": raw_record(natives, runs, args.epochs)}))
    figures = report(runs, natives, args.epochs)
    figures["window"] = vars(window)
    figures.update(extra)
    figures["raw"] = raw_record(natives, runs, args.epochs)
    if args.out:
        args.out.write_text(json.dumps(figures, indent=1, default=str))


if __name__ == "__main__":
    main()
