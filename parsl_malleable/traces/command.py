"""The ``parsl-malleable trace`` command: read a job trace, print a summary, export the jobs."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from parsl_malleable.errors import ConfigError, TraceFormatError
from parsl_malleable.inputs import require_parquet

if TYPE_CHECKING:  # the readers import pandas; --help must stay light
    from parsl_malleable.traces.schema import JobTrace, ReadReport

# The names traces.read.READERS and ALIASES accept, spelled out so that --help does not import
# the readers (tests/test_cli_help.py checks they are the same).
FORMAT_NAMES = ("cobalt", "pbs", "pbspro", "sacct", "slurm", "swf", "torque")


@click.command(name="trace")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMAT_NAMES),
    help="Trace format; guessed from the name and first lines when omitted.",
)
@click.option("--cores-per-node", type=click.IntRange(min=1), help="SWF: cores per node.")
@click.option("--nodes", type=click.IntRange(min=1), help="Machine size (needed for Cobalt).")
@click.option("--skip-bad", is_flag=True, help="Skip malformed lines (counted) instead of failing.")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the jobs table to this .csv or .parquet file.",
)
def trace(
    path: Path,
    fmt: str | None,
    cores_per_node: int | None,
    nodes: int | None,
    skip_bad: bool,
    out: Path | None,
) -> None:
    """Read the job trace PATH and summarise it in the common schema."""
    if out is not None and out.suffix.lower() not in {".csv", ".parquet"}:
        raise click.BadParameter("must end in .csv or .parquet", param_hint="--out")
    if out is not None and out.suffix.lower() == ".parquet":
        try:
            require_parquet()
        except ConfigError as exc:
            raise click.ClickException(str(exc)) from None
    from parsl_malleable.traces.read import read_trace

    options: dict[str, object] = {"skip_bad": skip_bad}
    if cores_per_node is not None:
        options["cores_per_node"] = cores_per_node
    if nodes is not None:
        options["nodes"] = nodes
    try:
        result = read_trace(path, fmt, **options)
    except TraceFormatError as exc:
        raise click.ClickException(str(exc)) from None
    except (ValueError, TypeError) as exc:
        raise click.ClickException(f"{path}: {exc}") from None
    Console(width=100).print(summary_table(result), report_table(result))
    if out is not None:
        if out.suffix.lower() == ".csv":
            result.jobs.to_csv(out, index=False)
        else:
            result.jobs.to_parquet(out, index=False)
        click.echo(f"wrote {len(result.jobs)} jobs to {out}")


def summary_table(result: JobTrace) -> Table:
    """Jobs, machine, time span and offered utilisation."""
    from parsl_malleable.traces.summary import summarize

    figures = summarize(result)
    machine = result.machine
    table = Table(title="Trace", show_header=False)
    table.add_row("jobs", f"{figures.jobs:,}")
    table.add_row(
        "machine", f"{machine.name}: {machine.nodes:,} nodes x {machine.cores_per_node} cores"
    )
    table.add_row(
        "submits",
        f"{_when(machine.start_epoch, figures.first_submit)} .. "
        f"{_when(machine.start_epoch, figures.last_submit)}",
    )
    days = (figures.last_submit - figures.first_submit) / 86400 if figures.jobs else 0.0
    table.add_row("span", f"{days:.1f} days")
    table.add_row("node-hours", f"{figures.node_hours:,.0f} ({figures.jobs_with_runtime:,} jobs)")
    load = figures.offered_load
    table.add_row("offered utilisation", "n/a" if math.isnan(load) else f"{load:.1%}")
    return table


def report_table(result: JobTrace) -> Table:
    """What the reader repaired or skipped."""
    report = result.report
    table = Table(title="Read report", show_header=False)
    if report.format:
        table.add_row("format", Text(f"{report.format} ({report.format_reason})"))
    table.add_row("records read", f"{report.lines_read:,}")
    table.add_row("skipped", f"{report.skipped:,}")
    for kind in sorted(report.repairs):
        table.add_row(kind, Text(report.describe(kind)))
    for text in report.skipped_examples:
        table.add_row("example", Text(text))  # file content: never rich markup
    return table


def report_lines(report: ReadReport) -> list[str]:
    """The read report as plain lines, for commands that print it under their own output."""
    lines = []
    if report.format:
        lines.append(f"trace format {report.format} ({report.format_reason})")
    lines.append(f"records read {report.lines_read:,}, skipped {report.skipped:,}")
    lines += [f"  {kind}: {report.describe(kind)}" for kind in sorted(report.repairs)]
    lines += [f"  skipped: {text}" for text in report.skipped_examples]
    return lines


def _when(epoch: float, seconds: float) -> str:
    if math.isnan(seconds):
        return "?"
    return datetime.fromtimestamp(epoch + seconds, tz=UTC).strftime("%Y-%m-%d %H:%M")
