"""Shared parsing of PBS-style accounting logs (PBS Pro and Cobalt write the same layout).

Each line is ``MM/DD/YYYY HH:MM:SS;<record type>;<job id>;key=value key=value ...``. A job has a
``Q`` (queued), ``S`` (started) and ``E`` (ended) record; later records repeat and complete the
attributes of earlier ones, so per attribute the value of the latest record wins.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from parsl_malleable.errors import TraceFormatError
from parsl_malleable.traces._frame import clamp_to_machine, jobs_frame, lines_of
from parsl_malleable.traces._io import MAX_EXAMPLES, example, read_lines
from parsl_malleable.traces._values import duration_seconds, leading_int, map_unique
from parsl_malleable.traces.schema import JobTrace, MachineInfo, ReadReport

RECORD_ORDER = {"Q": 0, "S": 1, "E": 2}
TIME_KEYS = ("ctime", "qtime", "etime", "start", "end")
WANTED = (
    *TIME_KEYS,
    "queue",
    "user",
    "exec_host",
    "resource_list.nodect",
    "resource_list.select",
    "resource_list.nodes",
    "resource_list.ncpus",
    "resource_list.walltime",
)
# sizes that must be whole numbers: 1.5 or inf nodes would be truncated into a wrong job
COUNT_KEYS = ("resource_list.nodect", "resource_list.ncpus")
# exec_host -> (nodes, cores) with -1 where the string does not tell
HostCounter = Callable[[str], tuple[int, int]]


def read_accounting(
    path: str | Path,
    *,
    nodes: int | None,
    skip_bad: bool,
    count_hosts: HostCounter,
    kind: str,
) -> JobTrace:
    """Read one accounting log into a :class:`JobTrace` (for ``read_cobalt`` and PBS)."""
    if nodes is not None and nodes <= 0:
        raise ValueError(f"nodes must be positive, got {nodes}")
    path = Path(path)
    report = ReadReport()
    records = _records(path, read_lines(path), skip_bad, report)
    jobs = _join(records, report)
    for key in COUNT_KEYS:
        bad = _not_whole(jobs[key])
        _reject(path, jobs, bad, key, "a whole count", skip_bad, report)
        jobs.loc[bad, key] = pd.NA

    nodes_req = _requested_nodes(jobs)
    missing = nodes_req <= 0
    if missing.any():
        report.skipped += int(missing.sum())
        report.note("skipped_no_node_count", int(missing.sum()), lines_of(jobs["lineno"], missing))
        for lineno, job in (
            jobs.loc[missing, ["lineno", "job"]].head(MAX_EXAMPLES).itertuples(index=False)
        ):
            if len(report.skipped_examples) < MAX_EXAMPLES:
                report.skipped_examples.append(example(path, lineno, job, "no node count"))
        jobs, nodes_req = jobs[~missing].reset_index(drop=True), nodes_req[~missing]

    host_counts = [count_hosts(h) if isinstance(h, str) else (-1, -1) for h in jobs["exec_host"]]
    counted = np.array(host_counts, dtype=np.int64).reshape(-1, 2)
    alloc = counted[:, 0]
    guessed = (alloc <= 0) & jobs["start"].notna().to_numpy()
    report.note("nodes_from_request", int(guessed.sum()), lines_of(jobs["lineno"], guessed))
    alloc = np.where(alloc > 0, alloc, nodes_req)
    cores_req = pd.to_numeric(jobs["resource_list.ncpus"], errors="coerce").fillna(-1)
    cores_req = cores_req.to_numpy(dtype=np.int64)
    cores = np.where(counted[:, 1] > 0, counted[:, 1], -1)

    if nodes is None:
        machine_nodes = int(max(nodes_req.max(initial=1), alloc.max(initial=1)))
        report.note("machine_size_inferred")
    else:
        machine_nodes = nodes
    lines_at = jobs["lineno"].to_numpy()
    nodes_req = clamp_to_machine(nodes_req, machine_nodes, report, "nodes_req_clamped", lines_at)
    alloc = clamp_to_machine(alloc, machine_nodes, report, "nodes_clamped", lines_at)

    walltime, bad = map_unique(jobs["resource_list.walltime"].fillna(""), duration_seconds)
    _reject(path, jobs, bad, "resource_list.walltime", "a duration", skip_bad, report)
    unknown = np.isnan(walltime)
    report.note("walltime_unknown", int(unknown.sum()), lines_of(lines_at, unknown))

    epoch = float(np.floor(np.nanmin(jobs["submit"]))) if len(jobs) else 0.0
    frame = jobs_frame(
        {
            "job_id": np.where(jobs["job_id"] >= 0, jobs["job_id"], jobs["lineno"]),
            "submit": jobs["submit"] - epoch,
            "start": jobs["start"] - epoch,
            "end": jobs["end"] - epoch,
            "walltime": walltime,
            "nodes_req": nodes_req,
            "nodes": alloc,
            "cores_req": cores_req,
            "cores": cores,
            "queue": jobs["queue"].fillna(""),
            "user": jobs["user"].fillna(""),
        },
        report,
        lines_at,
    )
    machine = MachineInfo(name=f"{kind}:{path.name}", nodes=machine_nodes, start_epoch=epoch)
    return JobTrace(jobs=frame, machine=machine, report=report)


def _records(path: Path, lines: list[str], skip_bad: bool, report: ReadReport) -> pd.DataFrame:
    """One row per Q/S/E record: line number, record time, type, job id and wanted attributes."""
    rows: list[dict[str, str | int]] = []
    bad: list[tuple[int, str, str]] = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        report.lines_read += 1
        parts = line.split(";", 3)
        if len(parts) < 3 or not parts[1].strip() or not parts[2].strip():
            bad.append((lineno, line, "expected 'date time;type;job id;key=value ...'"))
            continue
        row: dict[str, str | int] = {
            "lineno": lineno,
            "stamp": parts[0].strip(),
            "type": parts[1].strip(),
            "job": parts[2].strip(),
        }
        row.update(_attributes(parts[3] if len(parts) == 4 else ""))
        rows.append(row)
    frame = pd.DataFrame(rows, columns=["lineno", "stamp", "type", "job", *WANTED])
    text_keys = [k for k in WANTED if k not in TIME_KEYS]
    frame[text_keys] = frame[text_keys].astype("string")
    text_stamps = frame["stamp"]
    stamps = pd.to_datetime(text_stamps, format="%m/%d/%Y %H:%M:%S", errors="coerce")
    for lineno, text in frame.loc[stamps.isna(), ["lineno", "stamp"]].itertuples(index=False):
        bad.append((lineno, lines[lineno - 1], f"bad record time {text!r} (MM/DD/YYYY HH:MM:SS)"))
    frame["stamp"] = (stamps - pd.Timestamp(0)) / pd.Timedelta(seconds=1)
    for key in TIME_KEYS:
        values = pd.to_numeric(frame[key], errors="coerce")
        wrong = (values.isna() & frame[key].notna()) | np.isinf(values)
        for lineno, text in frame.loc[wrong, ["lineno", key]].itertuples(index=False):
            bad.append((lineno, lines[lineno - 1], f"{key}={text} is not a Unix time"))
        frame[key] = values
    if bad:
        bad.sort()
        if not skip_bad:
            raise TraceFormatError(path, bad[0][0], bad[0][2])
        report.skipped += len(bad)
        report.skipped_examples += [example(path, n, t, w) for n, t, w in bad[:MAX_EXAMPLES]]
        frame = frame[~frame["lineno"].isin([n for n, _, _ in bad])]
    known = frame["type"].isin(list(RECORD_ORDER))
    # D(eleted), A(bort), R(erun), ...
    report.note("records_ignored", int((~known).sum()), lines_of(frame["lineno"], ~known))
    return frame[known]


def _attributes(message: str) -> dict[str, str]:
    """``key=value`` pairs (keys lower-cased); words without ``=`` continue the previous value."""
    found: dict[str, str] = {}
    key = None
    for word in message.split():
        name, sep, value = word.partition("=")
        if sep and name:
            key = name.lower()
            found[key] = value
        elif key is not None:
            found[key] += " " + word
    return {k: v for k, v in found.items() if k in WANTED}


def _join(records: pd.DataFrame, report: ReadReport) -> pd.DataFrame:
    """One row per job: the latest value of every attribute over its Q, S and E records."""
    records = records.assign(order=records["type"].map(RECORD_ORDER))
    records = records.sort_values(["order", "lineno"], kind="stable")
    grouped = records.groupby("job", sort=False)
    jobs = grouped[list(WANTED)].last()
    first = grouped["lineno"].min()
    stamp_of = {t: records[records["type"] == t].groupby("job")["stamp"] for t in RECORD_ORDER}
    jobs["lineno"] = first
    jobs = jobs.reindex(first.sort_values().index)  # file order of each job's first record

    submit = jobs["ctime"].fillna(jobs["qtime"])
    from_stamp = submit.isna()
    q_stamp = stamp_of["Q"].min().reindex(jobs.index)
    any_stamp = records.groupby("job")["stamp"].min().reindex(jobs.index)
    submit = submit.fillna(q_stamp).fillna(any_stamp)
    report.note(
        "submit_from_record_time", int(from_stamp.sum()), lines_of(jobs["lineno"], from_stamp)
    )

    s_stamp = stamp_of["S"].max().reindex(jobs.index)
    e_stamp = stamp_of["E"].max().reindex(jobs.index)
    start = jobs["start"]
    from_s = start.isna() & s_stamp.notna()
    report.note("start_from_record_time", int(from_s.sum()), lines_of(jobs["lineno"], from_s))
    start = start.fillna(s_stamp)
    end = jobs["end"]
    from_e = end.isna() & e_stamp.notna()
    report.note("end_from_record_time", int(from_e.sum()), lines_of(jobs["lineno"], from_e))
    end = end.fillna(e_stamp)
    no_end = start.notna() & end.isna()
    report.note("never_started", int(start.isna().sum()), lines_of(jobs["lineno"], start.isna()))
    report.note("no_end_record", int(no_end.sum()), lines_of(jobs["lineno"], no_end))

    out = jobs.assign(submit=submit, start=start, end=end).reset_index()
    out["job_id"] = leading_int(out["job"])
    return out


def _requested_nodes(jobs: pd.DataFrame) -> np.ndarray:
    """``Resource_List.nodect``, else the chunk count of ``select``, else ``nodes`` (-1 if none)."""
    nodect = pd.to_numeric(jobs["resource_list.nodect"], errors="coerce").astype("float64")
    chunks = [
        _select_chunks(v) if isinstance(v, str) else np.nan for v in jobs["resource_list.select"]
    ]
    select = pd.Series(chunks, index=jobs.index, dtype="float64")
    plain = jobs["resource_list.nodes"].str.extract(r"^(\d+)", expand=False)
    plain = pd.to_numeric(plain, errors="coerce").astype("float64")
    filled = nodect.fillna(select).fillna(plain)
    return filled.fillna(-1).to_numpy(dtype=np.int64)


def _select_chunks(select: str) -> float:
    """Chunks in a PBS select statement: ``2:ncpus=36+1:ncpus=4`` -> 3."""
    total = 0
    for chunk in select.split("+"):
        head = chunk.split(":", 1)[0]
        total += int(head) if head.isdigit() else 1
    return float(total)


def _not_whole(values: pd.Series) -> np.ndarray:
    """Which present values are not a whole, finite, non-negative number."""
    numbers = pd.to_numeric(values, errors="coerce").astype("float64")
    whole = np.isfinite(numbers) & (numbers == np.floor(numbers)) & (numbers >= 0)
    return (values.notna() & ~whole).to_numpy(dtype=bool)


def _reject(
    path: Path,
    jobs: pd.DataFrame,
    bad: np.ndarray,
    key: str,
    what: str,
    skip_bad: bool,
    report: ReadReport,
) -> None:
    """Bad attribute values (``what`` they should be): an error naming the job's first line,
    or, when skipping, counted under ``bad_<key>`` and the value treated as unknown."""
    if not bad.any():
        return
    rows = jobs.loc[bad]
    if not skip_bad:
        lineno, value = rows[["lineno", key]].iloc[0]
        raise TraceFormatError(path, int(lineno), f"{key}={value} is not {what}")
    report.note(f"bad_{key}", int(bad.sum()), lines_of(jobs["lineno"], bad))
