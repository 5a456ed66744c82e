"""``read_trace``: one entry point that picks the reader from the format name or the file."""

from __future__ import annotations

import gzip
import re
from collections.abc import Callable
from pathlib import Path

from parsl_malleable.errors import TraceFormatError
from parsl_malleable.traces.cobalt import read_cobalt
from parsl_malleable.traces.pbs import read_pbs_accounting
from parsl_malleable.traces.schema import JobTrace
from parsl_malleable.traces.slurm import read_sacct
from parsl_malleable.traces.swf import read_swf

READERS: dict[str, Callable[..., JobTrace]] = {
    "swf": read_swf,
    "cobalt": read_cobalt,
    "sacct": read_sacct,
    "pbs": read_pbs_accounting,
}
ALIASES = {"slurm": "sacct", "pbspro": "pbs", "torque": "pbs"}
_ACCOUNTING = re.compile(r"^\d\d/\d\d/\d{4} \d\d:\d\d:\d\d;[A-Z];")
# attributes only Cobalt writes into its records (PBS has none of them)
_COBALT_WORDS = (" mode=", " args=", " exe=", " location=")
SNIFF_LINES = 50


def read_trace(path: str | Path, format: str | None = None, **options) -> JobTrace:
    """Read any supported job trace; ``format`` is ``swf``, ``cobalt``, ``sacct`` or ``pbs``.

    Without ``format`` the reader is chosen by suffix (``.swf``, ``.swf.gz``) or by the first
    lines: ``;`` headers or 18 numbers (SWF), a ``|`` header naming ``JobID`` (sacct), or
    ``date;type;id;`` records (Cobalt when they carry Cobalt-only attributes such as ``mode=``,
    PBS otherwise). ``options`` go to the reader (``cores_per_node``, ``nodes``, ``skip_bad``).
    """
    path = Path(path)
    name = (format or detect_format(path)).lower()
    name = ALIASES.get(name, name)
    if name not in READERS:
        raise ValueError(f"unknown trace format {format!r}; choose from {sorted(READERS)}")
    if name == "cobalt" and "nodes" not in options:
        raise ValueError("Cobalt logs do not state the machine size: pass nodes=<node count>")
    return READERS[name](path, **options)


def detect_format(path: str | Path) -> str:
    """The format name of a trace file, from its suffix or its first lines."""
    path = Path(path)
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes[-1:] == [".swf"] or suffixes[-2:] == [".swf", ".gz"]:
        return "swf"
    head = _head(path)
    records = [line for line in head if line.strip() and not line.startswith("#")]
    if not records:
        raise TraceFormatError(path, None, "empty file: cannot tell its trace format")
    first = records[0]
    if first.startswith(";") or _is_swf_record(first):
        return "swf"
    if "|" in first and "JobID" in first.split("|"):
        return "sacct"
    if _ACCOUNTING.match(first):
        cobalt = any(word in line for line in records for word in _COBALT_WORDS)
        return "cobalt" if cobalt else "pbs"
    raise TraceFormatError(
        path, 1, "unknown trace format (not SWF, sacct --parsable2, Cobalt or PBS); pass format="
    )


def _head(path: Path) -> list[str]:
    if not path.is_file():
        raise TraceFormatError(path, None, "no such file")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as fh:
        return [line for _, line in zip(range(SNIFF_LINES), fh, strict=False)]


def _is_swf_record(line: str) -> bool:
    fields = line.split()
    if len(fields) < 18:
        return False
    try:
        [float(f) for f in fields[:18]]
    except ValueError:
        return False
    return True
