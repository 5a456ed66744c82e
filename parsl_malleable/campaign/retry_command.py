"""``parsl-malleable retry DIR [JOB...]``: rerun failed (or chosen) jobs of a campaign in place.

A rerun of ``run`` leaves ``done`` and ``failed`` jobs alone, so a job that failed on a bug the
user has since fixed would otherwise need a new output folder and every job trained again. This
command marks the failed jobs (or the ones named, failed or done) ``waiting`` in the folder's
state, keeps their checkpoints unless ``--from-scratch``, and runs the campaign into the same
folder as ``run`` does (:func:`.command.run_file`): the marked jobs train again, the others keep
their results. The campaign file is the one the folder recorded at its last run, or
``--campaign FILE``.

The marking is done under the folder's driver lock (:class:`.driver_lock.DriverLock`), so it
cannot race a driver that starts meanwhile; a folder a driver runs into now is refused.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from parsl_malleable.campaign.driver_lock import DriverLock, driver_running
from parsl_malleable.errors import ConfigError, StateStoreError, UnsafePathError
from parsl_malleable.inputs import FiniteFloat
from parsl_malleable.private_files import check_private_dir, private_dir

if TYPE_CHECKING:  # the runner imports Parsl; --help must stay light
    from parsl_malleable.campaign.runner import CampaignRunner
    from parsl_malleable.campaign.store import CampaignStore, JobRow

CHECKPOINTS = "checkpoints"  # <output>/checkpoints/<job>, as the runner writes them


def _open_store(folder: Path) -> CampaignStore:
    from parsl_malleable.campaign.store import CampaignStore

    if not (folder / CampaignStore.FILE).is_file():
        raise ConfigError(
            f"{folder}: no campaign here (no {CampaignStore.FILE}); retry reruns jobs of a "
            "campaign's output folder, the one `parsl-malleable run` wrote"
        )
    return CampaignStore(folder)


def choose_jobs(rows: Sequence[JobRow], names: Sequence[str], folder: Path) -> list[str]:
    """The jobs to retry: ``names`` (each must be stored in ``folder``, any status), else every
    failed job. :class:`ConfigError` listing the unknown names and the jobs there are."""
    known = [row.name for row in rows]
    if names:
        unknown = [name for name in names if name not in known]
        if unknown:
            raise ConfigError(
                f"{folder}: no job named {', '.join(unknown)} in this campaign; its jobs are: "
                f"{', '.join(known) or '(none)'}"
            )
        return list(dict.fromkeys(names))
    return [row.name for row in rows if row.status == "failed"]


def recorded_campaign(store: CampaignStore, folder: Path) -> Path:
    """The campaign file the folder's last run was started from: the owner's resolved path,
    else (a folder from before owners were recorded) the file as that run named it.
    :class:`ConfigError` when none is recorded or it is gone (``--campaign FILE`` gives it)."""
    owner = store.owner()
    recorded = owner.file if owner is not None and owner.file else store.meta("campaign_file")
    if recorded is None:
        raise ConfigError(
            f"{folder}: no campaign file recorded (no run has started here); give it with "
            "--campaign FILE"
        )
    path = Path(recorded)
    if not path.is_file():
        raise ConfigError(
            f"{folder}: its campaign file {recorded} (recorded by its last run) is not there "
            "(moved, or the campaign was given from Python); give it with --campaign FILE"
        )
    return path


def mark_for_retry(folder: Path, names: Sequence[str], *, from_scratch: bool) -> list[str]:
    """Mark jobs ``names`` of the campaign in ``folder`` waiting, removing their checkpoints
    first with ``from_scratch``, under the folder's driver lock (:class:`ConfigError` while a
    driver runs there). The names marked."""
    with DriverLock(folder):
        if from_scratch:
            for name in names:
                remove_checkpoints(folder / CHECKPOINTS / name)
        store = _open_store(folder)
        try:
            return store.mark_waiting(names)
        finally:
            store.close()


def remove_checkpoints(path: Path) -> None:
    """Remove one job's checkpoint folder ``<output>/checkpoints/<job>``, never through a link:
    a link there is removed itself, not followed, and the ``checkpoints`` folder above it must
    be this user's own real folder that nobody else can change (a link planted in its place
    would make the removal delete a folder outside the run):
    :class:`~parsl_malleable.errors.UnsafePathError` otherwise, with nothing removed."""
    holder = path.parent
    try:
        info = os.lstat(holder)
    except FileNotFoundError:
        return  # no checkpoints at all
    if stat.S_ISLNK(info.st_mode):
        raise UnsafePathError(
            f"refusing the checkpoints folder {holder}: it is a symbolic link (to "
            f"{os.readlink(holder)}), so removing checkpoints there would delete files outside "
            "the run; nothing removed. Fix: check it, remove the link, then retry"
        )
    check_private_dir(holder, what="checkpoints folder")
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(info.st_mode):
        # rmtree works from open folders and unlinks the links it meets, never following one.
        shutil.rmtree(path)
    else:
        path.unlink()


def _refuse_if_running(folder: Path) -> None:
    if driver_running(folder):
        raise ConfigError(
            f"{folder}: a driver is running into this folder now; wait for it to end "
            f"(`parsl-malleable status {folder}` shows it) or stop it, then retry"
        )


@click.command(name="retry")
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("jobs", nargs=-1, metavar="[JOB]...")
@click.option(
    "--from-scratch",
    is_flag=True,
    help="remove the jobs' checkpoints first: they train from step 0 (default: they resume)",
)
@click.option(
    "--no-run",
    is_flag=True,
    help="only mark the jobs waiting: the next `run` into FOLDER trains them",
)
@click.option(
    "--campaign",
    "campaign_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="the campaign file (default: the one FOLDER's last run was started from)",
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
    help="with --campaign: run it into FOLDER even if FOLDER holds another campaign",
)
def retry(
    folder: Path,
    jobs: tuple[str, ...],
    from_scratch: bool,
    no_run: bool,
    campaign_file: Path | None,
    site: str | None,
    time_limit: float | None,
    quiet: bool,
    adopt_folder: bool,
) -> None:
    """Rerun the failed jobs of the campaign in FOLDER, or the JOBs named (failed or done), in
    place: they are marked waiting and the campaign runs into FOLDER as `run` would; the other
    jobs keep their results. Jobs resume from their checkpoints unless --from-scratch.
    Exit status as `run`'s.
    """
    recorded: str | None = None
    try:
        # First, as `run` does: a folder another user can change may hold what they planted
        # (a link as checkpoints, a FIFO as driver.lock), so nothing in it is read or removed.
        private_dir(folder, what="output folder")
        _refuse_if_running(folder)
        store = _open_store(folder)
        try:
            chosen = choose_jobs(store.jobs(), jobs, folder)
            if not chosen:
                click.echo(f"{folder}: no failed job to retry (name jobs to rerun finished ones)")
                return
            if no_run:
                owner = store.owner()
                recorded = owner.file if owner is not None else store.meta("campaign_file")
            elif campaign_file is None:
                campaign_file = recorded_campaign(store, folder)
        finally:
            store.close()
        how = "from scratch" if from_scratch else "from their checkpoints"
        if no_run:
            marked = mark_for_retry(folder, chosen, from_scratch=from_scratch)
            click.echo(f"{folder}: marked waiting, to train {how}: {', '.join(marked)}")
            known = recorded if recorded and Path(recorded).is_file() else None
            click.echo(f"next: parsl-malleable run {campaign_file or known or 'FILE'} -o {folder}")
            return
    except (ConfigError, StateStoreError, UnsafePathError) as exc:
        raise click.ClickException(str(exc)) from None
    assert campaign_file is not None
    source = campaign_file

    def prepare(runner: CampaignRunner) -> None:
        # After the campaign and the folder were checked: nothing is marked for a campaign
        # that cannot run, and a job the campaign no longer has would wait forever.
        missing = [name for name in chosen if name not in runner.entries]
        if missing:
            raise ConfigError(
                f"{source}: has no job {', '.join(missing)} (any more); the folder's jobs "
                "are retried with the campaign that has them (--campaign FILE)"
            )
        marked = mark_for_retry(folder, chosen, from_scratch=from_scratch)
        click.echo(f"retrying {len(marked)} job(s) {how}: {', '.join(marked)}", err=True)

    from parsl_malleable.campaign.command import run_file

    run_file(
        source,
        output=folder,
        site=site,
        time_limit=time_limit,
        quiet=quiet,
        adopt_folder=adopt_folder,
        prepare=prepare,
    )


__all__ = ["choose_jobs", "mark_for_retry", "recorded_campaign", "remove_checkpoints", "retry"]
