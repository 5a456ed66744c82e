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
from pathlib import Path
from types import TracebackType

from parsl_malleable.errors import ConfigError
from parsl_malleable.private_files import check_private_file

LOCK_FILE = "driver.lock"


def _open(path: Path) -> int:
    check_private_file(path)  # a planted link or another user's file is refused
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)


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
    """Whether a driver holds ``folder``'s lock now (False when there is no lock file)."""
    path = Path(folder) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
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
