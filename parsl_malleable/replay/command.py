"""The ``parsl-malleable replay`` command: what each policy would harvest and train."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich import box
from rich.console import Console
from rich.table import Table

from parsl_malleable.errors import MalleableError
from parsl_malleable.inputs import FiniteFloat

if TYPE_CHECKING:  # the replay imports the simulator (numba), pandas and the solvers
    from parsl_malleable.replay.result import ReplayResult

# replay.policies.POLICIES and replay.scenario.WORKLOADS, spelled out so that --help imports
# none of the replay (it took 7-15 s); tests/test_cli_help.py checks they are the same.
POLICY_NAMES = ("freetrain", "malletrain", "ours", "ours+curves", "greedy", "marginal")
WORKLOADS = ("imagenet-imgps-1001J", "imagenet-spdup-1001J", "hps-shufflenet-1000J")

# --demo: a day of 500 of Summit's nodes, 20 jobs, the three policies
DEMO_NODES, DEMO_DAYS, DEMO_JOBS = 500, 1.0, 20
DEMO_POLICIES = ("freetrain", "malletrain", "ours")


def _percent(value: object) -> str:
    return "-" if not isinstance(value, float) or math.isnan(value) else f"{value:.1%}"


def _hours(value: object) -> str:
    return "-" if not isinstance(value, float) or math.isnan(value) else f"{value:.2f}"


# (key, header) of every column, in order; a header's lines break where it says "\n".
COLUMNS: tuple[tuple[str, str], ...] = (
    ("policy", "policy"),
    ("jobs", "jobs\ndone"),
    ("samples", "samples\n(G)"),
    ("of_upper", "% of\nupper\nbound"),
    ("of_offline", "% of\noffline\nbound"),
    ("time_to_result", "to\nresult\n(h)"),
    ("mean_jct", "mean\nJCT (h)"),
    ("harvested", "harvested"),
    ("rescales", "rescales"),
    ("decisions", "decisions"),
    ("wall", "wall\n(s)"),
    ("efficiency", "efficiency"),
)
# The default columns, which fit 80 columns (1,001 jobs, 100.0%, 123456 rescales included):
# samples against the bounds first, then how soon and at what churn. --wide shows them all.
NARROW = (
    "policy",
    "jobs",
    "samples",
    "of_upper",
    "of_offline",
    "time_to_result",
    "harvested",
    "rescales",
)


# Shown only when some replay has a decision its solver's wall-clock limit stopped: its figures
# then depend on the machine's speed (docs/replay.md, "Determinism").
TIME_LIMITED = ("time_limited", "time-\nlimited")


def _cells(r: ReplayResult) -> dict[str, str]:
    s = r.summary()
    return {
        "time_limited": str(getattr(r, "time_limited", 0)),
        "policy": r.policy,
        "jobs": f"{s['finished']}/{s['jobs']}",
        "samples": f"{float(s['samples']) / 1e9:.3f}",
        "of_upper": _percent(s["of_upper"]),
        "of_offline": _percent(s["of_offline"]),
        "time_to_result": _hours(s["time_to_result_h"]),
        "mean_jct": _hours(s["mean_jct_h"]),
        "harvested": _percent(s["harvested_fraction"]),
        "rescales": str(s["rescales"]),
        "decisions": str(s["decisions"]),
        "wall": f"{s['wall_s']:.1f}",
        "efficiency": _percent(s["efficiency"]),
    }


def result_table(results: list[ReplayResult], *, wide: bool = True) -> Table:
    """One row per policy: samples against what the idle nodes allow first, efficiency last
    (it rewards holding fewer nodes, so it is no headline). ``wide=False``: the columns of
    :data:`NARROW` only, which fit 80 columns (every figure is in ``summary.csv``). A column of
    decisions stopped by the solver's wall-clock limit follows the policy's when any is."""
    keys = [key for key, _ in COLUMNS if wide or key in NARROW]
    if any(getattr(r, "time_limited", 0) for r in results):
        keys.insert(1, TIME_LIMITED[0])
    table = Table(
        title="replay", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0)
    )
    headers = dict((*COLUMNS, TIME_LIMITED))
    for key in keys:
        table.add_column(headers[key], justify="left" if key == "policy" else "right", no_wrap=True)
    for r in results:
        cells = _cells(r)
        table.add_row(*(cells[key] for key in keys))
    return table


def print_table(console: Console, table: Table) -> None:
    """Print ``table`` whole: on a console narrower than it, in lines as long as it needs
    (a terminal wraps them; a file or pipe keeps them) rather than with cells cut short."""
    needed = console.measure(table, options=console.options.update_width(10_000)).maximum
    width = console.width
    console.width = max(width, needed)
    try:
        console.print(table)
    finally:
        console.width = width


def write_results(results: list[ReplayResult], out: Path) -> list[Path]:
    """``summary.csv`` (one row per policy) and ``jobs.csv`` (one row per policy and job)."""
    out.mkdir(parents=True, exist_ok=True)
    summary, jobs = out / "summary.csv", out / "jobs.csv"
    rows = [r.summary() for r in results]
    with summary.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    job_rows = [{"policy": r.policy, **row} for r in results for row in r.job_rows()]
    with jobs.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(job_rows[0]))
        writer.writeheader()
        writer.writerows(job_rows)
    return [summary, jobs]


@click.command(name="replay")
@click.option("--demo", is_flag=True, help="Summit, 500 nodes, 1 day, 20 ImageNet jobs.")
@click.option(
    "--trace",
    "trace_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A job trace: its EASY-backfill schedule's idle nodes (default: the Summit idle trace).",
)
@click.option("--workload", type=click.Choice(WORKLOADS), default=WORKLOADS[0], show_default=True)
@click.option("--jobs", type=click.IntRange(min=1), help="First N jobs of the workload.")
@click.option("--nodes", type=click.IntRange(min=1), help="Summit: only the first N nodes.")
@click.option("--days", type=FiniteFloat(gt=0), help="Only the first D days of the timeline.")
@click.option(
    "--policy",
    "policies",
    type=click.Choice((*POLICY_NAMES, "scavenger")),
    multiple=True,
    help="Policy to replay (repeat; default: freetrain, malletrain, ours); scavenger: "
    "one-node jobs in a preemptable partition with requeue, no resizing.",
)
@click.option(
    "--objective",
    type=click.Choice(["throughput", "completion"]),
    default="throughput",
    show_default=True,
)
@click.option(
    "--max-jobs",
    type=click.IntRange(min=1),
    default=None,
    help="Admit at most N jobs at a time, first come first served (FreeTrain's maxJ is 10); "
    "default: every submitted job is a candidate and the allocator decides how many run.",
)
@click.option("--t-fwd", type=FiniteFloat(gt=0), default=600.0, show_default=True)
@click.option(
    "--calibration",
    "calibration_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Costs measured on the real runtime (benchmarks/bench_block_start.py writes them): "
    "nodes train that long after they go idle, rescales pause as measured (the Replay page of "
    "the project's documentation).",
)
@click.option(
    "--physics",
    type=click.Choice(["runtime", "freetrain"]),
    default="runtime",
    show_default=True,
    help="runtime: a new node starts while the job trains on, then the job regroups; "
    "freetrain: every change pauses the whole job its Tcup/Tcdw (FreeTrain's model).",
)
@click.option(
    "--startup",
    "startup_s",
    type=FiniteFloat(ge=0),
    help="Seconds from a node's taking to its first step (runtime physics; freetrain: the "
    "start pause), and the scavenger's start-up (default: 7 s; scavenger 23 s).",
)
@click.option(
    "--block-walltime",
    "block_walltime_s",
    type=FiniteFloat(gt=0),
    help="Serve the nodes as the live provider does: in blocks of at most S seconds (its "
    "profile's max_walltime_s), each a new start, planned with their deadlines instead of "
    "windows predicted from the history of idle intervals.",
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), help="Write CSVs here.")
@click.option(
    "--wide",
    is_flag=True,
    help="Every column of the table (mean JCT, decisions, wall time, efficiency too), in lines "
    "as long as they need; the default columns fit 80.",
)
def replay(
    demo: bool,
    trace_path: Path | None,
    workload: str,
    jobs: int | None,
    nodes: int | None,
    days: float | None,
    policies: tuple[str, ...],
    objective: str,
    max_jobs: int | None,
    t_fwd: float,
    calibration_path: Path | None,
    physics: str,
    startup_s: float | None,
    block_walltime_s: float | None,
    seed: int,
    out: Path | None,
    wide: bool,
) -> None:
    """Replay an idle-node timeline with a training workload under each policy."""
    from parsl_malleable.replay.calibration import apply_calibration, load_calibration
    from parsl_malleable.replay.engine import replay as run_replay
    from parsl_malleable.replay.policies import make_policy
    from parsl_malleable.replay.scavenger import scavenger_replay
    from parsl_malleable.replay.scenario import summit_timeline, trace_timeline, workload_jobs
    from parsl_malleable.replay.workload import Physics

    console = Console()
    status = Console(stderr=True)  # progress messages: not in the output a script reads
    if demo:
        nodes, days, jobs = nodes or DEMO_NODES, days or DEMO_DAYS, jobs or DEMO_JOBS
    try:
        if trace_path is not None:
            # The trace's EASY schedule runs the simulator, compiled with numba on a first run.
            from parsl_malleable.harvest.warmup import load_with_status

            load_with_status(status)
            with status.status(f"simulating {trace_path.name} under EASY backfill ..."):
                timeline = trace_timeline(trace_path, days)
        else:
            timeline = summit_timeline(nodes, days)
        work = workload_jobs(workload, timeline, jobs, keep_submits=not (demo or days or nodes))
        if calibration_path is not None:
            timeline, work = apply_calibration(timeline, work, load_calibration(calibration_path))
        results = []
        for name in policies or DEMO_POLICIES:
            with console.status(f"replaying {name} ..."):
                if name == "scavenger":
                    result = scavenger_replay(timeline, work, startup_s=startup_s)
                else:
                    policy = make_policy(name, t_fwd=t_fwd, objective=objective)
                    result = run_replay(
                        timeline,
                        work,
                        policy,
                        max_jobs=max_jobs,
                        seed=seed,
                        physics=Physics(physics, startup_s),  # type: ignore[arg-type]
                        block_walltime_s=block_walltime_s,
                    )
            results.append(result)
            console.print(f"{name}: done in {result.wall_s:.1f} s")
    except MalleableError as exc:
        raise click.ClickException(str(exc)) from exc
    console.print(
        f"{timeline.source}: {timeline.nodes} nodes, "
        f"{(timeline.t1 - timeline.t0) / 86400:.2f} days, {len(work)} jobs ({workload})"
    )
    print_table(console, result_table(results, wide=wide))
    if not wide:
        console.print("mean JCT, decisions, wall time, efficiency: --wide (every figure: --out)")
    if out is not None:
        for path in write_results(results, out):
            console.print(f"wrote {path}")


__all__ = ["COLUMNS", "NARROW", "print_table", "replay", "result_table", "write_results"]
