"""Replay of a pruned search on Summit's idle nodes: time to the best model, by policy.

A search of ``--trials`` trials (Optuna's random sampler over learning rate and weight decay,
seeded; ASHA, min_resource 1, reduction factor 3), each trial FreeTrain's ShuffleNet job (its
measured throughput at 1-64 nodes, its 18 s / 12 s pauses) for ``--epochs`` epochs of 1.3 M
samples, reporting its config's learning curve (parsl_malleable/replay/curves.py) at every
epoch's end; the campaign's own ``SearchRun`` decides every pruning, over an in-memory study
(parsl_malleable/replay/sweep.py). Submitted on day 5 of Summit's idle trace (all 4,680
nodes), as ``bench_replay.py --part traces`` submits its sweeps, under:

* ``ours (promise)``: every trial a candidate, nodes by promise as a campaign has it by
  default (each trial weighs ``3 ** rungs passed``);
* ``ours (promise, hold-back)``: the same with the search's ``hold_back`` on: a trial its
  pruner would stop at its next rung is not grown;
* ``ours (equal)``: the same with nodes by promise off (every trial weighs the same);
* ``freetrain (cap C)``: FreeTrain's formulation with the user's curves, at most C trials at a
  time (10: its replayer's ``maxJ``; the others to find its best cap);
* ``scavenger``: one-node trials of a preemptable partition, requeued when preempted (a
  checkpoint at the signal), first come first served, pruned by the same search;
* ``ours, no pruning`` (first seed only): the full sweep, for scale.

Figures per row: time from submit to the first epoch's end where some trial's true value is
within 1 % of the best any trial of the sweep reaches (the full sweep's best), time until the
whole search ended, trials done / pruned, node-hours held by trials and by pruned ones, the
best true value reached, samples over the upper bound of the search's span (its idle
node-seconds x the best per-node rate, replay/bounds.py), the fraction of those idle
node-seconds held, decisions and wall time. A table per seed, then the means over seeds.

    python benchmarks/bench_replay_sweep.py             # 5 seeds x 8 rows (+1): ~5 min, 2 cores
    python benchmarks/bench_replay_sweep.py --quick     # 1 seed, 40 trials of 9 epochs: ~20 s
    python benchmarks/bench_replay_sweep.py --startup 120   # every node's start-up 120 s

Every replay runs under the runtime's physics (docs/replay.md): a node a trial gains starts
(``--startup``, default the measured 7 s) while its other nodes train, then the trial regroups;
``scavenger`` pays its cold start (``--startup``, default the measured 23 s), Slurm's requeue
hold, the scheduling delay and the training since its last checkpoint at each preemption.

Writes every figure as JSON (``--out``, default ``out/bench_replay_sweep.json``).
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import math
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO

from parsl_malleable.campaign.search_memory import memory_search
from parsl_malleable.replay.curves import SPACE, CurveFamily
from parsl_malleable.replay.idle import IdleTimeline
from parsl_malleable.replay.scenario import hpo_sweep, summit_timeline
from parsl_malleable.replay.sweep import SweepSetup, sweep_replay

ASHA = {"type": "asha", "min_resource": 1, "reduction_factor": 3}
SAMPLES_PER_EPOCH = 1.3e6  # FreeTrain's jobs: 130 M samples = 100 ImageNet epochs
DAY, DAYS = 5, 4  # submitted on day 5 (bench_replay.py's traces part), 4 days of trace


@dataclass(frozen=True)
class Scale:
    """The size of the sweep and of the comparison."""

    trials: int
    epochs: int
    seeds: tuple[int, ...]
    caps: tuple[int | None, ...]
    unpruned: bool
    startup_s: float | None = None  # every trial's start-up (None: the defaults)


FULL = Scale(trials=200, epochs=27, seeds=(0, 1, 2, 3, 4), caps=(10, 30, 100, None), unpruned=True)
QUICK = Scale(trials=40, epochs=9, seeds=(0,), caps=(10, None), unpruned=False)


@dataclass(frozen=True)
class Row:
    """One replay: a policy (with its cap and whether promises count) on one seed."""

    seed: int
    label: str
    policy: str
    cap: int | None = None
    promise: bool = False
    pruner: str = "asha"
    hold_back: bool = False


def rows(scale: Scale) -> list[Row]:
    """Every replay of the comparison, the slowest first (they go to a process pool)."""
    out = []
    for seed in scale.seeds:
        if scale.unpruned and seed == scale.seeds[0]:
            out.append(Row(seed, "ours, no pruning", "ours", pruner="none"))
        out.append(Row(seed, "ours (promise)", "ours", promise=True))
        out.append(Row(seed, "ours (promise, hold-back)", "ours", promise=True, hold_back=True))
        out.append(Row(seed, "ours (equal)", "ours"))
        for cap in scale.caps:
            out.append(Row(seed, f"freetrain (cap {cap or 'none'})", "freetrain", cap))
        out.append(Row(seed, "scavenger", "scavenger"))
    return out


@functools.cache
def timeline() -> IdleTimeline:
    """Summit's idle trace, all nodes, from day ``DAY`` for ``DAYS`` days."""
    full = summit_timeline(None, None)
    start = full.t0 + DAY * 86400
    return full.window(start, start + DAYS * 86400)


def run(args: tuple[Row, Scale]) -> dict[str, Any]:
    """One replay's figures (in a worker process)."""
    logging.disable(logging.WARNING)  # solver fallbacks are counted; their lines bury tables
    row, scale = args
    tl = timeline()
    template = hpo_sweep(tl, 1)[0]
    if scale.startup_s is not None:
        template = replace(template, startup_s=scale.startup_s)
    setup = SweepSetup(
        scale.trials,
        template,
        tl.t0,
        scale.epochs,
        SAMPLES_PER_EPOCH,
        CurveFamily(seed=row.seed),
    )
    pruner = ASHA if row.pruner == "asha" else {"type": "none"}

    def search() -> Any:
        return memory_search(
            "sweep",
            SPACE,
            scale.trials,
            pruner=pruner,
            sampler={"type": "random", "seed": row.seed},
            nodes_by_promise=row.promise,
            hold_back=row.hold_back,
        )

    began = time.perf_counter()
    result = sweep_replay(tl, search, setup, row.policy, max_jobs=row.cap, label=row.label)
    best = max(result.trials, key=lambda t: t.curve.best(scale.epochs))
    figures = {k: _plain(v) for k, v in result.summary().items()}
    return {
        **asdict(row),
        **figures,
        "wall_s": time.perf_counter() - began,
        "best_trial": best.number,
        "target": result.best * (1 - result.within),
        "samples_per_trial": scale.epochs * SAMPLES_PER_EPOCH,
    }


def _plain(value: Any) -> Any:
    return float(value) if isinstance(value, float) else value


def _hours(value: float | None) -> str:
    return "never" if value is None or math.isnan(value) else f"{value:.2f}"


COLUMNS = (
    "policy",
    "time to best (h)",
    "whole search (h)",
    "done / pruned",
    "node-hours",
    "on pruned",
    "best reached",
    "of upper bound",
    "harvested",
    "decisions",
    "wall (s)",
)


def _line(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def seed_table(results: list[dict[str, Any]], scale: Scale, seed: int) -> str:
    """The table of one seed's replays."""
    mine = [r for r in results if r["seed"] == seed]
    first = mine[0]
    startup = "measured defaults" if scale.startup_s is None else f"{scale.startup_s:g} s"
    head = (
        f"Seed {seed} (start-up: {startup}): {scale.trials} trials of {scale.epochs} epochs "
        f"({first['samples_per_trial'] / 1e6:.1f} M samples each), ASHA (min_resource 1, "
        f"reduction factor 3), Summit from day {DAY}; best config: trial {first['best_trial']}, "
        f"true value {first['best']:.3f} (target {first['target']:.3f})"
    )
    lines = [head, _line(list(COLUMNS)), _line(["---"] * len(COLUMNS))]
    for r in mine:
        lines.append(
            _line(
                [
                    r["policy"],
                    _hours(r["time_to_best_h"]),
                    _hours(r["search_h"]),
                    f"{r['done']} / {r['pruned']}"
                    + (f" ({r['unfinished']} unfinished)" if r["unfinished"] else ""),
                    f"{r['node_hours']:.1f}",
                    f"{r['pruned_node_hours']:.1f}",
                    f"{r['best_found']:.3f}",
                    f"{r['of_upper']:.1%}",
                    f"{r['harvested']:.1%}",
                    f"{r['decisions']:,}",
                    f"{r['wall_s']:.0f}",
                ]
            )
        )
    return "\n".join(lines)


def _mean(values: list[float | None]) -> float:
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if len(known) == len(values) and known else math.nan


def means(results: list[dict[str, Any]], scale: Scale) -> tuple[str, list[dict[str, Any]]]:
    """The mean of each policy over the seeds, and freetrain's best cap (by time to best)."""
    labels = list(dict.fromkeys(r["policy"] for r in results if r["pruner"] == "asha"))
    summary = []
    for label in labels:
        mine = [r for r in results if r["policy"] == label and r["pruner"] == "asha"]
        summary.append(
            {
                "policy": label,
                "seeds": len(mine),
                "time_to_best_h": _mean([r["time_to_best_h"] for r in mine]),
                "time_to_best_each": [r["time_to_best_h"] for r in mine],
                "search_h": _mean([r["search_h"] for r in mine]),
                "node_hours": _mean([r["node_hours"] for r in mine]),
                "pruned_node_hours": _mean([r["pruned_node_hours"] for r in mine]),
                "of_upper": _mean([r["of_upper"] for r in mine]),
                "harvested": _mean([r["harvested"] for r in mine]),
            }
        )
    caps = [s for s in summary if s["policy"].startswith("freetrain")]
    best_cap = min(caps, key=lambda s: s["time_to_best_h"])["policy"] if caps else None
    columns = (
        "policy",
        "time to best (h), mean",
        "each seed",
        "whole search (h)",
        "node-hours",
        "on pruned",
        "of upper bound",
        "harvested",
    )
    lines = [
        f"Means over seeds {', '.join(map(str, scale.seeds))} (freetrain's best cap by time "
        f"to best: {best_cap})",
        _line(list(columns)),
        _line(["---"] * len(columns)),
    ]
    for s in summary:
        lines.append(
            _line(
                [
                    s["policy"] + (" **best cap**" if s["policy"] == best_cap else ""),
                    _hours(s["time_to_best_h"]),
                    " / ".join(_hours(v) for v in s["time_to_best_each"]),
                    _hours(s["search_h"]),
                    f"{s['node_hours']:.1f}",
                    f"{s['pruned_node_hours']:.1f}",
                    f"{s['of_upper']:.1%}",
                    f"{s['harvested']:.1%}",
                ]
            )
        )
    for s in summary:
        s["best_cap"] = s["policy"] == best_cap
    return "\n".join(lines), summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 seed, 40 trials of 9 epochs")
    parser.add_argument("--workers", type=int, default=2, help="replays at once (default 2)")
    parser.add_argument(
        "--startup",
        type=float,
        help="seconds from a node's taking to its first step, for every trial and the "
        "scavenger's (re)starts (default: the measured 7 s and 23 s)",
    )
    parser.add_argument("--out", type=Path, default=REPO / "out" / "bench_replay_sweep.json")
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error(f"--workers must be at least 1; got {args.workers}")
    scale = QUICK if args.quick else FULL
    if args.startup is not None:
        if not (math.isfinite(args.startup) and args.startup >= 0):
            parser.error(f"--startup must be a finite number >= 0; got {args.startup}")
        scale = replace(scale, startup_s=args.startup)
    began = time.perf_counter()
    work = [(row, scale) for row in rows(scale)]
    if args.workers == 1:
        results = [run(w) for w in work]
    else:
        with ProcessPoolExecutor(args.workers) as pool:
            results = list(pool.map(run, work))
    wall = time.perf_counter() - began
    for seed in scale.seeds:
        print(seed_table(results, scale, seed))
        print()
    text, summary = means(results, scale)
    print(text)
    print(f"\n{len(results)} replays in {wall:.0f} s with {args.workers} worker(s)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    record = {"scale": asdict(scale), "wall_s": wall, "rows": results, "means": summary}
    args.out.write_text(json.dumps(record, indent=1, default=str) + "\n")
    print(f"figures in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
