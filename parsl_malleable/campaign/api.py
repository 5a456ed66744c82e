"""``run_campaign``: a campaign from Python (a notebook, a script), the same spec as the YAML file.

The spec is what a campaign file holds: a mapping as ``yaml.safe_load`` would give it, a
:class:`~.spec.Campaign`, or the path of a file. It is checked exactly as ``parsl-malleable run``
checks a file (:func:`~.spec.parse_campaign`, then every app imported and its arguments bound),
trained by the same :class:`~.runner.CampaignRunner` into ``output``, and the results written
as ``run`` writes them (``results.csv``, ``results.parquet``, ``gantt.png``, ``nodes.png``,
``startup.csv``); the results table comes back as a :class:`pandas.DataFrame`.

A spec given as data owns its output folder while its content stays the same (see
:class:`~.store.CampaignIdentity`): calling again with the same spec resumes there (finished
jobs are kept, the others resume from their checkpoints); ``time_limit_s`` is a setting of the
call, not of the campaign, so a longer one resumes too. ``site`` is part of the campaign.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parsl_malleable.campaign.spec import (
    Campaign,
    add_python_path,
    check_apps,
    load_campaign,
    parse_campaign,
)
from parsl_malleable.campaign.trusted_files import check_site_profile
from parsl_malleable.errors import ConfigError, MalleableError
from parsl_malleable.inputs import SAFE_NAME, finite_number

if TYPE_CHECKING:
    import pandas as pd

    from parsl_malleable.campaign.runner import CampaignRunner

PROGRESS_EVERY_S = 15.0  # with quiet=False: one progress line this often


def campaign_from(
    spec: Campaign | Mapping[str, Any] | str | os.PathLike[str],
    *,
    source: str,
    site: str | None = None,
) -> tuple[Campaign, str]:
    """The validated campaign of ``spec`` and the source that names it (the file's path, else
    ``source``), with ``site`` (when given) instead of its own and its ``site_overrides``
    dropped, as ``run --site`` does. Data is checked by :func:`~.spec.parse_campaign` and
    :func:`~.spec.check_apps`, a file by :func:`~.spec.load_campaign`; ``python_path`` is
    relative to the file, or for data to the current folder. :class:`ConfigError` naming every
    problem; :class:`~parsl_malleable.errors.UnsafePathError` for a campaign file, a
    ``python_path`` folder, an app's module or a site profile that another user could have
    changed (:mod:`.trusted_files`), refused before it is read or imported."""
    if isinstance(spec, str | os.PathLike):
        path = Path(spec)
        campaign = load_campaign(path)
        source = str(path)
        if site is None:
            check_site_profile(campaign.site)
            return campaign, source
        data: dict[str, Any] = campaign.model_dump(by_alias=True, exclude_unset=True)
    elif isinstance(spec, Campaign):
        # Validated again: a model can be built or changed without its validators running.
        data = spec.model_dump(by_alias=True, exclude_unset=True)
    elif isinstance(spec, Mapping):
        data = dict(spec)
    else:
        raise ConfigError(
            f"{source}: a campaign is a mapping (as its YAML file loads), a Campaign or the "
            f"path of its file, got {type(spec).__name__}"
        )
    if site is not None:
        data = {**data, "site": site, "site_overrides": {}}
    campaign = parse_campaign(data, source=source)
    check_site_profile(campaign.site)  # its worker_init runs on the blocks as this user
    if not isinstance(spec, str | os.PathLike):
        add_python_path(campaign, Path.cwd())
    check_apps(campaign, source=source)
    return campaign, source


def run_campaign(
    spec: Campaign | Mapping[str, Any] | str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    time_limit_s: float | None = None,
    site: str | None = None,
    quiet: bool = True,
    adopt_folder: bool = False,
    name: str = "campaign",
) -> pd.DataFrame:
    """Train the campaign ``spec`` into folder ``output`` as ``parsl-malleable run`` would; the
    results table (one row per job, the columns of ``results.csv``).

    ``spec``: a mapping with the keys of a campaign file (docs/campaigns.md), a
    :class:`~.spec.Campaign`, or a campaign file's path. ``time_limit_s`` stops the run after
    that many seconds (unfinished jobs resume at the next call), instead of the campaign's own
    limit; ``site`` runs on that site profile instead of the campaign's (its
    ``site_overrides`` dropped). ``quiet=False`` prints a progress line every
    :data:`PROGRESS_EVERY_S` seconds and how the run ended. ``adopt_folder`` is ``run
    --adopt-folder``; ``name`` names a campaign given as data (in messages, and Parsl's
    workflow name). Call it with no other Parsl configuration loaded: the run loads its own.

    The frame's ``attrs`` hold ``outcome`` (``finished``, ``time limit``, ``interrupted``,
    ``nothing to do``), ``run`` (the driver run's number), ``output`` (the folder) and
    ``files`` (what was written). A failed job is a row with status ``failed`` and its error;
    ``parsl-malleable retry`` reruns it in place.

    Raises :class:`~parsl_malleable.errors.ConfigError` before anything starts for a spec that
    is no valid campaign (the message names each key, as for a file), a job that cannot fit the
    site, or a folder that holds another campaign;
    :class:`~parsl_malleable.errors.UnsafePathError` for an output folder, a campaign file or
    code it names that another user could change (the rule of ``parsl-malleable run``);
    KeyboardInterrupt stops the run (jobs keep their state; the results so far are written
    first).
    """
    from parsl_malleable.campaign.runner import CampaignRunner
    from parsl_malleable.campaign.store import CampaignStore

    if not re.fullmatch(SAFE_NAME, name):
        raise ConfigError(f"run_campaign: name {name!r} must match {SAFE_NAME}")
    limit = None
    if time_limit_s is not None:
        limit = finite_number(time_limit_s, "run_campaign: time_limit_s", gt=0)
    campaign, source = campaign_from(spec, source=f"python:{name}", site=site)
    folder = Path(output)
    runner = CampaignRunner(campaign, folder, source=source, adopt_folder=adopt_folder)
    if limit is not None:
        # After the runner took the campaign's identity: the folder belongs to the spec as
        # given, whatever limit a call sets (the runner reads the limit when it starts).
        runner.campaign = campaign.model_copy(update={"time_limit_s": limit})
    if not quiet:
        runner.on_sample = _progress_printer()
        print(f"campaign {source} -> {folder}", flush=True)
    try:
        outcome = runner.execute()
    except KeyboardInterrupt:
        if (folder / CampaignStore.FILE).is_file():
            # The interrupt is what the caller must see; a results file that cannot be
            # written now is written by the next call.
            with contextlib.suppress(MalleableError, OSError):
                _write(folder)
        raise
    frame, files = _write(folder)
    frame.attrs.update(
        outcome=outcome.outcome, run=outcome.run, output=str(folder), files=[str(p) for p in files]
    )
    if not quiet:
        print(
            f"run {outcome.run}: {outcome.outcome}; {len(outcome.done)} done, "
            f"{len(outcome.failed)} failed of {len(runner.entries)}",
            flush=True,
        )
        for line in _summary(folder):
            print(f"  {line}", flush=True)
    return frame


def _write(folder: Path) -> tuple[pd.DataFrame, list[Path]]:
    """Write the results into ``folder`` as ``run`` does (private to the user, as the run's
    own files); the table and the files written."""
    import matplotlib

    # The pictures' module selects Agg for the process when it is imported (a driver has no
    # display); a notebook's own backend (inline) is put back, or its later plots would not show.
    backend = matplotlib.get_backend()
    from parsl_malleable.campaign.results import results_frame, write_results
    from parsl_malleable.campaign.store import CampaignStore

    previous = os.umask(0o077)
    try:
        store = CampaignStore(folder)
        try:
            files = write_results(store, folder)
            return results_frame(store), files
        finally:
            store.close()
    finally:
        os.umask(previous)
        if matplotlib.get_backend() != backend:
            matplotlib.use(backend)


def _summary(folder: Path) -> list[str]:
    """What ``run`` prints at its end about the campaign in ``folder``: node-time (training
    counted in steps) and the median start-up per phase (:func:`~.results.summary_lines`)."""
    from parsl_malleable.campaign.results import summary_lines
    from parsl_malleable.campaign.store import CampaignStore

    store = CampaignStore(folder, read_only=True)
    try:
        return summary_lines(store)
    finally:
        store.close()


def _progress_printer() -> Callable[[CampaignRunner], None]:
    last = [0.0]

    def show(runner: CampaignRunner) -> None:
        if time.monotonic() - last[0] < PROGRESS_EVERY_S or runner.store is None:
            return
        last[0] = time.monotonic()
        rows = runner.store.jobs()
        done = sum(1 for r in rows if r.status in ("done", "failed"))
        site = runner.last_site
        nodes = site.harvest_text() if site else "no nodes yet"
        print(
            f"{time.time() - runner.started:6.0f} s: {done}/{len(rows)} jobs ended; {nodes}",
            flush=True,
        )

    return show


__all__ = ["PROGRESS_EVERY_S", "campaign_from", "run_campaign"]
