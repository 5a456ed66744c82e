"""Reader for Slurm accounting exports: ``sacct --parsable2 --allusers --format=...``.

The first line names the columns (``JobID|Submit|Start|End|Timelimit|NNodes|ReqNodes|NCPUS|
ReqCPUS|Partition|User|State``; only ``JobID`` and ``Submit`` are required, any order, extra
columns ignored). Job steps (``123.batch``, ``123.extern``, ``123.0``) are skipped: their parent
line already describes the allocation.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from parsl_malleable.errors import TraceFormatError
from parsl_malleable.traces._frame import clamp_to_machine, jobs_frame, lines_of
from parsl_malleable.traces._io import MAX_EXAMPLES, example, read_lines
from parsl_malleable.traces._values import UNKNOWN, duration_seconds, leading_int, map_unique
from parsl_malleable.traces.schema import JobTrace, MachineInfo, ReadReport

REQUIRED = ("JobID", "Submit")
COUNT_COLUMNS = ("NNodes", "ReqNodes", "NCPUS", "ReqCPUS")
TIME_COLUMNS = ("Submit", "Start", "End")


def read_sacct(path: str | Path, *, nodes: int | None = None, skip_bad: bool = False) -> JobTrace:
    """Read a ``sacct --parsable2`` export (``|``-separated, header line first).

    Times are ISO (``2024-03-01T10:00:00``, read as UTC) and rebased to the first submit;
    ``Unknown``/``None`` mean unknown. ``Timelimit`` accepts ``D-HH:MM:SS``, ``HH:MM:SS``,
    ``MM:SS``, a bare number of minutes, and ``UNLIMITED``/``Partition_Limit`` (NaN walltime).
    ``nodes`` is ``NNodes`` (else ``ReqNodes``), ``nodes_req`` is ``ReqNodes`` (else ``NNodes``);
    jobs with neither are skipped. ``job_id`` is ``JobIDRaw`` when exported, else the leading
    number of ``JobID`` (array tasks ``123_4`` share their array's number). The machine has
    ``nodes`` nodes, or as many as the largest job.
    """
    path = Path(path)
    report = ReadReport()
    lines = read_lines(path)
    header_at = next((i for i, line in enumerate(lines) if line.strip()), None)
    if header_at is None:
        raise TraceFormatError(path, None, "empty file: expected a sacct --parsable2 header")
    names = [n.strip() for n in lines[header_at].rstrip("|").split("|")]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise TraceFormatError(
            path, header_at + 1, f"header names columns {twice} more than once: {names}"
        )
    missing = [c for c in REQUIRED if c not in names]
    if missing:
        raise TraceFormatError(path, header_at + 1, f"header lacks columns {missing}: {names}")

    rows, linenos = _rows(path, lines, header_at, len(names), skip_bad, report)
    frame = pd.DataFrame(rows, columns=names)
    frame["lineno"] = linenos
    is_step = frame["JobID"].str.contains(".", regex=False)
    report.note("job_steps_skipped", int(is_step.sum()), lines_of(frame["lineno"], is_step))
    frame = frame[~is_step].reset_index(drop=True)

    bad = _convert(frame, path, lines, skip_bad, report)
    frame = frame[~bad].reset_index(drop=True)

    alloc = frame.get("NNodes", pd.Series(np.nan, index=frame.index)).where(lambda s: s > 0)
    req = frame.get("ReqNodes", pd.Series(np.nan, index=frame.index)).where(lambda s: s > 0)
    no_size = alloc.isna() & req.isna()
    if no_size.any():
        report.skipped += int(no_size.sum())
        report.note("skipped_no_node_count", int(no_size.sum()), lines_of(frame["lineno"], no_size))
        for n in frame.loc[no_size, "lineno"].head(MAX_EXAMPLES):
            if len(report.skipped_examples) < MAX_EXAMPLES:
                report.skipped_examples.append(example(path, n, lines[n - 1], "no node count"))
        keep = ~no_size
        frame, alloc, req = (x[keep].reset_index(drop=True) for x in (frame, alloc, req))
    report.note("nodes_req_missing", int(req.isna().sum()), lines_of(frame["lineno"], req.isna()))
    report.note(
        "nodes_alloc_missing", int(alloc.isna().sum()), lines_of(frame["lineno"], alloc.isna())
    )
    nodes_req = req.fillna(alloc).to_numpy(dtype=np.int64)
    nodes_alloc = alloc.fillna(req).to_numpy(dtype=np.int64)

    if nodes is None:
        machine_nodes = int(max(nodes_req.max(initial=1), nodes_alloc.max(initial=1)))
        report.note("machine_size_inferred")
    elif nodes <= 0:
        raise ValueError(f"nodes must be positive, got {nodes}")
    else:
        machine_nodes = nodes
    lines_at = frame["lineno"].to_numpy()
    nodes_req = clamp_to_machine(nodes_req, machine_nodes, report, "nodes_req_clamped", lines_at)
    nodes_alloc = clamp_to_machine(nodes_alloc, machine_nodes, report, "nodes_clamped", lines_at)

    submit = frame["Submit"]
    epoch = float(np.floor(submit.min())) if len(frame) else 0.0
    start = _column(frame, "Start")
    end = _column(frame, "End")
    no_end = start.notna() & end.isna()
    report.note("never_started", int(start.isna().sum()), lines_of(lines_at, start.isna()))
    report.note("no_end_time", int(no_end.sum()), lines_of(lines_at, no_end))
    walltime = _column(frame, "Timelimit")
    report.note("walltime_unknown", int(walltime.isna().sum()), lines_of(lines_at, walltime.isna()))
    job_id = leading_int(frame["JobIDRaw"] if "JobIDRaw" in frame else frame["JobID"])

    jobs = jobs_frame(
        {
            "job_id": np.where(job_id >= 0, job_id, frame["lineno"]),
            "submit": submit - epoch,
            "start": start - epoch,
            "end": end - epoch,
            "walltime": walltime,
            "nodes_req": nodes_req,
            "nodes": nodes_alloc,
            "cores_req": _column(frame, "ReqCPUS").fillna(-1),
            "cores": _column(frame, "NCPUS").where(lambda s: s > 0).fillna(-1),
            "queue": frame.get("Partition", pd.Series("", index=frame.index)),
            "user": frame.get("User", pd.Series("", index=frame.index)),
        },
        report,
        lines_at,
    )
    machine = MachineInfo(name=f"slurm:{path.name}", nodes=machine_nodes, start_epoch=epoch)
    return JobTrace(jobs=jobs, machine=machine, report=report)


def _rows(
    path: Path, lines: list[str], header_at: int, width: int, skip_bad: bool, report: ReadReport
) -> tuple[list[list[str]], list[int]]:
    """Data rows split on ``|`` (a trailing ``|`` is tolerated) with their line numbers."""
    rows: list[list[str]] = []
    linenos: list[int] = []
    for lineno in range(header_at + 2, len(lines) + 1):
        line = lines[lineno - 1]
        if not line.strip():
            continue
        report.lines_read += 1
        fields = line.split("|")
        if len(fields) == width + 1 and fields[-1] == "":
            fields.pop()
        if len(fields) != width:
            why = f"expected {width} '|'-separated fields as in the header, found {len(fields)}"
            _bad(path, lineno, line, why, skip_bad, report)
            continue
        rows.append([f.strip() for f in fields])
        linenos.append(lineno)
    return rows, linenos


def _bad(path: Path, lineno: int, line: str, why: str, skip_bad: bool, report: ReadReport) -> None:
    if not skip_bad:
        raise TraceFormatError(path, lineno, why)
    report.skipped += 1
    if len(report.skipped_examples) < MAX_EXAMPLES:
        report.skipped_examples.append(example(path, lineno, line, why))


def _convert(
    frame: pd.DataFrame, path: Path, lines: list[str], skip_bad: bool, report: ReadReport
) -> pd.Series:
    """Convert times, counts and time limits in place; return the mask of unusable rows."""
    problems: list[tuple[int, str]] = []
    for col in frame.columns.intersection(TIME_COLUMNS):
        text = frame[col]
        unknown = text.str.lower().isin(UNKNOWN)
        stamps = pd.to_datetime(text.where(~unknown), format="ISO8601", errors="coerce")
        wrong = stamps.isna() & ~unknown
        problems += [(n, f"{col} {t!r} is not an ISO time") for n, t in _at(frame, wrong, col)]
        frame[col] = (stamps - pd.Timestamp(0)) / pd.Timedelta(seconds=1)
    submit_unknown = frame["Submit"].isna()
    for col in frame.columns.intersection(COUNT_COLUMNS):
        text = frame[col].str.replace(r"-\d+$", "", regex=True)  # ReqNodes ranges "2-4"
        unknown = text.str.lower().isin(UNKNOWN)
        numbers = pd.to_numeric(text.where(~unknown), errors="coerce")
        wrong = numbers.isna() & ~unknown
        problems += [(n, f"{col} {t!r} is not a count") for n, t in _at(frame, wrong, col)]
        # 1.5 or inf nodes cannot be allocated: truncating them would change the job silently
        whole = np.isfinite(numbers) & (numbers == np.floor(numbers)) & (numbers < 2**53)
        partial = numbers.notna() & ~whole
        problems += [(n, f"{col} {t!r} is not a whole count") for n, t in _at(frame, partial, col)]
        frame[col] = numbers
    if "Timelimit" in frame:
        seconds, wrong = map_unique(frame["Timelimit"], _limit_seconds)
        problems += [
            (n, f"Timelimit {t!r} is not a time limit") for n, t in _at(frame, wrong, "Timelimit")
        ]
        frame["Timelimit"] = seconds
    bad = frame["lineno"].isin([n for n, _ in problems])
    if problems:
        problems.sort()
        if not skip_bad:
            raise TraceFormatError(path, problems[0][0], problems[0][1])
        first = dict(reversed(problems))  # one skip per line: its first problem names it
        for n, why in sorted(first.items()):
            _bad(path, n, lines[n - 1], why, True, report)
    no_submit = submit_unknown & ~bad
    if no_submit.any():
        report.note(
            "skipped_no_submit_time", int(no_submit.sum()), lines_of(frame["lineno"], no_submit)
        )
        for n in frame.loc[no_submit, "lineno"]:
            _bad(path, int(n), lines[n - 1], "no submit time", True, report)
    return bad | no_submit


def _limit_seconds(text: str) -> float:
    return duration_seconds(text, bare_unit=60.0)


def _at(frame: pd.DataFrame, mask: pd.Series, col: str) -> list[tuple[int, str]]:
    return [(int(n), str(t)) for n, t in frame.loc[mask, ["lineno", col]].itertuples(index=False)]


def _column(frame: pd.DataFrame, col: str) -> pd.Series:
    """A converted numeric column, all-NaN when the export did not include it."""
    if col in frame:
        return frame[col].astype(float)
    return pd.Series(np.nan, index=frame.index)
