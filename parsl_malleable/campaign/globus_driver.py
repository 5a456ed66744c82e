"""A campaign sent with the Globus Compute SDK, driven on the endpoint host through every yield.

Why a driver task: a malleable job's controller, coordinators and rendezvous live in the process
that submits it, and must outlive every block its ranks run on. A Globus Compute task runs where
the user endpoint's engine puts it; on a harvesting engine (template ``mode: tasks``) that is a
harvested block, which yields or reaches the end of its window. So the endpoint template's
``mode: driver`` (configs/globus/user_config_template.yaml.j2) gives the user's engine a
``LocalProvider``: the task runs on the endpoint host, and :func:`train_campaign` runs the same
machinery as ``parsl-malleable run`` there (:class:`~.runner.CampaignRunner`: a Parsl DFK whose
HTEX has a :class:`~parsl_malleable.provider.BackfillProvider`, and the controller). The ranks
run on harvested blocks and grow, shrink and yield there; the driver stays.

What crosses the network: the campaign as YAML text or a mapping of plain values, and back a
mapping of plain values (the results table as rows). Globus Compute's own serializer carries
the call; nothing here unpickles anything.

The endpoint passes its settings in the environment of the driver's worker (the template's
``worker_init``): :data:`ENV_MODE`, :data:`ENV_SITE` (the user option ``profile``, else the
site's default), :data:`ENV_MAX_HARVESTED`, :data:`ENV_ADDRESS`. This module imports only the
standard library at the top, so a remote user's ``from parsl_malleable.campaign.globus_driver
import train_campaign`` (the SDK pickles the function by reference) stays light.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from parsl_malleable.campaign.spec import Campaign

ENV_MODE = "PM_GLOBUS_MODE"  # "driver" where the template runs this on the endpoint host
ENV_SITE = "PM_GLOBUS_SITE"  # the site profile the endpoint was rendered with
ENV_MAX_HARVESTED = "PM_GLOBUS_MAX_HARVESTED_NODES"  # the user option max_harvested_nodes
ENV_ADDRESS = "PM_GLOBUS_ADDRESS"  # the user option address: where blocks reach the driver
#: Campaign folders without an ``output`` go under ``$HOME/<this>/<name>-<content hash>``.
DEFAULT_ROOT = Path("parsl-malleable") / "globus"
# Set by Parsl in every worker; with it, the call came through an endpoint's engine.
PARSL_WORKER_ENV = "PARSL_WORKER_BLOCK_ID"


def train_campaign(
    campaign: str | Mapping[str, Any],
    *,
    output: str | None = None,
    name: str = "campaign",
    time_limit_s: float | None = None,
    adopt_folder: bool = False,
) -> dict[str, Any]:
    """Run ``campaign`` (YAML text or its mapping, docs/campaigns.md) to its end; its results.

    Meant to be sent to a harvesting endpoint in ``mode: driver``::

        gce.submit(train_campaign, campaign_text)

    A campaign without ``site`` runs on the endpoint's site profile; the endpoint's
    ``max_harvested_nodes`` and ``address`` become ``site_overrides`` unless the campaign sets them.
    Relative paths (``output``, ``python_path``) are taken from ``$HOME``. Without ``output``
    the state goes to ``~/parsl-malleable/globus/<name>-<hash of the campaign>``: sending the
    same campaign again resumes there (finished jobs are kept, the rest resume from their
    checkpoints), as rerunning ``parsl-malleable run`` does.

    Returns ``outcome`` (``finished``, ``time limit``, ``nothing to do``), ``run``, ``output``,
    ``done`` and ``failed`` (job names), ``results`` (one mapping per job: the columns of
    ``results.csv``) and ``blocks`` (the provider's blocks of this run: ``job_id``, ``nodes``,
    ``end_state``, ``cancel_reason`` (``"yield"`` for a block that yielded), ``yield_reason``)
    and ``epochs`` (per job of this run, its membership epochs: ``world_size``, ``reason``,
    ``start_step``, ``last_step``).

    Raises :class:`~parsl_malleable.errors.ConfigError` for a campaign that is no valid
    campaign, and when called by a worker of an endpoint that is not in ``mode: driver`` (the
    driver would die with the first block that yields).
    """
    from parsl_malleable.campaign.globus_runner import DriverRunner
    from parsl_malleable.campaign.results import results_frame, write_results
    from parsl_malleable.campaign.store import CampaignStore

    check_driver_mode()
    home = Path.home()
    source = f"globus:{name}"
    spec = check_campaign(campaign, source=source)
    if time_limit_s is not None:
        spec = spec.model_copy(update={"time_limit_s": time_limit_s})
    folder = output_folder(spec, output, name, home)
    runner = DriverRunner(spec, folder, source=source, adopt_folder=adopt_folder)
    outcome = runner.execute()
    store = CampaignStore(folder)
    try:
        write_results(store, folder)
        # to_json: NaN becomes null and numpy scalars plain numbers, so the caller needs
        # neither pandas nor numpy to read the answer.
        rows = json.loads(results_frame(store).to_json(orient="records"))
    finally:
        store.close()
    return {
        "outcome": outcome.outcome,
        "run": outcome.run,
        "output": str(folder),
        "done": outcome.done,
        "failed": outcome.failed,
        "results": rows,
        "blocks": runner.block_history,
        "epochs": runner.epoch_history(),
    }


def check_campaign(campaign: str | Mapping[str, Any], *, source: str = "campaign") -> Campaign:
    """The validated campaign, with the endpoint's settings where it leaves them out and its
    apps imported and their arguments checked; :class:`ConfigError` naming every problem.

    A remote user can run this before sending (``python_path`` is taken from ``$HOME``), to
    find a typo in a second rather than in the endpoint's answer.
    """
    from parsl_malleable.campaign.spec import add_python_path, check_apps, parse_campaign

    spec = parse_campaign(endpoint_settings(campaign_data(campaign)), source=source)
    add_python_path(spec, Path.home())
    check_apps(spec, source=source)
    return spec


def check_driver_mode() -> None:
    """:class:`ConfigError` when this runs as a task of an endpoint not in ``mode: driver``."""
    from parsl_malleable.errors import ConfigError

    if PARSL_WORKER_ENV in os.environ and os.environ.get(ENV_MODE) != "driver":
        raise ConfigError(
            "train_campaign runs a campaign's driver, which must outlive every harvested block, "
            "but this endpoint ran it as a task on a block (the template's mode is not "
            "'driver'): send it with user_endpoint_config={'mode': 'driver', ...}"
        )


def campaign_data(campaign: str | Mapping[str, Any]) -> dict[str, Any]:
    """The campaign's mapping from YAML text or a mapping; :class:`ConfigError` otherwise."""
    from parsl_malleable.errors import ConfigError
    from parsl_malleable.inputs import load_yaml_text

    if isinstance(campaign, str):
        data = load_yaml_text(campaign, "campaign text")
    elif isinstance(campaign, Mapping):
        data = dict(campaign)
    else:
        raise ConfigError(f"a campaign is YAML text or a mapping, got {type(campaign).__name__}")
    if not isinstance(data, dict):
        raise ConfigError(f"a campaign must be a mapping, got {type(data).__name__}")
    return data


def endpoint_settings(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with the endpoint's site, ``max_harvested_nodes`` and ``address`` filled in
    where the campaign leaves them out (the campaign's own choices win)."""
    from parsl_malleable.errors import ConfigError

    out = dict(data)
    site = os.environ.get(ENV_SITE)
    if site and "site" not in out:
        out["site"] = site
    overrides = dict(out.get("site_overrides") or {})
    if cap := os.environ.get(ENV_MAX_HARVESTED):
        try:
            overrides.setdefault("max_harvested_nodes", int(cap))
        except ValueError:
            raise ConfigError(f"{ENV_MAX_HARVESTED}={cap!r} is no whole number") from None
    if address := os.environ.get(ENV_ADDRESS):
        overrides.setdefault("address", address)
    if overrides:
        out["site_overrides"] = overrides
    return out


def output_folder(campaign: Campaign, output: str | None, name: str, home: Path) -> Path:
    """Where the campaign's state goes (see :func:`train_campaign`)."""
    from parsl_malleable.campaign.runner import campaign_identity
    from parsl_malleable.errors import ConfigError
    from parsl_malleable.inputs import SAFE_NAME

    chosen = output if output is not None else campaign.output
    if chosen is not None:
        path = Path(chosen).expanduser()
        return path if path.is_absolute() else home / path
    if not re.fullmatch(SAFE_NAME, name):
        raise ConfigError(f"name {name!r} must match {SAFE_NAME} (it names a folder)")
    sha = campaign_identity(campaign, f"globus:{name}").sha256
    return home / DEFAULT_ROOT / f"{name}-{sha[:12]}"


__all__ = [
    "DEFAULT_ROOT",
    "ENV_ADDRESS",
    "ENV_MAX_HARVESTED",
    "ENV_MODE",
    "ENV_SITE",
    "campaign_data",
    "check_campaign",
    "check_driver_mode",
    "endpoint_settings",
    "output_folder",
    "train_campaign",
]
