"""``parsl-malleable init``: copy an example campaign into a folder, to run or to start from.

A pip install carries the example campaigns as package data (:mod:`.examples`); this command
puts one where the user works, so that ``parsl-malleable run demo.yaml`` runs it and the file can
be edited into the user's own campaign. The campaign names its apps by module
(``parsl_malleable.apps.digits:train_elastic``, found in the installed package) and its
``output`` relative to the folder it is run from, so the copy needs nothing else.
"""

from __future__ import annotations

import os
import shlex
import stat
from pathlib import Path

import click

from parsl_malleable.campaign.examples import (
    DEFAULT_EXAMPLE,
    example_names,
    example_path,
    notebook_path,
)
from parsl_malleable.errors import ConfigError
from parsl_malleable.private_files import write_private_bytes

# Campaign files the user edits are theirs alone, like everything else the project writes.
FILE_MODE = 0o600


def _first_comment(path: Path) -> str:
    """The first comment line of an example: what it is, for ``--list``."""
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            return line.lstrip("# ").strip()
    return ""


def write_example(name: str, folder: Path, force: bool = False) -> Path:
    """Copy example campaign ``name`` into ``folder`` (created if needed) as ``<name>.yaml``.

    Raises :class:`~parsl_malleable.errors.ConfigError` for an unknown example, or when the file
    already exists and ``force`` is false (nothing is overwritten then).
    """
    return copy_into(example_path(name), folder, force)


def copy_into(source: Path, folder: Path, force: bool = False) -> Path:
    """Copy ``source`` into ``folder`` (created if needed), private to the user; refuse to
    overwrite an existing file unless ``force`` (:class:`~parsl_malleable.errors.ConfigError`).

    The file is never written through a symbolic link: another user who can write ``folder``
    could have planted one named like the example, pointing at a file of this user. A new file
    is created with ``O_EXCL | O_NOFOLLOW`` (a name that exists, a dangling link included, is
    refused); ``force`` writes a fresh file beside it and renames it over the old one, and
    refuses a link or anything but a regular file in its place."""
    target = folder / source.name
    text = source.read_bytes()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise ConfigError(f"{folder} is not a folder") from None
    except OSError as exc:
        raise ConfigError(f"cannot create the folder {folder}: {exc.strerror}") from None
    try:
        there = os.lstat(target)
    except FileNotFoundError:
        there = None
    if there is not None and stat.S_ISLNK(there.st_mode):
        raise ConfigError(
            f"{target} is a symbolic link (to {os.readlink(target)}); refusing to write through "
            "it: remove the link, or init into a folder only you can write"
        )
    if there is not None and not force:
        raise ConfigError(f"{target} exists; left as it is (--force overwrites it)")
    if there is not None:
        if not stat.S_ISREG(there.st_mode):
            raise ConfigError(f"{target} exists and is not a regular file; left as it is")
        # A fresh 0600 file renamed over the old one: the rename replaces the name itself, so
        # even a link swapped in meanwhile is replaced, never followed.
        try:
            write_private_bytes(target, text)
        except OSError as exc:
            raise ConfigError(f"cannot write {target}: {exc.strerror}") from None
        return target
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(target, flags, FILE_MODE)
    except FileExistsError:  # planted between the check and the open
        raise ConfigError(f"{target} exists; left as it is (--force overwrites it)") from None
    except OSError as exc:
        raise ConfigError(f"cannot write {target}: {exc.strerror}") from None
    with os.fdopen(fd, "wb") as out:
        out.write(text)
    return target


@click.command(name="init")
@click.argument(
    "folder",
    required=False,
    default=".",
    type=click.Path(path_type=Path),
)
@click.option(
    "--example",
    "name",
    default=DEFAULT_EXAMPLE,
    show_default=True,
    help="which example campaign to copy (--list shows them)",
)
@click.option("--force", is_flag=True, help="overwrite the file if it exists")
@click.option(
    "--notebook",
    is_flag=True,
    help="copy the login-node notebook (login-node.ipynb) instead of a campaign",
)
@click.option("--list", "list_only", is_flag=True, help="list the example campaigns and exit")
def init(folder: Path, name: str, force: bool, notebook: bool, list_only: bool) -> None:
    """Copy an example campaign into FOLDER (default: the current folder) and say how to run it.

    Writes FOLDER/<example>.yaml (demo.yaml by default), never over an existing file unless
    --force; its comments say how to run it. After an edit, `parsl-malleable validate FILE`
    checks it and names any key it does not know with the keys allowed there. Every key is
    described on the Campaigns page of parsl-malleable's documentation (campaigns.md in the
    project's source repository; the package does not install it). With --notebook:
    FOLDER/login-node.ipynb, to open in Jupyter.
    """
    try:
        if list_only:
            for example in example_names():
                click.echo(f"{example:10} {_first_comment(example_path(example))}")
            return
        if notebook:
            target = copy_into(notebook_path(), folder, force=force)
        else:
            target = write_example(name, folder, force=force)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"wrote {target}")
    if notebook:
        command = f"jupyter lab {target.name}  (or run it all: jupyter execute {target.name})"
    else:
        command = f"parsl-malleable run {target.name}"
    if folder.resolve() != Path.cwd().resolve():
        command = f"cd {shlex.quote(str(folder))} && {command}"
    click.echo(f"next: {command}")
