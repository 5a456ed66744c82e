"""Opening trace files (plain or gzip) and the small pieces every reader shares."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import IO

from parsl_malleable.errors import TraceFormatError

MAX_EXAMPLES = 5  # skipped lines kept verbatim in ReadReport.skipped_examples


GZIP_MAGIC = b"\x1f\x8b"


def is_gzip(path: str | Path) -> bool:
    """Whether the file starts with the gzip magic bytes (names lie: ``x.csv`` may be gzipped)."""
    with open(path, "rb") as fh:
        return fh.read(2) == GZIP_MAGIC


def open_text(path: str | Path, newline: str | None = None) -> IO[str]:
    """Open a text file for reading, gunzipping it when its content is gzip (whatever its name)."""
    if is_gzip(path):
        return gzip.open(path, "rt", encoding="utf-8", errors="replace", newline=newline)
    return open(path, encoding="utf-8", errors="replace", newline=newline)


def read_lines(path: str | Path) -> list[str]:
    """All lines of a text trace, gunzipped when it is gzip."""
    path = Path(path)
    if not path.is_file():
        raise TraceFormatError(path, None, "no such file")
    try:
        with open_text(path) as fh:
            return fh.read().splitlines()
    except (OSError, EOFError) as exc:  # a truncated or corrupt gzip stream
        raise TraceFormatError(path, None, f"cannot read: {exc}") from None


def example(path: str | Path, lineno: int, text: str, why: str) -> str:
    """One ``skipped_examples`` entry: where, why, and the line itself (shortened)."""
    short = text if len(text) <= 120 else text[:117] + "..."
    return f"{Path(path).name}:{lineno}: {why}: {short}"
