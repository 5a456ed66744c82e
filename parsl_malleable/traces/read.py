"""``read_trace``: one entry point that picks the reader from the format name or the file."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from parsl_malleable.errors import TraceFormatError
from parsl_malleable.traces._io import head_lines
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
# Cobalt's exec_host is node numbers and ranges (3800-3927,4000); PBS's is host/slot chunks
_COBALT_HOSTS = re.compile(
    r"\bexec_host=((?:nid)?\d+(?:-(?:nid)?\d+)?(?:[,:](?:nid)?\d+(?:-(?:nid)?\d+)?)*)(?:\s|$)"
)
_PBS_HOSTS = re.compile(r"\bexec_host=(\S+/\S*)")
_PBS_WORDS = ("Resource_List.select=", "exec_vnode=", "Resource_List.place=")
SNIFF_LINES = 50
SCAN_LINES = 20_000  # accounting logs: Q records carry no evidence, so look further


@dataclass(frozen=True)
class FormatGuess:
    """The format :func:`guess_format` chose and the evidence it chose it on."""

    name: str
    reason: str


def read_trace(path: str | Path, format: str | None = None, **options) -> JobTrace:
    """Read any supported job trace; ``format`` is ``swf``, ``cobalt``, ``sacct`` or ``pbs``.

    Without ``format`` the reader is chosen by :func:`guess_format`, which refuses rather than
    guess without evidence; the choice and its reason are kept in ``report.format`` and
    ``report.format_reason``. ``options`` go to the reader (``cores_per_node``, ``nodes``,
    ``skip_bad``). A trace with no usable job raises :class:`TraceFormatError` saying what was
    skipped and why.
    """
    path = Path(path)
    guess = guess_format(path) if format is None else FormatGuess(format.lower(), "given")
    name = ALIASES.get(guess.name, guess.name)
    if name not in READERS:
        raise ValueError(f"unknown trace format {format!r}; choose from {sorted(READERS)}")
    if name == "cobalt" and "nodes" not in options:
        raise ValueError("Cobalt logs do not state the machine size: pass nodes=<node count>")
    trace = READERS[name](path, **options)
    trace.report.format, trace.report.format_reason = name, guess.reason
    if not len(trace.jobs):
        raise TraceFormatError(path, None, f"no usable job ({name}): {_nothing_usable(trace)}")
    return trace


def _nothing_usable(trace: JobTrace) -> str:
    report = trace.report
    if not report.lines_read:
        return "the file has no job records"
    reasons = [f"{kind} {report.describe(kind)}" for kind in sorted(report.examples)]
    text = f"{report.lines_read} records read, {report.skipped} skipped"
    reasons += [f"skipped {example}" for example in report.skipped_examples[:1]]
    return text + (": " + "; ".join(reasons) if reasons else "")


def detect_format(path: str | Path) -> str:
    """The format name of a trace file (see :func:`guess_format`)."""
    return guess_format(path).name


def guess_format(path: str | Path) -> FormatGuess:
    """The format of a trace file from its suffix or content, with the evidence used.

    ``.swf``/``.swf.gz`` names, ``;`` headers or 18-number records are SWF; a ``|`` header
    naming ``JobID`` is sacct. ``date;type;id;`` records are Cobalt or PBS, which share a
    layout: Cobalt when records carry Cobalt-only attributes (``mode=``, ...) or an
    ``exec_host`` of node numbers, PBS when they carry ``host/slot`` exec hosts or PBS-only
    attributes (``Resource_List.select``, ...). With evidence for neither or both the guess
    is refused (a wrong guess counts every Cobalt job as one node): pass the format.
    """
    path = Path(path)
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes[-1:] == [".swf"] or suffixes[-2:] == [".swf", ".gz"]:
        return FormatGuess("swf", f"the name ends in {''.join(suffixes[-2:])}")
    head = head_lines(path, SNIFF_LINES)
    records = [line for line in head if line.strip() and not line.startswith("#")]
    if not records:
        raise TraceFormatError(path, None, "empty file: cannot tell its trace format")
    first = records[0]
    if first.startswith(";"):
        return FormatGuess("swf", "the first record is a ';' SWF header line")
    if _is_swf_record(first):
        return FormatGuess("swf", "the first record has 18 numeric SWF fields")
    if "|" in first and "JobID" in first.split("|"):
        return FormatGuess("sacct", "the first line is a '|' header naming JobID")
    if _ACCOUNTING.match(first):
        return _cobalt_or_pbs(path)
    raise TraceFormatError(
        path, 1, "unknown trace format (not SWF, sacct --parsable2, Cobalt or PBS); pass format="
    )


def _cobalt_or_pbs(path: Path) -> FormatGuess:
    """Cobalt or PBS from the first line that shows which, refusing when none or both do."""
    cobalt = pbs = None
    for lineno, line in enumerate(head_lines(path, SCAN_LINES), 1):
        if cobalt is None and (
            any(word in line for word in _COBALT_WORDS) or _COBALT_HOSTS.search(line)
        ):
            cobalt = f"line {lineno} has {_evidence(line, True)} (Cobalt)"
        if pbs is None and (any(word in line for word in _PBS_WORDS) or _PBS_HOSTS.search(line)):
            pbs = f"line {lineno} has {_evidence(line, False)} (PBS)"
        if cobalt and pbs:
            break
    if cobalt and not pbs:
        return FormatGuess("cobalt", cobalt)
    if pbs and not cobalt:
        return FormatGuess("pbs", pbs)
    seen = f"{cobalt} but {pbs}" if cobalt else "no Cobalt-only or PBS-only attribute"
    raise TraceFormatError(
        path,
        None,
        f"cannot tell Cobalt from PBS accounting records ({seen}); pass format='cobalt' or "
        "'pbs' (--format / --trace-format)",
    )


def _evidence(line: str, cobalt: bool) -> str:
    words = _COBALT_WORDS if cobalt else _PBS_WORDS
    hosts = _COBALT_HOSTS if cobalt else _PBS_HOSTS
    found = hosts.search(line)
    if found:
        return f"exec_host={found.group(1)[:40]}"
    return next(word.strip() for word in words if word in line) + "..."


def _is_swf_record(line: str) -> bool:
    fields = line.split()
    if len(fields) < 18:
        return False
    try:
        [float(f) for f in fields[:18]]
    except ValueError:
        return False
    return True
