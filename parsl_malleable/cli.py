"""The ``parsl-malleable`` command.

Each subcommand lives next to the code it drives (``parsl_malleable/<part>/command.py``) and is
imported only when it runs, so ``parsl-malleable --help`` stays fast and does not import torch or
Parsl.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

import click

from parsl_malleable.errors import MalleableError
from parsl_malleable.watchdog import isolate_child_imports

# name -> ("module:attribute", one-line help). Help is here so --help needs no imports.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "sim": (
        "parsl_malleable.sim.command:sim",
        "Replay a job trace through FCFS/EASY/conservative backfill; report idle holes.",
    ),
    "trace": (
        "parsl_malleable.traces.command:trace",
        "Read a job trace (SWF, Cobalt, sacct, PBS) and summarise it in the common schema.",
    ),
    "windows": (
        "parsl_malleable.windows.command:windows",
        "Evaluate idle-window prediction on a trace: accuracy and harvestable node-hours.",
    ),
    "run": (
        "parsl_malleable.campaign.command:run",
        "Train the jobs of a campaign YAML on harvested nodes (rerun to resume).",
    ),
    "retry": (
        "parsl_malleable.campaign.retry_command:retry",
        "Rerun a campaign's failed jobs (or the ones named) in place, in its output folder.",
    ),
    "status": (
        "parsl_malleable.campaign.command:status",
        "Summarise a campaign's output folder, while it runs or after.",
    ),
    "replay": (
        "parsl_malleable.replay.command:replay",
        "Replay idle nodes + a training workload under FreeTrain, MalleTrain and our policy.",
    ),
    "sites": (
        "parsl_malleable.harvest.sites_command:sites",
        "List the site profiles found (name, scheduler, file) in the order they are searched.",
    ),
    "init": (
        "parsl_malleable.campaign.init_command:init",
        "Write an example campaign (and its notes) into the current folder to start from.",
    ),
    "validate": (
        "parsl_malleable.campaign.validate_command:validate",
        "Check a campaign YAML and print the jobs it expands to, without running anything.",
    ),
    "allocate": (
        "parsl_malleable.allocate.command:allocate",
        "Solve one allocation of idle nodes to training jobs (MILP or greedy).",
    ),
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = SUBCOMMANDS.get(cmd_name)
        if entry is None:
            return None
        module_name, attr = entry[0].split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:  # that part is not built yet; anything else is a bug
                return _unavailable(cmd_name, entry[1])
            raise
        return getattr(module, attr)

    def main(self, args: Sequence[str] | None = None, *rest: Any, **options: Any) -> Any:
        """Run the command; as the program itself (arguments from ``sys.argv``), isolated
        first (:func:`isolate_driver`)."""
        if args is None:
            isolate_driver()
        return super().main(args, *rest, **options)

    def invoke(self, ctx: click.Context) -> Any:
        """Run the subcommand; an error the package raised on purpose (it names what was wrong)
        is one line on stderr and exit status 1, not a traceback."""
        try:
            return super().invoke(ctx)
        except MalleableError as exc:
            raise click.ClickException(str(exc)) from None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, SUBCOMMANDS[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def isolate_driver() -> None:
    """Nothing the command imports after its start, nor any process it starts, comes from the
    folder it was started in, which may be shared with other users (issue 49).

    ``python -m parsl_malleable`` puts that folder first on ``sys.path``: the package itself
    was found by the user's own choice, but its subcommands, Parsl and torch are imported later
    and must not be. Its children get ``PYTHONSAFEPATH`` (:func:`isolate_child_imports`). A
    campaign's ``python_path`` is added later, and kept."""
    isolate_child_imports()
    if sys.flags.safe_path or not sys.path:
        return
    first = sys.path[0]
    try:
        here = os.path.realpath(os.getcwd())
    except OSError:  # the folder is gone: "" would name whatever takes its place
        here = None
    # "" for -c and the interactive interpreter; the folder's path for -m.
    if first == "" or os.path.realpath(first) == here:
        del sys.path[0]


def _unavailable(name: str, summary: str) -> click.Command:
    @click.command(name=name, help=summary)
    def stub() -> None:
        raise click.ClickException(f"'{name}' is not available in this build")

    return stub


@click.group(cls=LazyGroup)
@click.version_option(package_name="parsl-malleable")
def main() -> None:
    """Harvest idle supercomputer nodes for malleable DNN training with Parsl."""


if __name__ == "__main__":
    main()
