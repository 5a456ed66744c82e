"""``parsl-malleable windows TRACE``: how well are idle windows predicted on a replayed trace?"""

from __future__ import annotations

import math
from pathlib import Path

import click

from parsl_malleable.errors import MalleableError
from parsl_malleable.inputs import FiniteFloat


def _pct(x: float) -> str:
    return "-" if math.isnan(x) else f"{100 * x:.1f}%"


@click.command(name="windows")
@click.argument("trace", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--policy",
    type=click.Choice(["easy", "conservative", "fcfs"]),
    default="easy",
    show_default=True,
    help="Scheduling policy of the replay (and of the planner).",
)
@click.option(
    "--quantile",
    type=FiniteFloat(ge=0.0, le=1.0),
    default=0.1,
    show_default=True,
    help="Window quantile the blocks use (0.1: the node stays idle that long w.p. ~90%).",
)
@click.option(
    "--choose",
    type=click.Choice(["expected", "quantile", "both"]),
    default="both",
    show_default=True,
    help="Corrected block length: expected net harvest of the draws, the --quantile, or both.",
)
@click.option(
    "--yield-penalty",
    type=FiniteFloat(ge=0),
    default=0.0,
    show_default=True,
    help="Seconds an early yield costs beyond the lost work (used by --choose expected).",
)
@click.option(
    "--startup",
    type=FiniteFloat(ge=0),
    default=60.0,
    show_default=True,
    help="Seconds of node time every block spends starting.",
)
@click.option(
    "--commit-interval",
    type=FiniteFloat(ge=1),
    default=60.0,
    show_default=True,
    help="Seconds between commits (a yield loses the rest).",
)
@click.option(
    "--max-events",
    type=click.IntRange(min=1),
    default=2000,
    show_default=True,
    help="Events evaluated, in --segments contiguous runs spread over the trace.",
)
@click.option("--all-events", is_flag=True, help="Evaluate every event after the warm-up.")
@click.option("--segments", type=click.IntRange(min=1), default=4, show_default=True)
@click.option(
    "--samples",
    type=click.IntRange(min=1),
    default=16,
    show_default=True,
    help="Monte-Carlo draws per prediction.",
)
@click.option(
    "--horizon",
    type=FiniteFloat(ge=60),
    default=86400.0,
    show_default=True,
    help="Longest window predicted (seconds).",
)
@click.option("--no-arrivals", is_flag=True, help="Do not resample future submissions.")
@click.option(
    "--calibrate",
    is_flag=True,
    help="Also score the quantile recalibrated online from windows that have ended "
    "(the draws' level, and the conformal factor; with coverage at q and 0.5).",
)
@click.option(
    "--plot",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write a predicted-vs-actual PNG here.",
)
@click.option("--seed", type=int, default=0, show_default=True)
def windows(
    trace: Path,
    policy: str,
    quantile: float,
    choose: str,
    yield_penalty: float,
    startup: float,
    commit_interval: float,
    max_events: int,
    all_events: bool,
    segments: int,
    samples: int,
    horizon: float,
    no_arrivals: bool,
    calibrate: bool,
    plot: Path | None,
    seed: int,
) -> None:
    """Replay TRACE, predict every idle node's window at each scheduling event, and print the
    accuracy and the node-hours a block-per-prediction policy would harvest (vs an oracle and
    vs the naive limits-only planner)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from parsl_malleable.traces.command import report_lines
    from parsl_malleable.traces.read import read_trace
    from parsl_malleable.windows.accounting import BlockCosts
    from parsl_malleable.windows.evaluate import EvalConfig, evaluate

    config = EvalConfig(
        policy=policy,
        quantile=quantile,
        choose=choose,
        costs=BlockCosts(
            startup=startup, commit_interval=commit_interval, yield_penalty=yield_penalty
        ),
        samples=samples,
        horizon=horizon,
        segments=1 if all_events else segments,
        segment_events=None if all_events else max(1, max_events // segments),
        arrivals=not no_arrivals,
        calibrate=calibrate,
        seed=seed,
    )
    try:
        job_trace = read_trace(trace)
        result = evaluate(job_trace, config)
    except (MalleableError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc

    console = Console(width=max(Console().width, 110))
    console.print(Text("\n".join(report_lines(job_trace.report))))
    days = sum(b - a for a, b in result.periods) / 86400
    console.print(
        f"[bold]{trace.name}[/bold]: {job_trace.machine.nodes} nodes, policy {policy}; "
        f"{result.events} events in {len(result.periods)} run(s) covering {days:.1f} days, "
        f"{result.predictions} predictions, {result.seconds:.1f} s"
    )
    table = Table(title="Idle-window prediction")
    for col in (
        "predictor",
        "windows",
        "MAE h",
        "over",
        "blocks",
        "yields",
        "harvest nh",
        "of oracle",
        "lost",
    ):
        table.add_column(col, justify="left" if col == "predictor" else "right")
    rows = result.table()
    for row, name in zip(rows.itertuples(), result.names(), strict=True):
        h = result.harvest[name]
        table.add_row(
            row.predictor,
            f"{row.windows:,}",
            f"{row.median_abs_error_h:.2f}",
            _pct(row.over_predicted),
            f"{row.blocks:,}",
            f"{h['over_predicted']:,}",
            f"{row.harvest_node_h:,.1f}",
            _pct(row.of_oracle),
            _pct(row.lost_fraction),
        )
    table.add_row(
        "oracle", "", "0.00", "0.0%", "", "0", f"{result.oracle_node_hours:,.1f}", "100.0%", "0.0%"
    )
    console.print(table)
    console.print(
        f"{result.native_ends:,} idle intervals (> start-up) ended by a native job: a policy "
        "that harvests every hole to its end yields about once per interval"
    )
    if calibrate:
        for row in result.coverage().itertuples():
            console.print(
                f"q={row.quantile:g} {row.method}: over-predicted {_pct(row.over_predicted)} "
                f"of {row.windows:,} windows (target about {_pct(row.quantile)})"
            )
    if plot is not None:
        from parsl_malleable.windows.plots import plot_predicted_vs_actual

        plot_predicted_vs_actual(result, plot)
        console.print(f"plot written to {plot}")
