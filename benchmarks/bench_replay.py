"""Replay: what each policy trains on the Summit idle trace and on simulated job traces.

Five parts, each printing its tables (docs/benchmarks.md "Replay" shows them) and writing
plots to docs/img/. Every replay runs under the runtime's physics (docs/replay.md, "The
physics") unless ``--physics freetrain`` asks for FreeTrain's whole-job pauses; ``scavenger``
is charged its cold start, Slurm's requeue hold, the scheduling delay and the training since
its last checkpoint at each preemption (replay/scavenger.py):

``saturated``: a saturated day (Summit's first 1,000 nodes, day 1): a backlog of 1,000
ShuffleNet jobs with unlimited samples, and a fixed set of 40 ImageNet jobs (the first 40 of
``imagenet-imgps-1001J``, seven models) with unlimited samples, all submitted at the start,
under ``ours`` (admission: every job a candidate), ``freetrain`` at its published cap (10, its
``T_fwd`` of 600 s) and at caps 30, 100 and none, ``malletrain`` at cap 10 and ``scavenger``;
samples against the upper and the offline bound (replay/bounds.py).

``summit``: the two-week Summit idle trace (4,680 nodes that were idle at some time) with
FreeTrain's ``imagenet-imgps-1001J`` and ``hps-shufflenet-1000J`` workloads at their own
submit times, at most 10 jobs at a time (FreeTrain's replayer), under every policy.

``jct``: mean job completion time with the ``completion`` objective against FreeTrain's
throughput objective, every job admitted at once (the allocator chooses who runs), on the
first ``--jct-nodes`` Summit nodes and ``--jct-days`` days with ``--jct-jobs`` jobs of each
workload.

``startup``: the saturated ShuffleNet backlog day at start-ups of 5, 30, 120 and 300 s (a
site that imports torch from a shared filesystem pays 30-120 s), ``ours``, ``freetrain`` (no
cap) and ``scavenger``: under the runtime's physics (only a new node waits its start-up) and
FreeTrain's (every start pauses the whole job that long); the scavenger with every charge and
with its start-up only.

``traces``: every carried job trace simulated under EASY backfill; its idle nodes harvested by
a 16-job HPO sweep (ShuffleNet, 10 ImageNet epochs each) submitted on day 5, against the same
sweep run as 4-node batch jobs in the normal queue (``batch``), and as such jobs with
``--time-min`` fitted into holes by the scheduler and resubmitted when cut off (``slurm-fit``).

    python benchmarks/bench_replay.py                       # all parts (about 1-2 h on 2 cores)
    python benchmarks/bench_replay.py --part saturated      # about 5-10 min on 2 cores
    python benchmarks/bench_replay.py --part startup        # about 15 min on 2 idle cores
    python benchmarks/bench_replay.py --part startup --quick  # 250 nodes: a few minutes
    python benchmarks/bench_replay.py --part charges        # the scavenger's charges: seconds
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
from parsl_malleable.replay.idle import IdleTimeline
from parsl_malleable.replay.policies import POLICIES, make_policy
from parsl_malleable.replay.result import ReplayResult
from parsl_malleable.replay.scavenger import scavenger_replay
from parsl_malleable.replay.scenario import hpo_sweep, summit_timeline, workload_jobs
from parsl_malleable.replay.workload import Physics, ReplayJob

SUMMIT_WORKLOADS = ("imagenet-imgps-1001J", "hps-shufflenet-1000J")
SUMMIT_POLICIES = ("freetrain", "malletrain", "ours", "ours+curves", "greedy")
TRACES = ("theta_2022.swf", "UniLu-Gaia-2014-1.swf", "hpc2n.swf", "wagap-2013.swf")
SWEEP_SIZES, SWEEP_SAMPLES, SWEEP_DAY, BATCH_NODES = (16, 100), 13e6, 5.0, 4
SUMMIT_CAP = 10  # FreeTrain's replayer's maxJ
SUMMIT_EXTRA: tuple[tuple[str, int | None], ...] = (
    ("ours", None),
    ("freetrain", 30),
    ("freetrain", 100),
    ("freetrain", None),
    ("scavenger", None),
)
# The physics of every part's replays (``--physics``); the startup part runs both.
PHYSICS: dict[str, Physics] = {"runtime": Physics(), "freetrain": Physics("freetrain")}
FIT_TIME_MIN_S = 600.0


def _quiet() -> None:
    # Solver fallbacks are counted in each result; their log lines would bury the tables.
    logging.disable(logging.WARNING)


def _summit_run(args: tuple[str, str, float | None, int | None, float, str]) -> ReplayResult:
    _quiet()
    policy, workload, days, max_jobs, time_limit, physics = args
    timeline = summit_timeline(None, days)
    jobs = workload_jobs(workload, timeline, keep_submits=True)
    if policy == "scavenger":
        return scavenger_replay(timeline, jobs)
    chosen = make_policy(policy, time_limit_s=time_limit)
    result = Replay(timeline, jobs, chosen, max_jobs=max_jobs, physics=PHYSICS[physics]).run()
    if max_jobs == SUMMIT_CAP:
        return result
    return replace(result, policy=f"{policy} (cap {max_jobs or 'none'})")


def _jct_run(args: tuple[str, str, str, int, float, int, float, str]) -> ReplayResult:
    _quiet()
    policy, objective, workload, nodes, days, count, decay, physics = args
    timeline = summit_timeline(nodes, days)
    jobs = workload_jobs(workload, timeline, limit=count)
    chosen = make_policy(policy, objective=objective, completion_decay=decay)
    result = Replay(timeline, jobs, chosen, max_jobs=count, physics=PHYSICS[physics]).run()
    return replace(result, policy=f"{policy} ({objective})")


def _trace_run(args: tuple[str, str, str, int, str]) -> ReplayResult:
    _quiet()
    from parsl_malleable.replay.idle import idle_from_sim
    from parsl_malleable.replay.queue_windows import QueueWindows
    from parsl_malleable.sim.trace_replay import simulate
    from parsl_malleable.traces import read_trace

    trace_name, policy, windows, count, physics = args
    if trace_name == "summit":
        timeline = summit_timeline(None, None)
        timeline = timeline.window(timeline.t0 + SWEEP_DAY * 86400, timeline.t1)
        trace = sim = None
    else:
        trace = read_trace(data_file(trace_name))
        sim = simulate(trace, "easy")
        timeline = idle_from_sim(sim, source=trace_name)
        timeline = timeline.window(timeline.t0 + SWEEP_DAY * 86400, timeline.t1)
    jobs = _sweep_jobs(timeline.t0, count)
    if policy == "scavenger":
        return scavenger_replay(timeline, jobs)
    queue = windows == "queue" and trace is not None and sim is not None
    source = QueueWindows(trace, sim) if queue else None  # type: ignore[arg-type]
    result = Replay(
        timeline, jobs, make_policy(policy), max_jobs=None, windows=source, physics=PHYSICS[physics]
    ).run()
    label = f"{policy} ({windows} windows)" if windows else f"{policy} (cap none)"
    return replace(result, policy=label)


def _sweep_jobs(start: float, count: int) -> list[ReplayJob]:
    from parsl_malleable.replay.scenario import bftrainer_dir
    from parsl_malleable.replay.workload import load_replay_workload, sweep

    template = load_replay_workload(bftrainer_dir(), "hps-shufflenet-1000J", limit=1)[0]
    return sweep(replace(template, samples=SWEEP_SAMPLES), count, start)


SATURATED_NODES, SATURATED_BACKLOG, SATURATED_MIX = 1000, 1000, 40
SATURATED_RUNS = (
    ("ours", None),
    ("ours, no debounce", None),
    ("scavenger", None),
    ("freetrain", 10),
    ("freetrain", 30),
    ("freetrain", 100),
    ("freetrain", None),
    ("malletrain", 10),
)


def _saturated_jobs(workload: str, timeline: IdleTimeline) -> list[ReplayJob]:
    if workload == "hps-shufflenet-1000J":
        jobs = hpo_sweep(timeline, SATURATED_BACKLOG, samples=math.inf)
    else:
        jobs = workload_jobs(workload, timeline, limit=SATURATED_MIX)
        jobs = [replace(j, samples=math.inf) for j in jobs]
    return [replace(j, submit=timeline.t0) for j in jobs]


def _saturated_run(
    args: tuple[str, str, int | None, str]
    | tuple[str, str, int | None, str, float | None, int, float],
) -> ReplayResult:
    _quiet()
    policy, workload, cap, physics = args[:4]
    startup, nodes, days = args[4:] if len(args) > 4 else (None, SATURATED_NODES, 1.0)
    timeline = summit_timeline(nodes, days)
    jobs = _saturated_jobs(workload, timeline)
    if policy.startswith("scavenger"):
        if policy.endswith("start-up only"):
            # The scavenger as it was charged before: no requeue hold, no scheduling delay, a
            # checkpoint at the preemption signal.
            plain = scavenger_replay(
                timeline,
                jobs,
                startup_s=startup,
                checkpoint_s=0.0,
                requeue_hold_s=0.0,
                schedule_delay_s=0.0,
            )
            return replace(plain, policy=policy)
        return replace(scavenger_replay(timeline, jobs, startup_s=startup), policy=policy)
    chosen = make_policy(policy.split(",")[0])
    if policy.endswith("no debounce"):
        # What the controller's event debounce costs: decide at once, as freetrain does.
        core = replace(chosen.core, debounce_s=0.0, max_delay_s=0.0)
        chosen = replace(chosen, name=policy, core=core)
    model = replace(PHYSICS[physics], startup_s=startup)
    result = Replay(timeline, jobs, chosen, max_jobs=cap, physics=model).run()
    return replace(result, policy=f"{policy} (cap {cap if cap else 'none'})")


BOUND_HEADER = (
    "| policy | samples (G) | of upper bound | of offline bound | harvested | rescales "
    "| decisions | solver fallbacks | wall (s) | efficiency |\n"
    "|---|---|---|---|---|---|---|---|---|---|"
)


def _bound_row(r: ReplayResult) -> str:
    s = r.summary()
    return (
        f"| {s['policy']} | {r.trained / 1e9:,.3f} | {r.of_upper:.1%} | {r.of_offline:.1%} | "
        f"{s['harvested_fraction']:.1%} | {s['rescales']:,} | {s['decisions']:,} | "
        f"{s['fallbacks']} | {s['wall_s']:.0f} | {s['efficiency']:.1%} |"
    )


def part_saturated(pool: ProcessPoolExecutor, physics: str) -> None:
    for workload in ("hps-shufflenet-1000J", "imagenet-imgps-1001J"):
        began = time.perf_counter()
        runs = [(policy, workload, cap, physics) for policy, cap in SATURATED_RUNS]
        results = list(pool.map(_saturated_run, runs))
        r0 = results[0]
        print(
            f"\nSaturated day, {workload}, {physics} physics: Summit's first "
            f"{SATURATED_NODES} nodes, day 1, {len(r0.jobs)} jobs with unlimited samples "
            f"submitted at the start; {r0.idle_node_seconds / 3600:,.0f} idle node-hours; upper "
            f"bound {r0.upper_bound / 1e9:.3f} G, offline bound {r0.offline_bound / 1e9:.3f} G "
            f"(its own per row: each row's least start); "
            f"{time.perf_counter() - began:.0f} s for the part"
        )
        print(BOUND_HEADER)
        for r in results:
            print(_bound_row(r))


STARTUPS = (5.0, 30.0, 120.0, 300.0)
QUICK_NODES, QUICK_DAYS = 250, 1.0  # --quick: the start-up part on a quarter of the nodes
STARTUP_ROWS = (
    ("ours", None, "runtime"),
    ("ours", None, "freetrain"),
    ("freetrain", None, "runtime"),
    ("freetrain", None, "freetrain"),
    ("scavenger", None, ""),
    ("scavenger, start-up only", None, ""),
)


def part_startup(
    pool: ProcessPoolExecutor, nodes: int = SATURATED_NODES, days: float = 1.0
) -> None:
    """The saturated backlog day at each start-up, under both physics (``nodes``, ``days``:
    a smaller slice of it, for ``--quick``)."""
    workload = "hps-shufflenet-1000J"
    began = time.perf_counter()
    runs = [
        (policy, workload, cap, physics or "runtime", startup, nodes, days)
        for startup in STARTUPS
        for policy, cap, physics in STARTUP_ROWS
    ]
    results = list(pool.map(_saturated_run, runs))
    print(
        f"\nStart-up sensitivity, {workload}: the saturated day (Summit's first "
        f"{nodes} nodes, {days:g} day(s), a {SATURATED_BACKLOG:,}-job backlog); start-up = "
        f"seconds from a "
        f"node's taking to its first step (runtime physics: only the new node waits, then a "
        f"1 s regroup; freetrain physics: the whole job pauses that long at every gain; "
        f"scavenger: its cold start per (re)start); {time.perf_counter() - began:.0f} s"
    )
    print(
        "| start-up (s) | policy | physics | samples (G) | of upper bound "
        "| of offline bound | of its own offline bound | / scavenger | rescales |\n"
        "|---|---|---|---|---|---|---|---|---|"
    )
    per = len(STARTUP_ROWS)
    for i, startup in enumerate(STARTUPS):
        block = results[i * per : (i + 1) * per]
        # One bound per start-up for every row: the runtime physics' (a node trains at the
        # earliest start-up + regroup after its taking), the least any row is charged.
        reference = block[0].offline_bound
        scavenger = block[4].trained
        for r, (_, _, physics) in zip(block, STARTUP_ROWS, strict=True):
            print(
                f"| {startup:g} | {r.policy} | {physics or '-'} | {r.trained / 1e9:,.3f} | "
                f"{r.of_upper:.1%} | {r.trained / reference:.1%} | {r.of_offline:.1%} | "
                f"{r.trained / scavenger:.3f} | {sum(j.rescales for j in r.jobs):,} |"
            )
    scavenger_charges(nodes, days)


# (label, scavenger_replay options): each charge alone, then all (the defaults).
CHARGES: tuple[tuple[str, dict[str, float]], ...] = (
    ("start-up only", {"checkpoint_s": 0.0, "requeue_hold_s": 0.0, "schedule_delay_s": 0.0}),
    ("+ scheduling delay 0.5 s", {"checkpoint_s": 0.0, "requeue_hold_s": 0.0}),
    ("+ requeue hold 120 s", {"checkpoint_s": 0.0, "schedule_delay_s": 0.0}),
    (
        "+ checkpoints every 60 s",
        {"checkpoint_s": 60.0, "requeue_hold_s": 0.0, "schedule_delay_s": 0.0},
    ),
    ("+ checkpoints every 600 s", {"requeue_hold_s": 0.0, "schedule_delay_s": 0.0}),
    ("every charge (the defaults)", {}),
    ("every charge, checkpoints every 60 s", {"checkpoint_s": 60.0}),
)


def scavenger_charges(nodes: int = SATURATED_NODES, days: float = 1.0) -> None:
    """What each of the scavenger's charges costs on the saturated backlog day."""
    timeline = summit_timeline(nodes, days)
    jobs = _saturated_jobs("hps-shufflenet-1000J", timeline)
    base = None
    print(
        f"\nThe scavenger's charges one at a time, the same day ({nodes} nodes), its measured "
        "23 s cold start "
        "(samples against its start-up-only row)\n"
        "| scavenger | samples (G) | of upper bound | / start-up only |\n|---|---|---|---|"
    )
    for label, options in CHARGES:
        r = scavenger_replay(timeline, jobs, **options)  # type: ignore[arg-type]
        base = base or r.trained
        print(f"| {label} | {r.trained / 1e9:,.3f} | {r.of_upper:.1%} | {r.trained / base:.3f} |")


def _row(r: ReplayResult) -> str:
    s = r.summary()
    ttr = s["time_to_result_h"]
    ttr_text = "-" if isinstance(ttr, float) and math.isnan(ttr) else f"{ttr:.1f}"
    return (
        f"| {s['policy']} | {s['finished']}/{s['jobs']} | {r.trained / 1e9:,.1f} | "
        f"{r.of_upper:.1%} | {r.of_offline:.1%} | {ttr_text} | {s['mean_jct_h']:.2f} | "
        f"{s['harvested_fraction']:.1%} | {s['rescales']:,} | {s['decisions']:,} | "
        f"{s['fallbacks']} | {s['wall_s']:.0f} | {s['scaling_efficiency']:.1%} | "
        f"{s['efficiency']:.1%} |"
    )


HEADER = (
    "| policy | jobs done | samples (G) | of upper bound | of offline bound | time to result (h) "
    "| mean JCT (h) | harvested | rescales | decisions | solver fallbacks | wall (s) "
    "| scaling eff. | efficiency |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
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
    time_limit: float = 60.0,
    physics: str = "runtime",
    extra: tuple[tuple[str, int | None], ...] = SUMMIT_EXTRA,
) -> None:
    for workload in workloads:
        began = time.perf_counter()
        runs: list[tuple[str, str, float | None, int | None, float, str]] = [
            (p, workload, days, SUMMIT_CAP, time_limit, physics) for p in policies
        ]
        # Admission (every job a candidate), FreeTrain at larger caps and none, the scavenger.
        runs += [(p, workload, days, cap, time_limit, physics) for p, cap in extra]
        results = list(pool.map(_summit_run, runs))
        r0 = results[0]
        print(
            f"\nSummit {workload}, {physics} physics: {(r0.t1 - r0.t0) / 86400:.1f} days replayed "
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


def part_jct(
    pool: ProcessPoolExecutor,
    nodes: int,
    days: float,
    count: int,
    decay: float,
    physics: str = "runtime",
) -> None:
    for workload in SUMMIT_WORKLOADS:
        runs = [
            (policy, objective, workload, nodes, days, count, decay, physics)
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


def part_traces(pool: ProcessPoolExecutor, physics: str = "runtime") -> None:
    from parsl_malleable.replay.batch import batch_sweep
    from parsl_malleable.replay.slurmfit import slurm_fit_sweep
    from parsl_malleable.traces import read_trace

    kinds = (("ours", "queue"), ("ours", "history"), ("freetrain", ""), ("scavenger", ""))
    for count in SWEEP_SIZES:
        began = time.perf_counter()
        places = (*TRACES, "summit")
        runs = [
            (t, p, w, count, physics)
            for t in places
            for p, w in kinds
            if t != "summit" or w != "queue"
        ]
        results = list(pool.map(_trace_run, runs))
        print(
            f"\nJob traces (EASY backfill) and Summit's idle trace, a {count}-job sweep of "
            f"{SWEEP_SAMPLES / 1e6:.0f} M samples each submitted on day {SWEEP_DAY:.0f}; every "
            f"sweep job a candidate (admission); batch: {BATCH_NODES}-node jobs in the queue; "
            f"slurm-fit: the same with --time-min={FIT_TIME_MIN_S:.0f} s, resubmitted when cut "
            f"off; scavenger: one-node jobs in a preemptable partition with requeue; freetrain "
            f"with no cap (every sweep job a candidate); {physics} physics; "
            f"{time.perf_counter() - began:.0f} s for the replays"
        )
        print(
            "| trace | policy | time to result (h) | mean JCT (h) | of offline bound | harvested "
            "| native delay mean / max (s) | efficiency |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for r, (trace_name, *_) in zip(results, runs, strict=True):
            s = r.summary()
            print(
                f"| {trace_name} | {r.policy} | {s['time_to_result_h']:.2f} | "
                f"{s['mean_jct_h']:.2f} | {r.of_offline:.1%} | {s['harvested_fraction']:.1%} | "
                f"0 / 0 (yields at once) | {s['efficiency']:.1%} |"
            )
        for trace_name in TRACES:
            trace = read_trace(data_file(trace_name))
            jobs = _sweep_jobs(float(trace.jobs["submit"].min()) + SWEEP_DAY * 86400, count)
            batch = batch_sweep(trace, jobs, BATCH_NODES)
            fit = slurm_fit_sweep(trace, jobs, BATCH_NODES, FIT_TIME_MIN_S)
            for name, outcome in (("batch", batch), ("slurm-fit", fit)):
                print(
                    f"| {trace_name} | {name} ({outcome.submissions} jobs) | "
                    f"{outcome.time_to_result_s / 3600:.2f} | - | - | - | "
                    f"{outcome.native_delay_mean_s:.0f} / {outcome.native_delay_max_s:.0f} | - |"
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--part",
        choices=("saturated", "startup", "charges", "summit", "jct", "traces", "all"),
        default="all",
    )
    parser.add_argument(
        "--physics",
        choices=tuple(PHYSICS),
        default="runtime",
        help="the engine's physics (the startup part runs both)",
    )
    parser.add_argument("--days", type=float, help="Summit: only the first D days")
    parser.add_argument("--startup-nodes", type=int, help="startup: Summit's first N nodes")
    parser.add_argument("--startup-days", type=float, help="startup: the first D days")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"startup: Summit's first {QUICK_NODES} nodes for {QUICK_DAYS:g} day, not 1,000",
    )
    parser.add_argument("--policy", action="append", choices=POLICIES)
    parser.add_argument(
        "--extra",
        action="append",
        metavar="POLICY:CAP",
        help="summit: the rows beside the cap-10 ones (repeat; CAP a number or none; "
        "default: ours:none, freetrain:30, freetrain:100, freetrain:none, scavenger:none)",
    )
    parser.add_argument("--workload", action="append", choices=SUMMIT_WORKLOADS)
    parser.add_argument("--jct-nodes", type=int, default=1000)
    parser.add_argument("--jct-days", type=float, default=3.0)
    parser.add_argument("--jct-jobs", type=int, default=40)
    parser.add_argument("--jct-decay", type=float, default=0.5, help="completion_decay")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--time-limit", type=float, default=60.0, help="solver wall-clock safety net (summit)"
    )
    args = parser.parse_args()
    (REPO / "docs" / "img").mkdir(parents=True, exist_ok=True)
    with ProcessPoolExecutor(args.workers) as pool:
        if args.part in ("saturated", "all"):
            part_saturated(pool, args.physics)
        if args.part in ("startup", "all"):
            nodes, days = (QUICK_NODES, QUICK_DAYS) if args.quick else (SATURATED_NODES, 1.0)
            part_startup(pool, args.startup_nodes or nodes, args.startup_days or days)
        if args.part == "charges":  # the startup part prints it too, at its own size
            scavenger_charges()
        if args.part in ("summit", "all"):
            workloads = tuple(args.workload or SUMMIT_WORKLOADS)
            policies = tuple(args.policy or SUMMIT_POLICIES)
            extra = SUMMIT_EXTRA
            if args.extra:
                pairs = [item.split(":", 1) for item in args.extra]
                extra = tuple((p, None if c == "none" else int(c)) for p, c in pairs)
            part_summit(pool, args.days, policies, workloads, args.time_limit, args.physics, extra)
        if args.part in ("jct", "all"):
            part_jct(
                pool, args.jct_nodes, args.jct_days, args.jct_jobs, args.jct_decay, args.physics
            )
        if args.part in ("traces", "all"):
            part_traces(pool, args.physics)


if __name__ == "__main__":
    main()
