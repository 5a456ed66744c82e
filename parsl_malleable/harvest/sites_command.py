"""``parsl-malleable sites``: the site profiles found, in the order a name is looked up.

It reads file names and each profile's ``scheduler`` key, nothing else, so it answers at once
and lists a profile even when the profile itself does not validate (its error is shown).
"""

from __future__ import annotations

import json
from typing import Any

import click

from parsl_malleable.errors import ConfigError
from parsl_malleable.harvest.site_profile import (
    PROFILE_PATH_ENV,
    FoundProfile,
    found_profiles,
    profile_folders,
)
from parsl_malleable.inputs import load_yaml_file


def _scheduler_of(found: FoundProfile) -> str:
    """The profile's ``scheduler`` (the default, slurm, when unset), or why it cannot say."""
    try:
        data = load_yaml_file(found.path, "site profile")
    except ConfigError as exc:
        return f"(unreadable: {exc})"
    if data is None:
        data = {}
    if not isinstance(data, dict):
        return "(not a mapping)"
    return str(data.get("scheduler", "slurm"))


def _rows() -> list[dict[str, Any]]:
    return [
        {
            "name": f.name,
            "scheduler": _scheduler_of(f),
            "file": str(f.path),
            "folder": str(f.folder),
            "shadowed_by": str(f.shadowed_by) if f.shadowed_by else None,
        }
        for f in found_profiles()
    ]


@click.command("sites")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (folders and profiles).")
def sites(as_json: bool) -> None:
    """List the site profiles found (name, scheduler, file) in search order.

    Folders are searched in this order: $PM_PROVIDER_PROFILES, the user's
    ~/.config/parsl-malleable/sites ($XDG_CONFIG_HOME), then the shipped profiles. A profile
    that an earlier folder's profile of the same name hides is marked "shadowed".
    """
    folders = [str(f) for f in profile_folders()]
    rows = _rows()
    if as_json:
        click.echo(json.dumps({"folders": folders, "profiles": rows}, indent=2))
        return
    click.echo(f"Folders searched, in order (${PROFILE_PATH_ENV}, the user's, the shipped):")
    for i, folder in enumerate(folders, start=1):
        click.echo(f"  {i}. {folder}")
    if not rows:
        click.echo("No site profile found.")
        return
    width = max(len("NAME"), *(len(r["name"]) for r in rows))
    sched_width = max(len("SCHEDULER"), *(len(r["scheduler"]) for r in rows))
    click.echo()
    click.echo(f"{'NAME':<{width}}  {'SCHEDULER':<{sched_width}}  FILE")
    for r in rows:
        note = f"  (shadowed by {r['shadowed_by']})" if r["shadowed_by"] else ""
        click.echo(f"{r['name']:<{width}}  {r['scheduler']:<{sched_width}}  {r['file']}{note}")


__all__ = ["sites"]
