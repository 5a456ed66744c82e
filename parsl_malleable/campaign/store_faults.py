"""What a fault of a campaign's SQLite state means to its user, in one line.

SQLite's own words (``database or disk is full``, ``database disk image is malformed``) name no
file and say nothing of what survived. A fault of ``state.sqlite`` becomes a
:class:`~parsl_malleable.errors.StateStoreError` naming the file, what is intact (the
checkpoints are files of their own under ``checkpoints/``, never in the database; on a full
disk or a read-only folder the database too is as its last commit left it) and how to recover
(docs/campaigns.md, "When the state store fails").
"""

from __future__ import annotations

import errno
import functools
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from parsl_malleable.errors import StateStoreError

R = TypeVar("R")

RERUN = "rerun the same command: each job resumes from its last checkpoint"

# Primary result codes (https://sqlite.org/rescode.html); SQLITE_ERROR (1: "no such table", a
# bad query) is not a fault of the file and stays an sqlite3 error.
_FULL = {13}  # SQLITE_FULL
_UNWRITABLE = {3, 8, 14}  # SQLITE_PERM, SQLITE_READONLY, SQLITE_CANTOPEN
_DAMAGED = {11, 26}  # SQLITE_CORRUPT, SQLITE_NOTADB
_OTHER = {5, 6, 10, 15}  # SQLITE_BUSY, SQLITE_LOCKED, SQLITE_IOERR, SQLITE_PROTOCOL


def _checkpoints(path: Path) -> str:
    return f"the checkpoints in {path.parent / 'checkpoints'}/"


def damaged(path: Path, detail: str) -> StateStoreError:
    """The error of a ``state.sqlite`` that is not a sound database (``detail``: what says so)."""
    aside = path.parent / "damaged"
    return StateStoreError(
        path,
        f"{path} is damaged ({detail}); {_checkpoints(path)} are not in it and are intact. To "
        f"recover, move it and its -wal/-shm files aside (mkdir {aside} && mv {path}* {aside}/) "
        f"and {RERUN}",
    )


def disk_full(path: Path) -> StateStoreError:
    """The error of a write that found the disk of ``path`` full."""
    return StateStoreError(
        path,
        f"{path}: cannot write the campaign state: the disk is full; the state as of its last "
        f"sample and {_checkpoints(path)} are intact. Free space on that disk and {RERUN}",
    )


def unwritable(path: Path, reason: str) -> StateStoreError:
    """The error of a ``state.sqlite`` (or its folder) that cannot be written."""
    folder = path.parent
    if not os.access(folder, os.W_OK):
        reason = f"its folder {folder} is read-only"
    return StateStoreError(
        path,
        f"{path}: cannot write the campaign state: {reason}; it and {_checkpoints(path)} are "
        f"as the last run left them. Make {folder} writable (or run into another folder with "
        f"-o DIR) and {RERUN}",
    )


def fault(path: Path, exc: sqlite3.Error | OSError) -> StateStoreError | None:
    """The :class:`StateStoreError` that ``exc``, raised on ``path``, means (None: no fault of
    the file, such as a query on a table not made yet)."""
    if isinstance(exc, OSError):
        if exc.errno == errno.ENOSPC:
            return disk_full(path)
        if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            return unwritable(path, exc.strerror or str(exc))
        return None
    code = getattr(exc, "sqlite_errorcode", 1) & 0xFF
    if code in _FULL:
        return disk_full(path)
    if code in _UNWRITABLE:
        return unwritable(path, str(exc))
    if code in _DAMAGED:
        return damaged(path, str(exc))
    if code in _OTHER:
        return StateStoreError(
            path,
            f"{path}: cannot read or write the campaign state ({exc}); {_checkpoints(path)} "
            f"are intact. Once the cause is fixed, {RERUN}",
        )
    return None


class HasPath(Protocol):
    """What :func:`guarded` needs of a store: the path of its file."""

    path: Path


def guarded(method: Callable[..., R]) -> Callable[..., R]:
    """``method`` of a store, with a fault of its file raised as :class:`StateStoreError`."""

    @functools.wraps(method)
    def call(self: HasPath, *args: Any, **kwargs: Any) -> R:
        try:
            return method(self, *args, **kwargs)
        except (sqlite3.Error, OSError) as exc:
            error = fault(self.path, exc)
            if error is None:
                raise
            raise error from exc

    return call


__all__ = ["RERUN", "damaged", "disk_full", "fault", "guarded", "unwritable"]
