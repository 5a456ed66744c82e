"""Whom a checkpoint folder's files vouch for: the master key kept beside the folder, the key each
job signs its manifests with, and the owner and mode checks of every file read from there.

The threat model is :mod:`parsl_malleable.elastic.checkpoint`'s; this module is the part of the
checkpoint store that decides trust, apart from the part that stores (its writes, locks and
pruning), so that each can be read and tested alone.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import tempfile
from pathlib import Path
from typing import Any

from parsl_malleable.errors import CheckpointError, UnsafePathError
from parsl_malleable.private_files import read_private_bytes, read_regular_file
from parsl_malleable.transport.wire import derive_secret

log = logging.getLogger(__name__)

KEY_FILE_NAME = ".parsl-malleable-checkpoint.key"
_KEY_TEXT = re.compile(r"^[0-9a-f]{64}$")
TMP_PREFIX = ".tmp-"


class Unvouched(Exception):
    """A manifest that fails authentication: damaged, forged, or signed with another key. The
    store skips its checkpoint and tries the next older one."""


def describe_job(campaign: str, job: str) -> str:
    """``job 'x' of campaign 'c'`` (or ``an unnamed job``), for messages."""
    who = f"job {job!r}" if job else "an unnamed job"
    return f"{who} of campaign {campaign!r}" if campaign else who


class CheckpointTrust:
    """The trust of one checkpoint folder (``directory``, named in messages) for one job
    (``campaign``, ``job``): its master key in ``key_file``, read once (made by the first save)."""

    def __init__(self, directory: Path, key_file: Path, campaign: str, job: str) -> None:
        self.directory = directory
        self.key_file = key_file
        self.campaign = campaign
        self.job = job
        self._master: str | None = None

    def master_key(self, create: bool) -> str | None:
        """The folder's master key (made, atomically, when ``create`` and there is none)."""
        if self._master is None:
            self._master = read_key(self.key_file)
            if self._master is None and create:
                self._master = create_key(self.key_file)
        return self._master

    def sign(self, manifest: dict[str, Any], master: str) -> None:
        """Add ``key_id`` and ``mac`` (this job's key over every other field) to ``manifest``."""
        manifest["key_id"] = key_id(master)
        manifest["mac"] = manifest_mac(manifest, job_key(master, self.campaign, self.job))

    def vouch(self, path: Path, manifest: dict[str, Any], adopt: bool) -> tuple[str | None, bool]:
        """Authenticate ``manifest`` (of checkpoint ``path``): ``(None, True)`` when it is this
        job's own, else why ``adopt`` takes it and whether anything authenticated it. Raises
        :class:`Unvouched` (skip it) or :class:`CheckpointError` (refuse it: not this job's and
        ``adopt`` is False, or its key is missing)."""
        manifest_path = path.with_suffix(".json")
        master = self.master_key(create=False)
        if master is None:
            if not adopt:
                raise CheckpointError(
                    f"checkpoint {path} cannot be authenticated: the key file {self.key_file} "
                    f"is missing (was {self.directory} moved or copied without it?). Put the "
                    f"key back, or start from these checkpoints explicitly with "
                    f"warm_start_from={str(self.directory)!r}."
                )
            return f"not authenticated: the key file {self.key_file} is missing", False
        claimed = (manifest["campaign"], manifest["job"])
        expected = manifest_mac(manifest, job_key(master, *claimed))
        if not hmac.compare_digest(manifest["mac"].encode(), expected.encode()):
            raise Unvouched(
                f"its manifest {manifest_path} fails authentication with the key "
                f"{self.key_file} (HMAC-SHA256): it is damaged, was written by someone without "
                f"that key, or was copied from a folder with another key (it names key "
                f"{manifest.get('key_id')}, this folder's is {key_id(master)})"
            )
        if claimed == (self.campaign, self.job):
            return None, True
        theirs, ours = describe_job(*claimed), describe_job(self.campaign, self.job)
        if not adopt:
            raise CheckpointError(
                f"checkpoint {path} belongs to {theirs}, not to this {ours}: resuming it would "
                f"carry that job's weights and user fields into this one. Give this job its own "
                f"checkpoint_dir, or start it from that checkpoint explicitly with "
                f"warm_start_from={str(self.directory)!r}."
            )
        return f"a checkpoint of {theirs} (authenticated)", True


def manifest_mac(manifest: dict[str, Any], job_key: str) -> str:
    """HMAC-SHA256 under ``job_key`` of every field of ``manifest`` but ``mac`` itself."""
    fields = {key: value for key, value in manifest.items() if key != "mac"}
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return hmac.new(job_key.encode(), text.encode(), hashlib.sha256).hexdigest()


def job_key(master: str, campaign: str, job: str) -> str:
    """The key one job signs its manifests with: knowing it tells nothing of another job's."""
    return derive_secret(master, "checkpoint-manifest/" + json.dumps([campaign, job]))


def key_id(master: str) -> str:
    """A public name of a master key, so that messages can tell two keys apart."""
    return derive_secret(master, "checkpoint-key-id")[:16]


# ---------------------------------------------------------------------- files and keys


def read_regular(path: Path) -> tuple[bytes, os.stat_result]:
    """The bytes of ``path`` and its status, never through a symbolic link nor blocking on a
    FIFO named like a checkpoint (:func:`parsl_malleable.private_files.read_regular_file`); a
    refusal is a :class:`CheckpointError`."""
    try:
        return read_regular_file(path)
    except UnsafePathError as exc:
        raise CheckpointError(str(exc)) from exc


def read_owned(path: Path, *, secret: bool = False) -> bytes:
    """The bytes of ``path``, refused (:class:`CheckpointError` naming it and why) unless it
    belongs to this user and nobody else may change it (nor read it, for a ``secret``): the
    checks of :func:`~parsl_malleable.private_files.read_private_bytes`, on the file read."""
    try:
        return read_private_bytes(path, secret=secret)
    except UnsafePathError as exc:
        raise CheckpointError(str(exc)) from exc


def read_key(path: Path) -> str | None:
    """The master key in ``path``, None when there is none; refused when unsafe or damaged."""
    try:
        text = read_owned(path, secret=True).decode(errors="replace").strip()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CheckpointError(f"cannot read the checkpoint key {path}: {exc}") from exc
    if not _KEY_TEXT.match(text):
        raise CheckpointError(
            f"the checkpoint key {path} is damaged (not 64 hex digits); checkpoints signed with "
            f"it cannot be authenticated any more"
        )
    return text


def create_key(path: Path) -> str:
    """Make a new master key at ``path`` unless another process just did; the key in force.

    Written whole to a private temporary file and hard-linked into place, so a concurrent
    reader never sees a partial key and two writers agree on the first one linked.
    """
    key = secrets.token_hex(32)
    try:
        fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f"{TMP_PREFIX}key-")
    except OSError as exc:
        raise CheckpointError(
            f"cannot create the checkpoint key {path}: {exc}; checkpoints are signed with a key "
            f"kept beside their folder, so its parent {path.parent} must be writable"
        ) from exc
    try:
        with os.fdopen(fd, "w") as file:
            os.fchmod(file.fileno(), 0o600)
            file.write(key + "\n")
            file.flush()
            os.fsync(file.fileno())
        link_key(Path(tmp_name), path, key)
    except OSError as exc:
        raise CheckpointError(f"cannot create the checkpoint key {path}: {exc}") from exc
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
    in_force = read_key(path)
    if in_force is None:
        raise CheckpointError(f"the checkpoint key {path} vanished as it was created")
    if in_force == key:
        log.info("created the checkpoint key %s", path)
    return in_force


def link_key(tmp: Path, path: Path, key: str) -> None:
    """Put the key written in ``tmp`` at ``path`` unless a key is there already."""
    try:
        os.link(tmp, path)
    except FileExistsError:
        return
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
            raise
        # No hard links here (some FUSE and object stores): create it exclusively instead; a
        # reader racing this write sees a short key and fails loudly, never a wrong one.
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            return
        with os.fdopen(fd, "w") as file:
            file.write(key + "\n")
            file.flush()
            os.fsync(file.fileno())
    fsync_dir(path.parent)


def fsync_dir(directory: Path) -> None:
    """Make renames in ``directory`` durable (where the file system supports it)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as exc:
        # Some network file systems refuse fsync on a directory; the rename is still atomic.
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


__all__ = [
    "KEY_FILE_NAME",
    "TMP_PREFIX",
    "CheckpointTrust",
    "Unvouched",
    "describe_job",
    "fsync_dir",
    "read_owned",
    "read_regular",
]
