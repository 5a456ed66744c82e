"""``parsl-malleable run CAMPAIGN.yaml`` and ``parsl-malleable status DIR``."""

from __future__ import annotations

import json
import logging
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.live import Live

from parsl_malleable.errors import ConfigError
from parsl_malleable.inputs import FiniteFloat

if TYPE_CHECKING:  # the runner imports Parsl; --help must stay light
    from parsl_malleable.campaign.runner import CampaignRunner

LIVE_AFTER_S = 1.0  # seconds between refreshes of the live view
LOG_EVERY_S = 15.0  # without a terminal: one summary line this often


def _output_for(campaign_file: Path, configured: str | None, given: Path | None) -> Path:
    if given is not None:
        return given
    if configured:
        path = Path(configured)
        return path if path.is_absolute() else Path.cwd() / path
    return Path.cwd() / "out" / campaign_file.stem


@click.command()
@click.argument("campaign_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--output",
    "-o",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="output folder (default: the campaign's `output`, else out/<file stem>)",
)
@click.option("--site", default=None, help="site profile to use instead of the campaign's")
@click.option(
    "--time-limit",
    type=FiniteFloat(gt=0),
    default=None,
    help="stop after this many seconds (jobs resume at the next run)",
)
@click.option("--quiet", is_flag=True, help="no live view; a summary line now and then")
@click.option(
    "--adopt-folder",
    is_flag=True,
    help="run into an output folder that holds another campaign: it becomes this one's "
    "(the other's jobs stay listed there)",
)
def run(
    campaign_file: Path,
    output: Path | None,
    site: str | None,
    time_limit: float | None,
    quiet: bool,
    adopt_folder: bool,
) -> None:
    """Train the jobs of CAMPAIGN_FILE on harvested nodes; rerun the same command to resume.

    Writes state.sqlite, campaign.log, results.csv, results.parquet, gantt.png and nodes.png
    into the output folder. The folder belongs to the campaign that first ran into it: the
    same file, edited or not, resumes there; another campaign is refused unless
    --adopt-folder is given.
    """
    from parsl_malleable.campaign.display import live_table
    from parsl_malleable.campaign.results import write_results
    from parsl_malleable.campaign.runner import CampaignRunner
    from parsl_malleable.campaign.spec import load_campaign

    console = Console(stderr=True)
    try:
        campaign = load_campaign(campaign_file)
        given = {"time_limit_s": time_limit, "site": site}
        changes: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
        if site is not None:
            changes["site_overrides"] = {}  # overrides were written for the campaign's own site
        campaign = campaign.model_copy(update=changes)
        folder = _output_for(campaign_file, campaign.output, output)
        runner = CampaignRunner(
            campaign, folder, source=str(campaign_file), adopt_folder=adopt_folder
        )
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    # Only our warnings reach the terminal; everything is in campaign.log, and Parsl's own log
    # (where an agent task lost with its block is an ERROR, though expected here) in runinfo/.
    to_terminal = logging.StreamHandler()
    to_terminal.setLevel(logging.WARNING)
    to_terminal.addFilter(lambda record: not record.name.startswith("parsl."))
    to_terminal.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logging.getLogger().addHandler(to_terminal)
    console.print(f"campaign {campaign_file} -> {folder}")
    interactive = console.is_terminal and not quiet
    last_line = [0.0]

    def show(r: CampaignRunner) -> None:
        if interactive:
            live.update(live_table(r), refresh=True)
        elif time.monotonic() - last_line[0] >= LOG_EVERY_S:
            last_line[0] = time.monotonic()
            console.print(_summary_line(r))

    runner.on_sample = show
    # `kill PID` (SIGTERM) stops like Ctrl-C: jobs keep their state, blocks are cancelled.
    signal.signal(signal.SIGTERM, lambda *_: runner.stop())
    with Live(console=console, auto_refresh=False, transient=False) as live:
        if not interactive:
            live.stop()
        try:
            outcome = runner.execute()
        except KeyboardInterrupt:
            outcome = None
        except ConfigError as exc:  # the folder was taken after the check above
            raise click.ClickException(str(exc)) from None
    from parsl_malleable.campaign.store import CampaignStore

    store = CampaignStore(folder)
    try:
        files = write_results(store, folder)
    finally:
        store.close()
    if outcome is None:
        console.print("interrupted: rerun the same command to resume")
        raise SystemExit(130)
    console.print(
        f"run {outcome.run}: {outcome.outcome}; {len(outcome.done)} done, "
        f"{len(outcome.failed)} failed of {len(runner.entries)}"
    )
    for path in files:
        console.print(f"  wrote {path}")
    if outcome.failed:
        raise SystemExit(1)
    if outcome.outcome not in ("finished", "nothing to do"):
        raise SystemExit(3)


def _summary_line(runner: CampaignRunner) -> str:
    assert runner.store is not None
    rows = runner.store.jobs()
    done = sum(1 for r in rows if r.status == "done")
    site = runner.last_site
    nodes = f"{site.harvested} harvested, {site.training} training" if site else "no snapshot yet"
    return f"{time.time() - runner.started:6.0f} s: {done}/{len(rows)} jobs done; {nodes}"


@click.command()
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="print the jobs as JSON")
def status(folder: Path, as_json: bool) -> None:
    """Summarise the campaign in FOLDER, while it runs or after."""
    from parsl_malleable.campaign.display import status_table
    from parsl_malleable.campaign.store import CampaignStore

    try:
        store = CampaignStore(folder, read_only=True)
    except FileNotFoundError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        rows = store.jobs()
        runs = int(store.meta("runs") or 0)
        outcome = store.meta(f"run{runs}_outcome")
        live = (folder / "lifeline.json").exists() and outcome is None
        owner = store.owner()
        meta = {
            "campaign_file": store.meta("campaign_file"),
            # Which campaign the folder belongs to (None: written before folders recorded it).
            "campaign": owner.name if owner else None,
            "campaign_sha256": owner.sha256 if owner else None,
            "runs": str(runs),
            "state": "running now" if live else (outcome or "ended without a word (killed?)"),
        }
    finally:
        store.close()
    if as_json:
        click.echo(
            json.dumps(
                {
                    **meta,
                    "jobs": [
                        {
                            "name": r.name,
                            "status": r.status,
                            "result": r.result,
                            "node_hours": r.node_seconds / 3600,
                            "rescales": r.rescales,
                            "driver_runs": r.submissions,
                            "resumed_from_step": r.resumed_from_step,
                        }
                        for r in rows
                    ],
                },
                indent=1,
            )
        )
        return
    Console().print(status_table(rows, meta))


__all__ = ["run", "status"]
