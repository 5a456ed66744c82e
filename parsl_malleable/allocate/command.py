"""``parsl-malleable allocate``: one allocation of idle nodes to FreeTrain-style training jobs."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import click
from rich.console import Console
from rich.table import Table

from parsl_malleable.allocate.settings import SOLVE_DEFAULTS, PauseRate
from parsl_malleable.errors import MalleableError
from parsl_malleable.inputs import FiniteFloat

# allocate.objectives.OBJECTIVES and allocate.options.MAX_NODES, spelled out so that --help does
# not import the solvers (pulp, pandas); tests/test_cli_help.py checks they are the same.
OBJECTIVE_NAMES = ("throughput", "weighted", "speedup", "maxmin")
MAX_NODES = 1_000_000


@click.command(name="allocate")
@click.option(
    "--workload-dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    required=True,
    help="Folder holding <workload>-jobs.csv and <workload>-scaling.csv (FreeTrain format).",
)
@click.option("--workload", default="imagenet-imgps-1001J", show_default=True)
@click.option("--jobs", "n_jobs", type=click.IntRange(1), default=10, show_default=True)
@click.option(
    "--nodes",
    "n_nodes",
    type=click.IntRange(1, MAX_NODES),
    default=100,
    show_default=True,
    help=f"Nodes, free and held (at most {MAX_NODES:,}).",
)
@click.option(
    "--idle-intervals",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="node,idle_start,idle_end CSV: draw each node's remaining window from it.",
)
@click.option(
    "--objective",
    type=click.Choice(OBJECTIVE_NAMES),
    default=SOLVE_DEFAULTS.objective,
    show_default=True,
)
@click.option(
    "--pause-rate",
    type=click.Choice(["after", "before"]),
    default=SOLVE_DEFAULTS.pause_rate,
    show_default=True,
    help="Charge a rescale's pause at the rate after it (the runtime) or before it (FreeTrain).",
)
@click.option(
    "--solver",
    type=click.Choice(["highs", "cbc", "greedy", "equal"]),
    default=SOLVE_DEFAULTS.solver,
    show_default=True,
)
@click.option(
    "--time-limit",
    type=FiniteFloat(gt=0),
    default=SOLVE_DEFAULTS.time_limit_s,
    show_default=True,
    help="Seconds (a live decision's budget; give more for a one-off solve).",
)
@click.option(
    "--mip-node-limit",
    type=click.IntRange(0),
    default=None,
    help="Most branch-and-bound nodes per solve: the same answer on any machine (with "
    "--time-limit as a safety net).",
)
@click.option("--node-cap", type=click.IntRange(0), default=None, help="Most nodes harvested.")
@click.option("--seed", type=int, default=0, show_default=True)
def allocate(
    workload_dir: Path,
    workload: str,
    n_jobs: int,
    n_nodes: int,
    idle_intervals: Path | None,
    objective: str,
    pause_rate: str,
    solver: str,
    time_limit: float,
    mip_node_limit: int | None,
    node_cap: int | None,
    seed: int,
) -> None:
    """Solve one allocation of N idle nodes to the first J jobs of a workload and print it.

    About half the nodes start held by running jobs (so scale-up, scale-down and no-migration
    all matter); the rest are free. With --idle-intervals each node gets a remaining window
    drawn from a real idle trace, and the blocks to request are sized from those windows.
    """
    from parsl_malleable.allocate.api import allocate as solve_allocation
    from parsl_malleable.allocate.blocks import size_blocks
    from parsl_malleable.allocate.instances import make_instance, summit_remaining_windows
    from parsl_malleable.allocate.workload import load_workload

    console = Console()
    try:
        jobs = load_workload(workload_dir, workload, limit=n_jobs)
        remaining = (
            summit_remaining_windows(idle_intervals, n_nodes, seed=seed)
            if idle_intervals is not None
            else None
        )
        instance = make_instance(jobs, n_nodes, remaining, seed=seed)
        result = solve_allocation(
            instance.jobs,
            instance.free_nodes,
            instance.windows,
            objective=objective,
            pause_rate=cast(PauseRate, pause_rate),
            solver=solver,
            time_limit=time_limit,
            mip_node_limit=mip_node_limit,
            node_cap=node_cap,
        )
        blocks = size_blocks(result, jobs=instance.jobs)
    except MalleableError as exc:
        raise click.ClickException(str(exc)) from exc

    table = Table(title=f"{objective} allocation of {n_nodes} nodes to {len(jobs)} jobs")
    expired = set(result.expired)  # window over: the node leaves whatever the solver says
    for column in ("job", "before", "after", "added", "released", "expired"):
        table.add_column(column, justify="left" if column == "job" else "right")
    for job in instance.jobs:
        table.add_row(
            job.name,
            str(len(job.current_nodes)),
            str(result.nodes[job.name]),
            str(len(result.added[job.name])),
            str(len(set(result.released[job.name]) - expired)),
            str(len(set(result.released[job.name]) & expired)),
        )
    console.print(table)
    fallback = " (greedy fallback)" if result.fallback else ""
    console.print(
        f"solver {result.solver}{fallback}: {result.status}; objective {result.objective:,.1f}; "
        f"{result.total_nodes} nodes used; build {result.build_s:.3f} s, "
        f"solve {result.solve_s:.3f} s; horizon {result.horizon_s:.0f} s"
    )
    if result.message:
        console.print(result.message)
    if blocks:
        console.print(
            "blocks to request: "
            + ", ".join(f"{b.nodes} x {b.walltime_s / 60:.0f} min" for b in blocks)
        )
