"""Early stopping against the full sweep: time to a model within 1% of the best, on the
emulated site.

The example search ``configs/asha.yaml`` (digits MLPs over four decades of learning rate and
five hidden-layer shapes, each trial reporting its test accuracy every epoch) is run three
times by the real command (``parsl-malleable run``, in a subprocess) on the same emulated site,
with the same native load (the profile's trace replayed at 40x rather than 120x): with its
successive-halving pruner and nodes by promise (``asha``, the default), with that pruner and
every trial weighed equally (``equal``: ``nodes_by_promise: false``), and without pruning
(``none``). All use Optuna's random sampler with the same seed, so that all runs train the
same configs (TPE, the example's sampler, would choose differently once the pruned trials'
values differ); the script checks that they did. Then the baseline (``asha_pool.py``, left
out with ``--no-pool``): Optuna's own ASHA on a plain pool of one-node worker jobs on the same
site and native load, the way a user would run the search on a scavenger queue.

From each output folder's campaign state (``state.sqlite``: every report of the metric with the
time it reached the driver, and each trial's status and node-seconds):

* the best value the full (unpruned) sweep reached, over every report of every trial;
* per run, the time from the campaign's start to the first report within 1% of that best
  (``value >= best * 0.99`` for a metric to maximise): when a model that good first existed;
* the ratio of the two times (target: the pruned search at least 3x sooner);
* node-hours spent on trials that were pruned, and in all;
* when the first trial started and the last one ended (the whole search), and the run's
  length, start to end.

Run: ``python benchmarks/bench_asha.py [--quick] [--out F] [--keep DIR]``. The full run (27
trials of 9 epochs, 0.1 s of stand-in compute per global batch) takes about 10 minutes on 2
cores; ``--quick`` (9 trials of 3 epochs, 0.03 s) about 3, to check the script end to end.
Prints a table and writes its figures as JSON (``--out``, default ``out/bench_asha.json``). With
``--keep DIR`` the two campaigns' folders stay in DIR, and a campaign found there finished (in
one run) is not run again: its figures are read as they are.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "configs" / "asha.yaml"
WITHIN = 0.01  # "within 1% of the best": relative to the best value
TARGET_RATIO = 3.0  # the pruned search reaches it at least this many times sooner
# The runs: the example's pruner with nodes by promise (its default), the same with every trial
# weighed equally, and no pruning.
VARIANTS = ("asha", "equal", "none")
SPEEDUP = 40.0  # the emulated site's trace seconds per wall second, for both runs
STATUS_COLUMNS = (("done", 4), ("pruned", 6), ("failed", 6))  # trials by status, column width


@dataclass(frozen=True)
class Scale:
    """The size of the search both runs train."""

    trials: int
    epochs: int
    step_delay_s: float
    time_limit_s: float


FULL = Scale(trials=27, epochs=9, step_delay_s=0.1, time_limit_s=1500)
QUICK = Scale(trials=9, epochs=3, step_delay_s=0.03, time_limit_s=400)


@dataclass
class RunFigures:
    """What one campaign's folder says."""

    pruner: str
    run_s: float | None
    first_start_s: float | None
    search_end_s: float | None
    best: float | None
    time_to_target_s: float | None
    trials: int
    statuses: dict[str, int]
    node_hours: float
    node_hours_pruned: float
    params: dict[str, dict[str, Any]]


def campaign(scale: Scale, variant: str, seed: int) -> dict[str, Any]:
    """The example at ``scale``, with the random sampler and the ``variant``'s pruning (the
    example's own pruner for ``asha`` and ``equal``, the latter with ``nodes_by_promise`` off;
    none for ``none``), its apps found from this checkout."""
    data = yaml.safe_load(EXAMPLE.read_text())
    data.pop("output", None)
    data["python_path"] = [str(REPO)]
    data["time_limit_s"] = scale.time_limit_s
    # The profile's 120x replays a stretch (its minutes 11-17) where natives hold all six nodes,
    # which would stall the longer unpruned sweep; at 40x at least 15% of node-time stays idle
    # in every minute of the first 25 (benchmarks/emulated_figures.py).
    data["site_overrides"] = {"emulated": {"speedup": SPEEDUP}}
    search = data["searches"][0]
    search["trials"] = scale.trials
    search["epochs"] = scale.epochs
    search["args"]["step_delay_s"] = scale.step_delay_s
    search["sampler"] = {"type": "random", "seed": seed}
    if variant == "none":
        search["pruner"] = {"type": "none"}
    search["nodes_by_promise"] = variant != "equal"
    return data


def finished(output: Path) -> bool:
    """Whether ``output`` holds a campaign whose one run finished (a kept folder to reuse)."""
    from parsl_malleable.campaign.store import CampaignStore

    if not (output / CampaignStore.FILE).is_file():
        return False
    store = CampaignStore(output, read_only=True)
    try:
        return store.meta("runs") == "1" and store.meta("run1_outcome") == "finished"
    finally:
        store.close()


def run(data: dict[str, Any], folder: Path, name: str) -> Path:
    """Run the campaign ``data`` with ``parsl-malleable run`` into ``folder/name`` (unless a
    kept folder there holds it finished already); the output folder."""
    path = folder / f"{name}.yaml"
    output = folder / name
    if finished(output) and path.is_file() and yaml.safe_load(path.read_text()) == data:
        print(f"reusing {output}: this campaign, finished in one run", flush=True)
        return output
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    command = [sys.executable, "-m", "parsl_malleable", "run", str(path), "-o", str(output)]
    print(f"running {name}: {' '.join(command[2:])}", flush=True)
    done = subprocess.run(
        [*command, "--quiet"],
        env=env,
        capture_output=True,
        text=True,
        timeout=float(data["time_limit_s"]) + 300,
        check=False,
    )
    if done.returncode != 0:
        # 1: a trial failed, 3: the time limit (``run``'s exit statuses)
        raise SystemExit(
            f"{name} failed (exit {done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        )
    return output


def reports(
    output: Path, metric: str
) -> tuple[list[tuple[float, str, float]], Any, float, float | None]:
    """Every finite report of ``metric`` as ``(seconds since the campaign started, job,
    value)`` in time order; the stored jobs; the campaign's start (epoch seconds); the
    driver's run, start to end (seconds; None while it has not ended)."""
    from parsl_malleable.campaign.store import CampaignStore

    store = CampaignStore(output, read_only=True)
    try:
        started = store.started_at
        if started is None:
            raise SystemExit(f"{output}: the campaign never started")
        rows = [
            (row["time"] - started, row["job"], float(row[metric]))
            for row in store.metrics()
            if metric in row and math.isfinite(row[metric])
        ]
        ended = store.meta("run1_ended_at")
        return sorted(rows), store.jobs(), started, float(ended) - started if ended else None
    finally:
        store.close()


def better(a: float, b: float, direction: str) -> bool:
    """Whether ``a`` is better than ``b``."""
    return a > b if direction == "max" else a < b


def threshold(best: float, direction: str) -> float:
    """The worst value still within :data:`WITHIN` of ``best``."""
    return best - abs(best) * WITHIN if direction == "max" else best + abs(best) * WITHIN


def figures(
    pruner: str, output: Path, metric: str, direction: str, target: float | None
) -> RunFigures:
    """One run's figures; ``target``: the value to reach (None: not known yet)."""
    rows, jobs, started, run_s = reports(output, metric)
    best = None
    for _t, _job, value in rows:
        if best is None or better(value, best, direction):
            best = value
    reached = None
    if target is not None:
        reached = next(
            (t for t, _job, value in rows if value == target or better(value, target, direction)),
            None,
        )
    statuses: dict[str, int] = {}
    for job in jobs:
        statuses[job.status] = statuses.get(job.status, 0) + 1
    ends = [job.finished_at - started for job in jobs if job.finished_at is not None]
    starts = [job.first_start - started for job in jobs if job.first_start is not None]
    return RunFigures(
        pruner=pruner,
        run_s=run_s,
        first_start_s=min(starts) if starts else None,
        search_end_s=max(ends) if ends else None,
        best=best,
        time_to_target_s=reached,
        trials=len(jobs),
        statuses=statuses,
        node_hours=sum(job.node_seconds for job in jobs) / 3600.0,
        node_hours_pruned=sum(job.node_seconds for job in jobs if job.status == "pruned") / 3600.0,
        params={job.name: job.params for job in jobs},
    )


def _s(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f}"


def _row(r: RunFigures) -> str:
    """One run's line of the table."""
    counts = " ".join(f"{r.statuses.get(s, 0):{w}d}" for s, w in STATUS_COLUMNS)
    return (
        f"{r.pruner:7s} {_s(r.time_to_target_s):>11s} {r.best or math.nan:6.4f} "
        f"{_s(r.first_start_s):>11s} {_s(r.search_end_s):>8s} {_s(r.run_s):>6s} {counts} "
        f"{r.node_hours:7.3f} {r.node_hours_pruned:13.3f}"
    )


def ratios(slow: RunFigures, fast: RunFigures, prefix: str, says: str) -> dict[str, float]:
    """``slow``'s time to target and whole search over ``fast``'s, printed as ``says``; keyed
    ``<prefix>to target`` and ``<prefix>whole search`` (where both times are known)."""
    out = {}
    for key, value in (("to target", "time_to_target_s"), ("whole search", "search_end_s")):
        a, b = getattr(slow, value), getattr(fast, value)
        if a and b:
            out[f"{prefix}{key}"] = a / b
            print(f"{key}, {says}: {a / b:.2f}x")
    return out


def run_pool_once(scale: Scale, folder: Path, seed: int, target: float) -> dict[str, Any]:
    """The baseline (``asha_pool.py``: Optuna's own ASHA on a plain pool of one-node workers,
    same site, load and configs) into ``folder/pool``; its figures, read back from
    ``folder/pool.json`` where a kept folder holds them for this scale, seed and target."""
    saved = folder / "pool.json"
    key = {"scale": asdict(scale), "seed": seed, "target": target}
    if saved.is_file():
        kept = json.loads(saved.read_text())
        if kept.get("key") == key:
            print(
                f"reusing {saved}: the pool's figures for this scale, seed and target", flush=True
            )
            return dict(kept["figures"])
    if str(Path(__file__).parent) not in sys.path:
        sys.path.insert(0, str(Path(__file__).parent))
    import asha_pool

    out = folder / "pool"
    if out.exists():
        shutil.rmtree(out)
    print("running pool: Optuna's ASHA on one-node workers (benchmarks/asha_pool.py)", flush=True)
    result = asha_pool.run_pool(scale, out, seed=seed, target=target)
    saved.write_text(json.dumps({"key": key, "figures": result}))
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="9 trials of 3 epochs (~3 min)")
    parser.add_argument("--seed", type=int, default=0, help="the random sampler's seed")
    parser.add_argument(
        "--out", type=Path, default=REPO / "out" / "bench_asha.json", help="the figures, JSON"
    )
    parser.add_argument(
        "--keep",
        type=Path,
        help="run into this folder and keep it; a run found there finished is reused",
    )
    parser.add_argument(
        "--no-pool", action="store_true", help="leave out the baseline of a plain worker pool"
    )
    args = parser.parse_args(argv)
    scale = QUICK if args.quick else FULL
    example = yaml.safe_load(EXAMPLE.read_text())
    metric, direction = example["metric"]["name"], example["metric"]["direction"]

    with tempfile.TemporaryDirectory(prefix="bench-asha-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        # The unpruned sweep first: its best sets the target both runs are timed to.
        outputs = {v: run(campaign(scale, v, args.seed), folder, v) for v in reversed(VARIANTS)}
        full = figures("none", outputs["none"], metric, direction, None)
        if full.best is None:
            raise SystemExit(f"the unpruned sweep reported no finite {metric}")
        target = threshold(full.best, direction)
        runs = {v: figures(v, outputs[v], metric, direction, target) for v in VARIANTS}
        pool = None
        if not args.no_pool:
            pool = run_pool_once(scale, folder, args.seed, target)
            runs["pool"] = RunFigures(**{f.name: pool[f.name] for f in fields(RunFigures)})

    pruned, unpruned, equal = runs["asha"], runs["none"], runs["equal"]
    same = pruned.params == unpruned.params == equal.params
    ratio = None
    if pruned.time_to_target_s and unpruned.time_to_target_s:
        ratio = unpruned.time_to_target_s / pruned.time_to_target_s
    met = ratio is not None and ratio >= TARGET_RATIO
    print(
        f"{scale.trials} trials of {scale.epochs} epochs, {scale.step_delay_s} s a step, random "
        f"sampler seed {args.seed}, {os.cpu_count()} cores"
    )
    print(
        f"target: {metric} within {WITHIN:.0%} of the unpruned sweep's best "
        f"({full.best:.4f}): {'>=' if direction == 'max' else '<='} {target:.4f}"
    )
    header = (
        f"{'pruner':7s} {'to target s':>11s} {'best':>6s} {'1st trial s':>11s} "
        f"{'search s':>8s} {'run s':>6s} "
        f"{'done':>4s} {'pruned':>6s} {'failed':>6s} {'node-h':>7s} {'pruned node-h':>13s}"
    )
    print(header)
    for r in runs.values():
        print(_row(r))
    print(
        f"time to target, unpruned / pruned: {'n/a' if ratio is None else f'{ratio:.2f}x'}; "
        f"target >= {TARGET_RATIO:g}x: {'met' if met else 'NOT met'}"
    )
    search_ratio = None
    if pruned.search_end_s and unpruned.search_end_s:
        search_ratio = unpruned.search_end_s / pruned.search_end_s
        print(f"whole search (last trial's end), unpruned / pruned: {search_ratio:.2f}x")
    promise = ratios(equal, pruned, "", "equal weights / nodes by promise")
    if pool is not None:
        promise |= ratios(
            runs["pool"], pruned, "pool ", "Optuna's ASHA on a pool of one-node workers / ours"
        )
        print(
            f"pool: {pool['workers_started']} worker job(s) started, {pool['killed_by_natives']} "
            f"killed by natives, {pool['trials_retried']} trial(s) retried from scratch"
        )
        same = same and pool["params"] == pruned.params
    if not same:
        print(
            "WARNING: the two runs trained different configs; the comparison is not like for like"
        )
    result = {
        "scale": asdict(scale),
        "seed": args.seed,
        "metric": metric,
        "direction": direction,
        "within": WITHIN,
        "best_unpruned": full.best,
        "target_value": target,
        "ratio": ratio,
        "target_ratio": TARGET_RATIO,
        "target_met": met,
        "search_ratio": search_ratio,
        "ratios": promise,
        "pool": None if pool is None else {k: v for k, v in pool.items() if k != "reports"},
        "same_configs": same,
        "runs": {p: asdict(r) for p, r in runs.items()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
