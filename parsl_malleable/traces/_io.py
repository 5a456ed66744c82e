"""Opening trace files (plain or gzip) and the small pieces every reader shares."""

from __future__ import annotations

import gzip
from pathlib import Path

from parsl_malleable.errors import TraceFormatError

MAX_EXAMPLES = 5  # skipped lines kept verbatim in ReadReport.skipped_examples


def read_lines(path: str | Path) -> list[str]:
    """All lines of a text trace, gunzipped when the name ends in ``.gz``."""
    path = Path(path)
    if not path.is_file():
        raise TraceFormatError(path, None, "no such file")
    if path.suffix == ".gz":
        with gzip.open(path, "rt", encoding="utf-8", errors="replace") as fh:
            return fh.read().splitlines()
    return path.read_text(encoding="utf-8", errors="replace").splitlines()


def example(path: str | Path, lineno: int, text: str, why: str) -> str:
    """One ``skipped_examples`` entry: where, why, and the line itself (shortened)."""
    short = text if len(text) <= 120 else text[:117] + "..."
    return f"{Path(path).name}:{lineno}: {why}: {short}"
