"""One driver at a time in an output folder, and a way to ask whether one runs there now.

The driver holds an exclusive ``flock`` on ``driver.lock`` in its (private) output folder for as
long as it runs; the kernel drops it when the driver dies, however it dies, so no stale file can
claim that a dead run still runs (which a pid file or the old ``lifeline.json`` could). A second
``run`` into the same folder is refused while the first one lives; ``status`` asks the lock.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from pathlib import Path
from types import TracebackType

from parsl_malleable.errors import ConfigError, UnsafePathError
from parsl_malleable.private_files import check_private_file

LOCK_FILE = "driver.lock"


def _checked(fd: int, path: Path) -> int:
    """``fd`` when it is open on a regular file of this user that nobody else may change; else
    it is closed and :class:`UnsafePathError` says why (a FIFO planted as the lock would hang
    or fool whoever waits on it)."""
    info = os.fstat(fd)
    problem = None
    if not stat.S_ISREG(info.st_mode):
        problem = "it is not a regular file (another user may have planted it); delete it"
    elif info.st_uid != os.geteuid():
        problem = f"it belongs to uid {info.st_uid}, not to this user; delete it"
    elif stat.S_IMODE(info.st_mode) & 0o022:
        problem = f"its mode is {stat.S_IMODE(info.st_mode):04o}: others can change it; delete it"
    if problem is None:
        return fd
    os.close(fd)
    raise UnsafePathError(f"refusing the driver lock {path}: {problem}")


def _open_nofollow(path: Path, flags: int) -> int:
    """``os.open`` that follows no link and never blocks (on a FIFO); a link is refused with
    :class:`UnsafePathError`, other errors pass through."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePathError(
                f"refusing the driver lock {path}: it is a symbolic link, which could point "
                "anywhere; delete it"
            ) from None
        raise


def _open(path: Path) -> int:
    check_private_file(path)  # a planted link or another user's file is refused
    # Checked again on the open file: something may have been planted since the check.
    return _checked(_open_nofollow(path, os.O_RDWR | os.O_CREAT), path)


class DriverLock:
    """Held by a running driver on ``folder`` (a context manager); :class:`ConfigError` when
    another driver holds it."""

    def __init__(self, folder: Path) -> None:
        self.path = Path(folder) / LOCK_FILE
        self._fd: int | None = None

    def __enter__(self) -> DriverLock:
        fd = _open(self.path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise ConfigError(
                    f"{self.path.parent}: another driver is running into this folder now; "
                    "wait for it to end (parsl-malleable status shows it), or give another "
                    "output folder"
                ) from None
            raise
        self._fd = fd
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor drops the lock
            self._fd = None


def driver_running(folder: Path) -> bool:
    """Whether a driver holds ``folder``'s lock now (False when there is no lock file);
    :class:`UnsafePathError` for a link, a FIFO or anything but this user's regular file in its
    place, which no driver made (asked without blocking: a FIFO would hang the asker)."""
    path = Path(folder) / LOCK_FILE
    try:
        fd = _checked(_open_nofollow(path, os.O_RDONLY), path)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
    return False


__all__ = ["LOCK_FILE", "DriverLock", "driver_running"]
