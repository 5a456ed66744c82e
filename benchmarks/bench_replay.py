"""Replay: what each policy trains on the Summit idle trace and on simulated job traces.

Three parts, each printing its tables (docs/benchmarks.md "Replay" shows them) and writing
plots to docs/img/:

``summit``: the two-week Summit idle trace (4,680 nodes that were idle at some time) with
FreeTrain's ``imagenet-imgps-1001J`` and ``hps-shufflenet-1000J`` workloads at their own
submit times, at most 10 jobs at a time (FreeTrain's replayer), under every policy.

``jct``: mean job completion time with the ``completion`` objective against FreeTrain's
throughput objective, every job admitted at once (the allocator chooses who runs), on the
first ``--jct-nodes`` Summit nodes and ``--jct-days`` days with ``--jct-jobs`` jobs of each
workload.

``traces``: every carried job trace simulated under EASY backfill; its idle nodes harvested by
a 16-job HPO sweep (ShuffleNet, 10 ImageNet epochs each) submitted on day 5, against the same
sweep run as 4-node batch jobs in the normal queue (``batch``), and as such jobs with
``--time-min`` fitted into holes by the scheduler and resubmitted when cut off (``slurm-fit``).

    python benchmarks/bench_replay.py                       # all parts (about 1-2 h on 2 cores)
    python benchmarks/bench_replay.py --part summit --days 2
    python benchmarks/bench_replay.py --part jct
    python benchmarks/bench_replay.py --part traces
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, data_file

from parsl_malleable.replay.engine import Replay
from parsl_malleable.replay.policies import POLICIES, make_policy
from parsl_malleable.replay.result import ReplayResult
from parsl_malleable.replay.scenario import summit_timeline, workload_jobs

SUMMIT_WORKLOADS = ("imagenet-imgps-1001J", "hps-shufflenet-1000J")
SUMMIT_POLICIES = ("freetrain", "malletrain", "ours", "ours+curves", "greedy")
TRACES = ("theta_2022.swf", "UniLu-Gaia-2014-1.swf", "hpc2n.swf", "wagap-2013.swf")
SWEEP_JOBS, SWEEP_SAMPLES, SWEEP_DAY, BATCH_NODES = 16, 13e6, 5.0, 4
FIT_TIME_MIN_S = 600.0


def _quiet() -> None:
    # Solver fallbacks are counted in each result; their log lines would bury the tables.
    logging.disable(logging.WARNING)


def _summit_run(args: tuple[str, str, float | None, int, float]) -> ReplayResult:
    _quiet()
    policy, workload, days, max_jobs, time_limit = args
    timeline = summit_timeline(None, days)
    jobs = workload_jobs(workload, timeline, keep_submits=True)
    chosen = make_policy(policy, time_limit_s=time_limit)
    return Replay(timeline, jobs, chosen, max_jobs=max_jobs).run()


def _jct_run(args: tuple[str, str, str, int, float, int, float]) -> ReplayResult:
    _quiet()
    policy, objective, workload, nodes, days, count, decay = args
    timeline = summit_timeline(nodes, days)
    jobs = workload_jobs(workload, timeline, limit=count)
    chosen = make_policy(policy, objective=objective, completion_decay=decay)
    result = Replay(timeline, jobs, chosen, max_jobs=count).run()
    return replace(result, policy=f"{policy} ({objective})")


def _trace_run(args: tuple[str, str, str]) -> ReplayResult:
    _quiet()
    from parsl_malleable.replay.idle import idle_from_sim
    from parsl_malleable.replay.queue_windows import QueueWindows
    from parsl_malleable.replay.scenario import bftrainer_dir
    from parsl_malleable.replay.workload import load_replay_workload, sweep
    from parsl_malleable.sim.simulate import simulate
    from parsl_malleable.traces import read_trace

    trace_name, policy, windows = args
    trace = read_trace(data_file(trace_name))
    sim = simulate(trace, "easy")
    timeline = idle_from_sim(sim, source=trace_name)
    start = timeline.t0 + SWEEP_DAY * 86400
    timeline = timeline.window(start, timeline.t1)
    template = load_replay_workload(bftrainer_dir(), "hps-shufflenet-1000J", limit=1)[0]
    jobs = sweep(replace(template, samples=SWEEP_SAMPLES), SWEEP_JOBS, start)
    source = QueueWindows(trace, sim) if windows == "queue" else None
    result = Replay(timeline, jobs, make_policy(policy), max_jobs=SWEEP_JOBS, windows=source).run()
    return replace(result, policy=f"{policy} ({windows} windows)" if windows else policy)


def _row(r: ReplayResult) -> str:
    s = r.summary()
    ttr = s["time_to_result_h"]
    ttr_text = "-" if isinstance(ttr, float) and math.isnan(ttr) else f"{ttr:.1f}"
    return (
        f"| {s['policy']} | {s['finished']}/{s['jobs']} | {s['samples'] / 1e9:,.1f} | "
        f"{s['efficiency']:.1%} | {s['scaling_efficiency']:.1%} | {s['harvested_fraction']:.1%} | "
        f"{s['mean_jct_h']:.2f} | {ttr_text} | {s['rescales']:,} | {s['decisions']:,} | "
        f"{s['fallbacks']} | {s['wall_s']:.0f} |"
    )


HEADER = (
    "| policy | jobs done | samples (G) | efficiency | scaling eff. | harvested | mean JCT (h) "
    "| time to result (h) | rescales | decisions | solver fallbacks | wall (s) |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def _plot_done(results: list[ReplayResult], title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for r in results:
        done = sorted((j.finished - r.t0) / 3600 for j in r.jobs if j.finished is not None)
        ax.step(done, range(1, len(done) + 1), where="post", label=r.policy)
    ax.set_xlabel("hours into the trace")
    ax.set_ylabel("jobs finished")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def part_summit(
    pool: ProcessPoolExecutor,
    days: float | None,
    policies: tuple[str, ...],
    workloads: tuple[str, ...] = SUMMIT_WORKLOADS,
    time_limit: float = 0.1,
) -> None:
    for workload in workloads:
        began = time.perf_counter()
        runs = [(p, workload, days, 10, time_limit) for p in policies]
        results = list(pool.map(_summit_run, runs))
        r0 = results[0]
        print(
            f"\nSummit {workload}: {(r0.t1 - r0.t0) / 86400:.1f} days replayed "
            f"(until the last job or the trace's end), {len(r0.jobs)} jobs, "
            f"{r0.idle_node_seconds / 3600:,.0f} idle node-hours in the first policy's span; "
            f"{time.perf_counter() - began:.0f} s for the part"
        )
        print(HEADER)
        for r in results:
            print(_row(r))
        # Shortened runs get their own file: the docs show the full replay's plot.
        suffix = f"-{days:g}d" if days is not None else ""
        plot = REPO / "docs" / "img" / f"replay-{workload}{suffix}.png"
        _plot_done(results, f"Summit, {workload}", plot)


def _burst_shares(nodes: int, days: float, above: tuple[int, ...] = (64, 256)) -> str:
    """How much of the idle node-time comes while more than ``k`` nodes are idle at once."""
    import numpy as np

    tl = summit_timeline(nodes, days)
    times = np.r_[tl.start, tl.end]
    steps = np.r_[np.ones(len(tl.start)), -np.ones(len(tl.end))]
    order = np.argsort(times, kind="stable")
    times, count = times[order], np.cumsum(steps[order])[:-1]
    dt = np.diff(times)
    total = float((count * dt).sum())
    parts = [
        f"more than {k} idle: {(count * dt)[count > k].sum() / total:.0%} of the idle "
        f"node-time in {dt[count > k].sum() / dt.sum():.0%} of the time"
        for k in above
    ]
    return "; ".join(parts)


def part_jct(pool: ProcessPoolExecutor, nodes: int, days: float, count: int, decay: float) -> None:
    for workload in SUMMIT_WORKLOADS:
        runs = [
            (policy, objective, workload, nodes, days, count, decay)
            for policy, objective in (
                ("freetrain", "throughput"),
                ("ours+curves", "completion"),
                ("ours", "completion"),
            )
        ]
        results = list(pool.map(_jct_run, runs))
        print(
            f"\nCompletion time, {workload}: Summit's first {nodes} nodes, {days:g} days, "
            f"{count} jobs all admitted; completion decay {decay:g}"
        )
        print(f"Idle nodes come in bursts: {_burst_shares(nodes, days)}")
        print(HEADER)
        for r in results:
            print(_row(r))
        base = results[0]
        for r in results[1:]:
            jct = r.mean_completion_s / base.mean_completion_s - 1
            samples = r.trained / base.trained - 1
            ttr = r.time_to_result_s / base.time_to_result_s - 1
            print(
                f"{r.policy}: mean JCT {jct:+.1%}, time to result {ttr:+.1%}, "
                f"samples {samples:+.1%} against {base.policy}"
            )


def part_traces(pool: ProcessPoolExecutor) -> None:
    from parsl_malleable.replay.batch import batch_sweep
    from parsl_malleable.replay.scenario import bftrainer_dir
    from parsl_malleable.replay.slurmfit import slurm_fit_sweep
    from parsl_malleable.replay.workload import load_replay_workload, sweep
    from parsl_malleable.traces import read_trace

    kinds = (("freetrain", ""), ("ours", "queue"), ("ours", "history"))
    runs = [(t, p, w) for t in TRACES for p, w in kinds]
    results = list(pool.map(_trace_run, runs))
    print(
        f"\nJob traces (EASY backfill), a {SWEEP_JOBS}-job sweep of {SWEEP_SAMPLES / 1e6:.0f} M "
        f"samples each submitted on day {SWEEP_DAY:.0f}; "
        f"batch: {BATCH_NODES}-node jobs in the queue; slurm-fit: the same with "
        f"--time-min={FIT_TIME_MIN_S:.0f} s, resubmitted when cut off"
    )
    print(
        "| trace | policy | harvested | efficiency | time to result (h) "
        "| native delay mean / max (s) |"
    )
    print("|---|---|---|---|---|---|")
    template = load_replay_workload(bftrainer_dir(), "hps-shufflenet-1000J", limit=1)[0]
    for k, trace_name in enumerate(TRACES):
        for r in results[len(kinds) * k : len(kinds) * (k + 1)]:
            s = r.summary()
            ttr = s["time_to_result_h"]
            print(
                f"| {trace_name} | {r.policy} | {s['harvested_fraction']:.1%} | "
                f"{s['efficiency']:.1%} | {ttr:.1f} | 0 / 0 (yields at once) |"
            )
        trace = read_trace(data_file(trace_name))
        start = float(trace.jobs["submit"].min()) + SWEEP_DAY * 86400
        jobs = sweep(replace(template, samples=SWEEP_SAMPLES), SWEEP_JOBS, start)
        batch = batch_sweep(trace, jobs, BATCH_NODES)
        fit = slurm_fit_sweep(trace, jobs, BATCH_NODES, FIT_TIME_MIN_S)
        for name, outcome in (("batch", batch), ("slurm-fit", fit)):
            print(
                f"| {trace_name} | {name} ({outcome.submissions} jobs) | - | - | "
                f"{outcome.time_to_result_s / 3600:.1f} | "
                f"{outcome.native_delay_mean_s:.0f} / {outcome.native_delay_max_s:.0f} |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("summit", "jct", "traces", "all"), default="all")
    parser.add_argument("--days", type=float, help="Summit: only the first D days")
    parser.add_argument("--policy", action="append", choices=POLICIES)
    parser.add_argument("--workload", action="append", choices=SUMMIT_WORKLOADS)
    parser.add_argument("--jct-nodes", type=int, default=1000)
    parser.add_argument("--jct-days", type=float, default=3.0)
    parser.add_argument("--jct-jobs", type=int, default=40)
    parser.add_argument("--jct-decay", type=float, default=0.5, help="completion_decay")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--time-limit", type=float, default=0.1, help="solver seconds (summit)")
    args = parser.parse_args()
    (REPO / "docs" / "img").mkdir(parents=True, exist_ok=True)
    with ProcessPoolExecutor(args.workers) as pool:
        if args.part in ("summit", "all"):
            workloads = tuple(args.workload or SUMMIT_WORKLOADS)
            policies = tuple(args.policy or SUMMIT_POLICIES)
            part_summit(pool, args.days, policies, workloads, args.time_limit)
        if args.part in ("jct", "all"):
            part_jct(pool, args.jct_nodes, args.jct_days, args.jct_jobs, args.jct_decay)
        if args.part in ("traces", "all"):
            part_traces(pool)


if __name__ == "__main__":
    main()
