"""Exception types shared by every part of parsl-malleable.

Each error names the thing that was wrong (a file and line, a config key, a command), so that a
user can fix the input without reading a traceback.
"""

from __future__ import annotations

from pathlib import Path


class MalleableError(Exception):
    """Base class of every error raised on purpose by parsl-malleable."""


class TraceFormatError(MalleableError):
    """A trace file has a line that cannot be parsed."""

    def __init__(self, path: str | Path, line: int | None, message: str) -> None:
        self.path = str(path)
        self.line = line
        self.reason = message
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {message}")


class ConfigError(MalleableError):
    """A configuration file or value is invalid."""


class SnapshotError(MalleableError):
    """A scheduler snapshot is inconsistent (for example a job larger than its partition)."""


class SchedulerCommandError(MalleableError):
    """A scheduler command failed, hung, or printed output that could not be parsed."""

    def __init__(self, argv: list[str], message: str) -> None:
        self.argv = list(argv)
        self.reason = message
        super().__init__(f"{' '.join(argv)}: {message}")


class StartRefused(SchedulerCommandError):
    """The scheduler refused a block's start test (a partition limit, a reservation, a node
    not available); ``reason`` holds the scheduler's own words."""


class UnsafePathError(MalleableError):
    """A folder or file that another user could change, read or swap (a link, another user's
    file, loose permissions): refused rather than trusted."""


class CheckpointError(MalleableError):
    """A checkpoint is corrupt, truncated, or belongs to a different model."""


class SolverError(MalleableError):
    """An optimisation model could not be solved."""


class StateStoreError(MalleableError):
    """A campaign's state database (``state.sqlite``) cannot be read or written: damaged, on a
    full disk, or in a read-only folder. The message is one line naming the file, what is intact
    and how to recover; ``path`` is the file."""

    def __init__(self, path: str | Path, message: str) -> None:
        self.path = str(path)
        super().__init__(message)
