"""``parsl-malleable run CAMPAIGN.yaml`` and ``parsl-malleable status DIR``."""

from __future__ import annotations

import errno
import json
import logging
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.live import Live

from parsl_malleable.errors import ConfigError, StateStoreError, UnsafePathError
from parsl_malleable.inputs import FiniteFloat

if TYPE_CHECKING:  # the runner imports Parsl; --help must stay light
    from parsl_malleable.campaign.runner import CampaignRunner, RunOutcome
    from parsl_malleable.campaign.store import JobProgress, JobRow

LIVE_AFTER_S = 1.0  # seconds between refreshes of the live view
LOG_EVERY_S = 15.0  # without a terminal: one summary line this often


def _output_for(
    campaign_file: Path, configured: str | None, given: Path | None, demo: bool = False
) -> Path:
    if given is not None:
        return given
    if demo:  # the shipped file's own `output` would be relative to wherever it is installed
        return Path.cwd() / "out" / "demo"
    if configured:
        path = Path(configured)
        return path if path.is_absolute() else Path.cwd() / path
    return Path.cwd() / "out" / campaign_file.stem


@click.command()
@click.argument(
    "campaign_file",
    required=False,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
)
@click.option(
    "--demo",
    is_flag=True,
    help="run the shipped demo campaign (emulated site, output in ./out/demo)",
)
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
    "--dry-run",
    is_flag=True,
    help="check the campaign and print the jobs it expands to (as `validate`); run nothing",
)
@click.option("--json", "as_json", is_flag=True, help="with --dry-run: print the jobs as JSON")
@click.option(
    "--adopt-folder",
    is_flag=True,
    help="run into an output folder that holds another campaign: it becomes this one's "
    "(the other's jobs stay listed there)",
)
def run(
    campaign_file: Path | None,
    demo: bool,
    output: Path | None,
    site: str | None,
    time_limit: float | None,
    quiet: bool,
    dry_run: bool,
    as_json: bool,
    adopt_folder: bool,
) -> None:
    """Train the jobs of CAMPAIGN_FILE on harvested nodes; rerun the same command to resume.

    Writes state.sqlite, campaign.log, results.csv, results.parquet, gantt.png and nodes.png
    into the output folder (and parsl_malleable.log beside Parsl's own log in the Parsl run
    directory, runinfo/NNN). The folder belongs to the campaign that first ran into it: the
    same file, edited or not, resumes there; another campaign is refused unless
    --adopt-folder is given. --demo runs the shipped demo campaign.
    """
    campaign_file = _campaign_file(campaign_file, demo)
    if as_json and not dry_run:
        raise click.UsageError("--json goes with --dry-run")
    if dry_run:
        from parsl_malleable.campaign.validate_command import report

        report(campaign_file, site=site, as_json=as_json)
        return
    run_file(
        campaign_file,
        output=output,
        site=site,
        time_limit=time_limit,
        quiet=quiet,
        adopt_folder=adopt_folder,
        demo=demo,
    )


def run_file(
    campaign_file: Path,
    *,
    output: Path | None,
    site: str | None = None,
    time_limit: float | None = None,
    quiet: bool = False,
    adopt_folder: bool = False,
    demo: bool = False,
    prepare: Callable[[CampaignRunner], None] | None = None,
) -> None:
    """What ``run`` does with a campaign file, after its options were read: train it into its
    output folder with the live view, then write the results; exits as ``run`` documents.
    ``prepare`` is called with the runner once the campaign and the folder were checked, before
    anything starts (``retry`` marks its jobs waiting there); a
    :class:`~parsl_malleable.errors.ConfigError` it raises is the command's error."""
    from parsl_malleable.campaign.display import live_table
    from parsl_malleable.campaign.results import summary_lines, write_results
    from parsl_malleable.campaign.runner import CampaignRunner
    from parsl_malleable.campaign.spec import load_campaign
    from parsl_malleable.campaign.terminal import terminal_handler
    from parsl_malleable.campaign.trusted_files import check_site_profile

    console = Console(stderr=True)
    try:
        campaign = load_campaign(campaign_file)
        given = {"time_limit_s": time_limit, "site": site}
        changes: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
        if site is not None:
            changes["site_overrides"] = {}  # overrides were written for the campaign's own site
        campaign = campaign.model_copy(update=changes)
        check_site_profile(campaign.site)  # its worker_init runs on the blocks as this user
        folder = _output_for(campaign_file, campaign.output, output, demo)
        runner = CampaignRunner(
            campaign, folder, source=str(campaign_file), adopt_folder=adopt_folder
        )
        if prepare is not None:
            prepare(runner)
        pending = runner.pending()
    except (ConfigError, StateStoreError, UnsafePathError) as exc:
        raise click.ClickException(str(exc)) from None
    # Our warnings (and resumes) reach the terminal, printed above the live table; everything
    # is in campaign.log, and Parsl's own log in runinfo/ (see campaign/terminal.py).
    logging.getLogger().addHandler(terminal_handler(console))
    console.print(f"campaign {campaign_file} -> {folder}")
    interactive = console.is_terminal and not quiet
    last_line = [0.0]
    if pending:  # a finished campaign has nothing to compile for
        with console.status("loading the simulator (numba) ..."):
            from parsl_malleable.harvest.warmup import load_with_status
        load_with_status(console)

    def show(r: CampaignRunner) -> None:
        if interactive:
            live.update(live_table(r, width=console.width), refresh=True)
        elif time.monotonic() - last_line[0] >= LOG_EVERY_S:
            last_line[0] = time.monotonic()
            console.print(_summary_line(r))

    runner.on_sample = show
    # A full disk fails the log files too; logging's own tracebacks about them would bury the
    # one line that says what happened and what to do (a StateStoreError's), so they are dropped.
    logging.raiseExceptions = False
    # `kill PID` (SIGTERM) stops like Ctrl-C: jobs keep their state, blocks are cancelled.
    signal.signal(signal.SIGTERM, lambda *_: runner.stop())
    # The run's files are the user's alone, the results and pictures written after it too
    # (CampaignRunner.execute narrows the umask only while it runs; this process ends here).
    os.umask(0o077)
    with Live(console=console, auto_refresh=False, transient=False) as live:
        if not interactive:
            live.stop()
        try:
            outcome = runner.execute()
        except KeyboardInterrupt:
            outcome = None
        except (ConfigError, UnsafePathError) as exc:  # the folder changed since the check
            raise click.ClickException(str(exc)) from None
        except StateStoreError as exc:  # the run ended cleanly; its state could not be written
            raise click.ClickException(str(exc)) from None
        except OSError as exc:  # the folder itself (its lock, its log) could not be written
            error = _folder_fault(folder, exc)
            if error is None:
                raise
            raise click.ClickException(error) from None
    from parsl_malleable.campaign.store import CampaignStore

    try:
        store = CampaignStore(folder)
        try:
            files = write_results(store, folder)
            summary = summary_lines(store)
        finally:
            store.close()
    except StateStoreError as exc:
        raise click.ClickException(str(exc)) from None
    if outcome is None:
        console.print("interrupted: rerun the same command to resume")
        raise SystemExit(130)
    total = len(runner.entries)
    if outcome.outcome == "nothing to do":
        console.print(_nothing_to_do(outcome, total, folder))
    else:
        console.print(
            f"run {outcome.run}: {outcome.outcome}; {len(outcome.done)} done, "
            f"{len(outcome.failed)} failed of {total}"
        )
        if runner.stop_reason:
            console.print(f"  {runner.stop_reason}", markup=False, soft_wrap=True)
        if runner.run_dir is not None:
            console.print(f"  Parsl run directory {runner.run_dir}")
        for line in summary:  # the harvest, training in steps, and the median start-up
            console.print(f"  {line}", markup=False, soft_wrap=True)
    for path in files:
        console.print(f"  wrote {path}")
    if outcome.failed and outcome.outcome != "nothing to do":
        console.print(
            f"  fix the cause, then `parsl-malleable retry {folder}` reruns the failed jobs"
        )
    if outcome.failed:
        raise SystemExit(1)
    if outcome.outcome not in ("finished", "nothing to do"):
        raise SystemExit(3)


def _folder_fault(folder: Path, exc: OSError) -> str | None:
    """The line for an output folder that cannot be written (a full disk, a read-only folder):
    what the state store would say, since the run's state is what cannot be kept (None: another
    error, a bug to show in full)."""
    from parsl_malleable.campaign.store import CampaignStore
    from parsl_malleable.campaign.store_faults import fault

    named = Path(os.fsdecode(exc.filename)).resolve() if exc.filename else None
    if named is None and exc.errno != errno.ENOSPC:
        return None  # a write without a name is the folder's only when the disk is full
    if named is not None and not named.is_relative_to(folder.resolve()):
        return None
    error = fault(folder / CampaignStore.FILE, exc)
    return None if error is None else str(error)


def _campaign_file(given: Path | None, demo: bool) -> Path:
    """The campaign to run: the file given, or with ``--demo`` the shipped demo."""
    if demo and given is not None:
        raise click.UsageError(
            f"give a CAMPAIGN_FILE or --demo, not both (--demo runs the shipped demo campaign; "
            f"to run {given}, leave out --demo)"
        )
    if given is not None:
        return given
    if not demo:
        raise click.UsageError(
            "give a CAMPAIGN_FILE to run, or --demo for the shipped demo campaign "
            "(`parsl-malleable init` writes one to start from)"
        )
    from parsl_malleable.campaign.examples import example_path

    try:
        return example_path("demo")
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None


def _nothing_to_do(outcome: RunOutcome, total: int, folder: Path) -> str:
    """What a rerun of a campaign whose jobs all ended says."""
    done, failed = len(outcome.done), len(outcome.failed)
    jobs = "the 1 job" if total == 1 else f"all {total} jobs"
    if failed:
        ended = f"{jobs} already ended ({done} done, {failed} failed)"
        hint = (
            f"; `parsl-malleable status {folder}` shows why they failed (a rerun does not "
            f"run them again: fix the cause, then `parsl-malleable retry {folder}`)"
        )
    else:
        ended = f"{jobs} {'is' if total == 1 else 'are'} already done"
        hint = ""
    return f"nothing to run: {ended}; the results are in {folder}{hint}"


def _summary_line(runner: CampaignRunner) -> str:
    assert runner.store is not None
    rows = runner.store.jobs()
    done = sum(1 for r in rows if r.status == "done")
    site = runner.last_site
    nodes = site.harvest_text() if site else "no snapshot yet"
    return f"{time.time() - runner.started:6.0f} s: {done}/{len(rows)} jobs done; {nodes}"


@click.command()
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="print the jobs as JSON")
def status(folder: Path, as_json: bool) -> None:
    """Summarise the campaign in FOLDER, while it runs or after."""
    from parsl_malleable.campaign.display import best_text, status_table
    from parsl_malleable.campaign.driver_lock import driver_running
    from parsl_malleable.campaign.results import node_time, startup_medians, summary_lines
    from parsl_malleable.campaign.store import CampaignStore
    from parsl_malleable.private_files import check_private_dir

    try:
        # The run's folder rule, checked only (status changes nothing): in a folder another
        # user can change, what status reads (the state, driver.lock) may be theirs.
        check_private_dir(folder, what="output folder")
        store = CampaignStore(folder, read_only=True)
    except (FileNotFoundError, StateStoreError, UnsafePathError) as exc:
        raise click.ClickException(str(exc)) from None
    try:
        rows = store.jobs()
        progress = store.progress()
        metric = store.metric_spec()
        best = store.best_trial()
        runs = int(store.meta("runs") or 0)
        outcome = store.meta(f"run{runs}_outcome")
        live = driver_running(folder)
        owner = store.owner()
        spent = node_time(store)
        startups = store.node_startups()
        summary = summary_lines(store)
        meta = {
            "campaign_file": store.meta("campaign_file"),
            # Which campaign the folder belongs to (None: written before folders recorded it).
            "campaign": owner.name if owner else None,
            "campaign_sha256": owner.sha256 if owner else None,
            "runs": str(runs),
            "state": "running now" if live else (outcome or "ended without a word (killed?)"),
        }
    except (StateStoreError, UnsafePathError) as exc:  # UnsafePathError: driver.lock planted
        raise click.ClickException(str(exc)) from None
    finally:
        store.close()
    if as_json:
        click.echo(
            json.dumps(
                {
                    **meta,
                    "metric": {"name": metric[0], "direction": metric[1]} if metric else None,
                    "best": (
                        {
                            "job": best[0],
                            "value": best[1].best,
                            "step": best[1].best_step,
                        }
                        if best
                        else None
                    ),
                    # Training counted in steps; None where no sample counted them.
                    "node_time": {
                        "harvested_s": spent.harvested,
                        "idle_s": spent.idle,
                        "assigned_s": spent.assigned,
                        "stepping_s": spent.stepping if spent.measured_intervals else None,
                        "steps_not_counted_s": spent.unmeasured,
                        "harvest_fraction": spent.harvest_fraction,
                        "training_fraction": spent.training_fraction,
                        "assigned_fraction": spent.assigned_fraction,
                    },
                    "startup_median_s": {
                        phase: (value[0] if value else None)
                        for phase, value in startup_medians(startups).items()
                    },
                    "startup_nodes": len(startups),
                    "jobs": [
                        {
                            "name": r.name,
                            "status": r.status,
                            "result": r.result,
                            "node_hours": r.node_seconds / 3600,
                            "rescales": r.rescales,
                            "driver_runs": r.submissions,
                            "resumed_from_step": r.resumed_from_step,
                            **_progress_json(r, progress.get(r.name)),
                        }
                        for r in rows
                    ],
                },
                indent=1,
            )
        )
        return
    console = Console()
    console.print(
        status_table(rows, meta, progress, best=best_text(best, metric), width=console.width)
    )
    for line in summary:
        console.print(line, markup=False)


def _progress_json(row: JobRow, progress: JobProgress | None) -> dict[str, Any]:
    total = row.spec.get("total_steps")
    return {
        "step": progress.step if progress else None,
        "total_steps": total,
        "steps_per_s": progress.steps_per_s if progress else None,
        "eta_s": progress.eta_s(total) if progress and row.status == "running" else None,
    }


__all__ = ["run", "run_file", "status"]
