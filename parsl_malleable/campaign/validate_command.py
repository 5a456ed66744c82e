"""``parsl-malleable validate CAMPAIGN.yaml``: check a campaign and list the jobs it expands to.

Everything a run checks before it starts, without starting anything: the file (every key, with
its path), the apps (imported, their arguments bound to the training function), the ``parsl:``
options, the site profile (found, its overrides valid) and that every job fits the site. Then
the jobs, sweeps expanded, as a table (``--json`` for scripts), and what each search expands
to: its space, sampler, pruner and budget (its trials are asked while the run goes). ``run
--dry-run`` is the same. Exit status 1, with the reason, for a campaign that a run would refuse.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from parsl_malleable.controller.model import JOB_MAX_NODES
from parsl_malleable.errors import ConfigError, UnsafePathError

if TYPE_CHECKING:  # the spec imports pydantic models and the solvers' names
    from rich.table import Table

    from parsl_malleable.campaign.spec import Campaign
    from parsl_malleable.harvest.site_profile import SiteProfile


def check_campaign(path: Path, site: str | None = None) -> tuple[Campaign, SiteProfile]:
    """The campaign in ``path`` (``site`` instead of its own, as ``run --site`` does) and its
    site profile, checked as a run checks them; :class:`ConfigError` saying what is wrong,
    :class:`UnsafePathError` for a campaign file, an app's code or a site profile that another
    user could have changed (refused before it is read or imported)."""
    from parsl_malleable.campaign.spec import check_site_fits, load_campaign

    campaign = load_campaign(path)  # first: a bad file is answered before Parsl is imported
    from parsl_malleable.campaign.runner import check_parsl_options, site_profile
    from parsl_malleable.campaign.trusted_files import check_site_profile

    if site is not None:
        campaign = campaign.model_copy(update={"site": site, "site_overrides": {}})
    check_site_profile(campaign.site)
    profile = site_profile(campaign, source=str(path))
    check_parsl_options(campaign.parsl, source=str(path))
    check_site_fits(campaign, profile, source=str(path))
    return campaign, profile


def job_rows(campaign: Campaign) -> list[dict[str, Any]]:
    """One mapping per job, sweeps expanded, in run order."""
    return [
        {
            "name": job.name,
            "app": job.app,
            "epochs": job.epochs,
            "min_nodes": job.min_nodes,
            "max_nodes": job.max_nodes,
            "priority": job.priority,
            "backend": job.backend,
            "args": job.call_args(),
            "swept": params,
        }
        for job, params in campaign.expanded()
    ]


def search_rows(campaign: Campaign, default_parallel: int) -> list[dict[str, Any]]:
    """One mapping per search: what its trials get (``args``, ``space``) and its budget."""
    return [
        {
            "name": search.name,
            "app": search.app,
            "trials": search.trials,
            "parallel": search.parallel or default_parallel,
            "jobs": f"{search.trial_name(0)} .. {search.trial_name(search.trials - 1)}",
            "epochs": search.epochs,
            "min_nodes": search.min_nodes,
            "max_nodes": search.max_nodes,
            "args": search.call_args(),
            "space": {n: d.model_dump(exclude_unset=True) for n, d in search.space.items()},
            "space_text": {n: d.describe() for n, d in search.space.items()},
            "sampler": search.sampler.model_dump(exclude_unset=True)
            | {"type": search.sampler.type},
            "pruner": search.pruner.describe(),
            "resource": search.resource or "step",
        }
        for search in campaign.searches
    ]


def node_range(min_nodes: int, max_nodes: int) -> str:
    """``1-4``; ``1+`` for a job with no cap of its own (the default: the site's limits and the
    allocator size it)."""
    return f"{min_nodes}+" if max_nodes >= JOB_MAX_NODES else f"{min_nodes}-{max_nodes}"


def search_lines(rows: list[dict[str, Any]]) -> list[str]:
    """What each search expands to, a few short lines each (they fit 80 columns)."""
    lines = []
    for row in rows:
        sampler = row["sampler"]
        space = [f"{name}: {text}" for name, text in row["space_text"].items()]
        lines += [
            f"search {row['name']}: {row['trials']} trials ({row['jobs']}), {row['parallel']} at "
            f"once, nodes {node_range(row['min_nodes'], row['max_nodes'])}, app {row['app']}",
            f"  space:   {space[0]}",
            *(f"           {text}" for text in space[1:]),
            f"  sampler: {sampler['type']} (seed {sampler.get('seed', 0)})",
            f"  pruner:  {row['pruner']} on {row['resource']}",
            "  args:    " + (", ".join(f"{k}={v}" for k, v in row["args"].items()) or "-"),
        ]
    return lines


def jobs_table(rows: list[dict[str, Any]], title: str) -> Table:
    """The jobs as a rich table."""
    from rich.table import Table

    table = Table(title=title)
    for column in ("job", "app", "epochs", "nodes", "priority", "args"):
        table.add_column(
            column,
            justify="right" if column in ("epochs", "priority") else "left",
            overflow="fold",  # an app's module path is the point of the column: never cut it
            no_wrap=column in ("job", "nodes"),
        )
    for row in rows:
        args = {k: v for k, v in row["args"].items() if k != "epochs"}
        table.add_row(
            row["name"],
            row["app"],
            "-" if row["epochs"] is None else str(row["epochs"]),
            node_range(row["min_nodes"], row["max_nodes"]),
            f"{row['priority']:g}",
            ", ".join(f"{k}={v}" for k, v in args.items()),
        )
    return table


def report(path: Path, *, site: str | None = None, as_json: bool = False) -> None:
    """Check the campaign in ``path`` and print its jobs; :class:`click.ClickException` (exit
    status 1) with the reason for a bad campaign."""
    try:
        campaign, profile = check_campaign(path, site)
    except (ConfigError, UnsafePathError) as exc:
        raise click.ClickException(str(exc)) from None
    rows = job_rows(campaign)
    from parsl_malleable.campaign.spec import site_capacity

    searches = search_rows(campaign, site_capacity(profile)[0])
    if as_json:
        click.echo(
            json.dumps(
                {
                    "campaign": str(path),
                    "site": profile.name,
                    "scheduler": profile.scheduler,
                    "jobs": rows,
                    "searches": searches,
                },
                indent=1,
                default=str,
            )
        )
        return
    from rich.console import Console
    from rich.markup import escape

    console = Console()
    title = f"{path}: {len(rows)} job(s) on site {profile.name!r} ({profile.scheduler})"
    if rows or not searches:
        console.print(jobs_table(rows, escape(title)))
    else:
        console.print(
            escape(f"{path}: searches only, on site {profile.name!r} ({profile.scheduler})")
        )
    for line in search_lines(searches):
        console.print(escape(line), soft_wrap=True)
    console.print(f"campaign {escape(str(path))} is valid")


@click.command(name="validate")
@click.argument("campaign_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--site", default=None, help="site profile to check instead of the campaign's")
@click.option("--json", "as_json", is_flag=True, help="print the jobs as JSON (for scripts)")
def validate(campaign_file: Path, site: str | None, as_json: bool) -> None:
    """Check CAMPAIGN_FILE (keys, apps and their arguments, site profile, job sizes) and print
    the jobs it expands to, without running anything."""
    report(campaign_file, site=site, as_json=as_json)


__all__ = [
    "check_campaign",
    "job_rows",
    "jobs_table",
    "report",
    "search_lines",
    "search_rows",
    "validate",
]
