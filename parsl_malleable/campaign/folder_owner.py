"""Which campaign owns an output folder, and whether another may run into it: the rule, apart
from the store that records the owner (:mod:`.store`), so it reads and tests alone."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parsl_malleable.errors import ConfigError


@dataclass(frozen=True)
class CampaignIdentity:
    """Which campaign writes a folder.

    ``name`` is the campaign file's stem (what ``out/<stem>`` is named after), ``sha256`` the
    hash of the file's bytes, ``file`` its resolved path. A campaign given without a file (from
    Python, with a ``source`` that is no path) has ``file`` None and the hash of its validated
    content: it is then the same campaign only while its content stays the same.
    """

    name: str
    sha256: str
    file: str | None = None

    @classmethod
    def of_file(cls, path: str | Path) -> CampaignIdentity:
        """The identity of the campaign in file ``path``."""
        path = Path(path).resolve()
        return cls(path.stem, hashlib.sha256(path.read_bytes()).hexdigest(), str(path))

    @classmethod
    def of_content(cls, name: str, content: Any) -> CampaignIdentity:
        """The identity of a campaign given as data (a JSON-able mapping), named ``name``."""
        text = json.dumps(content, sort_keys=True, default=str)
        return cls(name, hashlib.sha256(text.encode()).hexdigest())

    def describe(self) -> str:
        """``'demo' (/path/demo.yaml, sha256 1a2b3c4d5e6f)``, for messages."""
        where = f"{self.file}, " if self.file else ""
        return f"{self.name!r} ({where}sha256 {self.sha256[:12]})"


@dataclass(frozen=True)
class FolderNote:
    """What a run says about its output folder's owner. ``notable``: the user should hear it
    (an edited campaign file, an adopted folder), not only find it in the log."""

    text: str
    notable: bool = False

    def __str__(self) -> str:
        return self.text


class FolderOwnedError(ConfigError):
    """The output folder holds another campaign's state; the run was refused."""


def _refusal(folder: Path, owner: str, current: CampaignIdentity) -> FolderOwnedError:
    return FolderOwnedError(
        f"output folder {folder} belongs to campaign {owner}; refusing to run campaign "
        f"{current.describe()} into it: the two campaigns' jobs would mix in its state, status "
        "and results. Use another folder (-o DIR), or --adopt-folder (adopt_folder=True from "
        "Python) to make it this campaign's (the other's jobs stay listed in it)"
    )


def owner_note(
    folder: Path,
    recorded: CampaignIdentity | None,
    legacy: str | None,
    current: CampaignIdentity,
    adopt: bool,
) -> FolderNote | None:
    """Whether campaign ``current`` may run into ``folder``, whose recorded owner is ``recorded``
    (None: none recorded; then ``legacy`` is the campaign file of its last run, if any): a note
    for the log (None: nothing to say), or :class:`FolderOwnedError` naming both campaigns and
    the folder.

    A folder belongs to the campaign recorded as its owner: the first that ran into it, or
    the last that adopted it (a resume records the file's hash and place anew). Accepted:

    * a fresh folder;
    * the same file content (same hash), whatever its name or place now: a renamed or
      moved file that was not edited is the same campaign;
    * the same campaign file (same resolved path, so the same name) edited since the last
      run: users edit a campaign between reruns (a longer time limit, one more sweep
      point), so this is a resume, noted in the log, and the new hash is recorded. Jobs
      keep their state (a finished job is not rerun; a job whose spec changed is reported
      by :meth:`~.store.CampaignStore.sync_jobs`), new jobs are added;
    * a folder written before owners were recorded, whose last run's campaign file had the
      same name (nothing better is known about it);
    * anything, with ``adopt``: the folder becomes ``current``'s, the other campaign's jobs
      stay in its state (and in status and results) and are not run.

    Refused: other content from another file, whether its name differs (``other.yaml``
    into ``demo``'s folder) or not (two ``demo.yaml`` in different folders are not assumed
    to be one campaign: a moved and edited file needs ``adopt`` once).
    """
    if recorded is None:
        if legacy is None:
            return None
        if Path(legacy).stem == current.name:
            return FolderNote(
                f"output folder {folder} was written by campaign {legacy} before folders "
                f"recorded their campaign; it is now recorded as {current.describe()}'s"
            )
        if adopt:
            return FolderNote(
                f"campaign {current.describe()} adopts output folder {folder}, written by "
                f"campaign {legacy}; that campaign's jobs stay in its state",
                notable=True,
            )
        raise _refusal(folder, f"{Path(legacy).stem!r} ({legacy})", current)
    if recorded.sha256 == current.sha256:
        if (recorded.name, recorded.file) == (current.name, current.file):
            return None
        return FolderNote(
            f"campaign {current.describe()} has the content of {recorded.describe()}, the "
            f"owner of {folder} (renamed or moved): resuming it"
        )
    if recorded.file is not None and recorded.file == current.file:
        return FolderNote(
            f"campaign file {current.file} was edited since the last run into {folder} "
            f"(sha256 {recorded.sha256[:12]} -> {current.sha256[:12]}): resuming it; "
            "finished jobs keep their results (they are not rerun), changed jobs their "
            "state, new jobs are added",
            notable=True,
        )
    if adopt:
        return FolderNote(
            f"campaign {current.describe()} adopts output folder {folder}, which belonged "
            f"to {recorded.describe()}; that campaign's jobs stay in its state",
            notable=True,
        )
    raise _refusal(folder, recorded.describe(), current)


__all__ = ["CampaignIdentity", "FolderNote", "FolderOwnedError", "owner_note"]
