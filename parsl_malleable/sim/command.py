"""The ``parsl-malleable sim`` command: replay a trace, print statistics, write jobs and holes."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from parsl_malleable.errors import MalleableError
from parsl_malleable.inputs import FiniteFloat, require_parquet

if TYPE_CHECKING:  # the simulator imports numba and pandas; --help must stay light
    from rich.table import Table

    from parsl_malleable.sim.stats import SimStats
    from parsl_malleable.sim.trace_replay import SimResult

DEMO_JOBS, DEMO_NODES = 5000, 512
# The choices of sim.engine.POLICIES and sim.trace_replay.END_CUTS, spelled out so that --help does
# not import the simulator (tests/test_cli_help.py checks they are the same).
POLICY_NAMES = ("fcfs", "easy", "conservative")
END_CUT_NAMES = ("last_submit", "last_end")


@click.command(name="sim")
@click.argument(
    "trace_path",
    metavar="[TRACE]",
    required=False,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
)
@click.option("--policy", type=click.Choice(POLICY_NAMES), default="easy", show_default=True)
@click.option("--nodes", type=click.IntRange(min=1), help="Machine size (default: the trace's).")
@click.option("--cores-per-node", type=click.IntRange(min=1), help="SWF: cores per node.")
@click.option("--trace-format", "trace_format", help="Trace format (default: guessed).")
@click.option(
    "--warmup",
    type=FiniteFloat(ge=0),
    default=0.0,
    show_default=True,
    help="Seconds after the first submit excluded from the idle statistics.",
)
@click.option(
    "--end-cut",
    type=click.Choice(END_CUT_NAMES),
    default="last_submit",
    show_default=True,
    help="Where the idle statistics stop: the last submit, or the last job end (drain).",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory for jobs.<fmt> and idle.<fmt>.",
)
@click.option(
    "--format",
    "out_format",
    type=click.Choice(["csv", "parquet"]),
    default="csv",
    show_default=True,
)
@click.option(
    "--demo",
    is_flag=True,
    help=f"Simulate the built-in synthetic trace ({DEMO_JOBS} jobs, {DEMO_NODES} nodes).",
)
def sim(
    trace_path: Path | None,
    policy: str,
    nodes: int | None,
    cores_per_node: int | None,
    trace_format: str | None,
    warmup: float,
    end_cut: str,
    out: Path | None,
    out_format: str,
    demo: bool,
) -> None:
    """Replay the job trace TRACE under FCFS, EASY or conservative backfill; report idle holes."""
    if demo == (trace_path is not None):
        raise click.UsageError("give either a TRACE file or --demo")
    from rich.console import Console
    from rich.text import Text

    from parsl_malleable.sim.trace_replay import simulate, warm_up

    t0 = time.perf_counter()
    try:
        if out is not None and out_format == "parquet":
            require_parquet()  # before the work, not after it

        if demo:
            from parsl_malleable.traces.synthetic import synthetic_trace

            trace = synthetic_trace(DEMO_JOBS, DEMO_NODES, seed=0)
            source = f"synthetic demo trace ({DEMO_JOBS} jobs, {DEMO_NODES} nodes, seed 0)"
        else:
            from parsl_malleable.traces.read import detect_format, read_trace

            assert trace_path is not None  # checked above: a trace or --demo
            options: dict[str, int] = {}
            if cores_per_node is not None:
                options["cores_per_node"] = cores_per_node
            fmt = trace_format or detect_format(trace_path)
            if fmt.lower() == "cobalt" and nodes is not None:
                options["nodes"] = nodes  # Cobalt logs do not state the machine size
            trace = read_trace(trace_path, trace_format, **options)
            source = str(trace_path)
        read_s = time.perf_counter() - t0
        # A first run compiles the event loop (15-25 s on 2 cores): say so, on stderr.
        with Console(stderr=True).status(
            "loading the simulator's event loop (numba; a first run on this machine compiles "
            "it, about 15-25 s) ..."
        ):
            jit_s = warm_up()
        result = simulate(trace, policy, nodes=nodes, warmup=warmup, end_cut=end_cut)
    except (MalleableError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None

    console = Console(width=100)
    if not demo:
        from parsl_malleable.traces.command import report_lines

        console.print(Text("\n".join(report_lines(trace.report))))
    console.print(stats_table(result, source, read_s, jit_s))
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        written = write_result(result, out, out_format)
        console.print("wrote " + ", ".join(str(p) for p in written))


def stats_table(result: SimResult, source: str, read_s: float, jit_s: float) -> Table:
    """A rich table of the statistics and speed of one simulation."""
    from rich.table import Table

    s = result.stats
    table = Table(title=f"{s.policy} on {s.nodes} nodes: {source}", show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value")
    dropped = ", ".join(_dropped(s, k, v) for k, v in s.dropped.items() if v) or "none"
    adjusted = ", ".join(f"{k} {v}" for k, v in s.adjusted.items() if v) or "none"
    rows = [
        ("jobs simulated", f"{s.jobs_simulated} of {s.jobs_in} (dropped: {dropped})"),
        ("adjusted", adjusted),
        ("window", f"{s.window_start:.0f} .. {s.window_end:.0f} s"),
        ("idle fraction", f"{s.idle_fraction:.4f}"),
        ("holes", str(s.holes)),
        (
            "hole length p25/p50/p75/p90",
            " / ".join(_dur(v) for v in (s.hole_p25, s.hole_p50, s.hole_p75, s.hole_p90)),
        ),
        (
            "idle node-hours by hole length",
            ", ".join(f"{k} {v:.0f}" for k, v in s.hole_node_hours.items()),
        ),
        ("wait mean / median", f"{_dur(s.wait_mean)} / {_dur(s.wait_median)}"),
        ("bounded slowdown (mean, 10 s)", f"{s.bounded_slowdown_mean:.2f}"),
        ("backfilled jobs", str(s.backfilled)),
        ("read trace", f"{read_s:.2f} s"),
        ("load compiled event loop (once per process)", f"{jit_s:.2f} s"),
        (
            "simulate",
            f"{s.seconds:.3f} s = {s.jobs_per_second:,.0f} jobs/s "
            f"(event loop {result.timing['kernel_s']:.3f} s)",
        ),
    ]
    for what, value in rows:
        table.add_row(what, value)
    return table


def write_result(result: SimResult, out: Path, fmt: str) -> list[Path]:
    """Write ``jobs.<fmt>`` and ``idle.<fmt>`` into ``out``; return their paths."""
    paths = [out / f"jobs.{fmt}", out / f"idle.{fmt}"]
    for frame, path in zip((result.jobs, result.idle), paths, strict=True):
        if fmt == "csv":
            frame.to_csv(path, index=False)
        else:
            frame.to_parquet(path, index=False)
    return paths


def _dropped(stats: SimStats, why: str, count: int) -> str:
    ids = stats.dropped_jobs.get(why, [])
    more = ", ..." if count > len(ids) else ""
    return f"{why} {count} (jobs {', '.join(map(str, ids))}{more})" if ids else f"{why} {count}"


def _dur(seconds: float) -> str:
    if seconds != seconds:  # NaN: no value
        return "-"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
