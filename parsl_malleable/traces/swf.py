"""Reader for the Standard Workload Format (SWF) of the Parallel Workloads Archive.

An SWF file has ``;``-prefixed header lines (``MaxNodes``, ``MaxProcs``, ``UnixStartTime``, ...)
and one line per job with 18 whitespace-separated numbers (``-1`` = unknown). Extended SWF files
append further fields after the 18th; they are ignored. Parsing is vectorised: lines are split
once and all numbers converted by one numpy call, so a 52k-job trace reads in well under a second.
"""

from __future__ import annotations

import csv
import io
import math
from itertools import chain
from pathlib import Path

import numpy as np
import pandas as pd

from parsl_malleable.errors import TraceFormatError
from parsl_malleable.traces._frame import clamp_to_machine, jobs_frame, lines_of
from parsl_malleable.traces._io import MAX_EXAMPLES, example, read_lines
from parsl_malleable.traces.schema import JobTrace, MachineInfo, ReadReport

SWF_FIELDS = 18
# larger magnitudes lose integer precision as floats (and overflow int64 ids): not a real value
MAX_MAGNITUDE = float(2**53)
# 0-based columns of the SWF fields this reader uses
JOB, SUBMIT, WAIT, RUN, PROCS, REQ_PROCS, REQ_TIME, USER, QUEUE = 0, 1, 2, 3, 4, 7, 8, 11, 14


def read_swf(
    path: str | Path, *, cores_per_node: int | None = None, skip_bad: bool = False
) -> JobTrace:
    """Read an SWF (or extended SWF, optionally gzipped) job trace.

    Machine size comes from a ``<trace>.machines`` file beside the trace when there is one
    (columns: id, name, nodes, cpus per node, ...), else from the ``MaxNodes``/``MaxProcs``
    header, else from ``cores_per_node`` and the largest job. When ``MaxProcs == MaxNodes`` the
    sizes in the file are nodes; otherwise they are processors and are converted with
    ``ceil(procs / cores_per_node)``. ``cores_per_node`` is the fallback when the file does not
    determine it (and gives the core counts of a node-unit trace).

    Repairs and skips are counted in ``JobTrace.report`` (see ``docs/traces.md``). A malformed
    line raises :class:`TraceFormatError` naming file and line, unless ``skip_bad`` is set.
    """
    path = Path(path)
    report = ReadReport()
    header, records, linenos = _split_header(read_lines(path))
    report.lines_read = len(records)

    values, keep = _parse_records(path, records, linenos, skip_bad, report)
    linenos_arr = np.asarray(linenos, dtype=np.int64)[keep]
    kept_records = [records[i] for i in np.flatnonzero(keep)]

    machine, units_are_nodes, cores_known = _machine(path, header, cores_per_node, report)

    procs = values[:, PROCS]
    req = values[:, REQ_PROCS]
    no_size = (procs <= 0) & (req <= 0)
    no_submit = values[:, SUBMIT] < 0
    for why, mask in (("no processor count", no_size), ("no submit time", no_submit & ~no_size)):
        _skip(path, report, mask, kept_records, linenos_arr, why)
    values = values[~(no_size | no_submit)]
    linenos_arr = linenos_arr[~(no_size | no_submit)]
    procs, req = values[:, PROCS], values[:, REQ_PROCS]

    report.note(
        "procs_req_missing", int(np.count_nonzero(req <= 0)), lines_of(linenos_arr, req <= 0)
    )
    report.note(
        "procs_alloc_missing", int(np.count_nonzero(procs <= 0)), lines_of(linenos_arr, procs <= 0)
    )
    req = np.where(req <= 0, procs, req).astype(np.int64)
    procs = np.where(procs <= 0, req, procs).astype(np.int64)

    if machine is None:  # no header, no .machines: as large as the largest job
        per_node = cores_per_node or 1
        largest = int(max(req.max(initial=1), procs.max(initial=1)))
        nodes_total = largest if units_are_nodes else math.ceil(largest / per_node)
        machine = MachineInfo(
            name=path.name.split(".")[0], nodes=nodes_total, cores_per_node=per_node
        )
        report.note("machine_size_inferred")

    nodes_req, nodes, cores_req, cores = _sizes(
        req, procs, machine, units_are_nodes, cores_known, report, linenos_arr
    )
    start, end = _times(values, report, linenos_arr)
    walltime = values[:, REQ_TIME]
    unknown = walltime < 0
    report.note("walltime_unknown", int(np.count_nonzero(unknown)), lines_of(linenos_arr, unknown))
    walltime = np.where(walltime >= 0, walltime, np.nan)

    jobs = jobs_frame(
        {
            "job_id": values[:, JOB].astype(np.int64),
            "submit": values[:, SUBMIT],
            "start": start,
            "end": end,
            "walltime": walltime,
            "nodes_req": nodes_req,
            "nodes": nodes,
            "cores_req": cores_req,
            "cores": cores,
            "queue": _id_strings(values[:, QUEUE]),
            "user": _id_strings(values[:, USER]),
        },
        report,
        linenos_arr,
    )
    return JobTrace(jobs=jobs, machine=machine, report=report)


def _sizes(
    req: np.ndarray,
    procs: np.ndarray,
    machine: MachineInfo,
    units_are_nodes: bool,
    cores_known: bool,
    report: ReadReport,
    linenos: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``nodes_req, nodes, cores_req, cores``, capped at the machine (each cap counted)."""
    cpn = machine.cores_per_node
    if units_are_nodes:
        nodes_req = clamp_to_machine(req, machine.nodes, report, "nodes_req_clamped", linenos)
        nodes = clamp_to_machine(procs, machine.nodes, report, "nodes_clamped", linenos)
        cores_req = nodes_req * cpn if cores_known else np.full(len(req), -1)
        cores = nodes * cpn if cores_known else np.full(len(req), -1)
        return nodes_req, nodes, cores_req, cores
    limit = machine.nodes * cpn
    cores_req = clamp_to_machine(req, limit, report, "nodes_req_clamped", linenos)
    cores = clamp_to_machine(procs, limit, report, "nodes_clamped", linenos)
    nodes_req = np.minimum(-(-cores_req // cpn), machine.nodes)
    nodes = np.minimum(-(-cores // cpn), machine.nodes)
    return nodes_req, nodes, cores_req, cores


def _times(
    values: np.ndarray, report: ReadReport, linenos: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Recorded start and end of every job; NaN where the file does not tell.

    SWF writes ``-1`` for unknown; other negative run times are errors in the log and make the
    end unknown too (both counted with their lines). A job whose wait is unknown but whose run
    time is known starts at its submit time (``start_set_to_submit``): the simulator decides
    the start anyway, and the run time is what it needs.
    """
    submit, wait, run = values[:, SUBMIT], values[:, WAIT], values[:, RUN]
    for kind, mask in (
        ("runtime_unknown", run == -1),
        ("runtime_negative", (run < 0) & (run != -1)),
        ("runtime_zero", run == 0),
    ):
        report.note(kind, int(np.count_nonzero(mask)), lines_of(linenos, mask))
    no_wait = wait < 0
    report.note("wait_unknown", int(np.count_nonzero(no_wait)), lines_of(linenos, no_wait))
    assumed = no_wait & (run >= 0)
    report.note("start_set_to_submit", int(np.count_nonzero(assumed)), lines_of(linenos, assumed))
    start = np.where(wait >= 0, submit + wait, np.where(assumed, submit, np.nan))
    end = np.where(run >= 0, start + run, np.nan)
    return start, end


def _split_header(lines: list[str]) -> tuple[dict[str, tuple[str, int]], list[str], list[int]]:
    """Header ``key: value`` pairs (with line numbers), job records and their line numbers."""
    header: dict[str, tuple[str, int]] = {}
    records: list[str] = []
    linenos: list[int] = []
    for lineno, line in enumerate(lines, 1):
        text = line.strip()
        if not text:
            continue
        if text[0] == ";":
            key, sep, value = text[1:].partition(":")
            if sep and key.strip() and key.strip() not in header:
                header[key.strip()] = (value.strip(), lineno)
            continue
        records.append(text)
        linenos.append(lineno)
    return header, records, linenos


def _parse_records(
    path: Path, records: list[str], linenos: list[int], skip_bad: bool, report: ReadReport
) -> tuple[np.ndarray, np.ndarray]:
    """The first 18 fields of every well-formed record as floats, and which records those are."""
    fast = _all_plain_records(records)
    if fast is not None:
        return fast, np.ones(len(records), dtype=bool)
    _note_unusual_widths(records, linenos, report)
    # maxsplit keeps extended-SWF tails (node lists) unsplit: they are ignored anyway
    tokens = [r.split(None, SWF_FIELDS)[:SWF_FIELDS] for r in records]
    counts = np.fromiter(map(len, tokens), dtype=np.int64, count=len(tokens))
    keep = counts == SWF_FIELDS
    good = [tokens[i] for i in np.flatnonzero(keep)]
    values = _to_floats(good)
    numeric_bad = np.zeros(len(records), dtype=bool)
    numeric_bad[np.flatnonzero(keep)] = ~_usable(values).all(axis=1)

    bad = ~keep | numeric_bad
    if bad.any():
        for i in np.flatnonzero(bad):
            why = _what_is_wrong(tokens[i])
            if not skip_bad:
                raise TraceFormatError(path, linenos[i], why)
            report.skipped += 1
            if len(report.skipped_examples) < MAX_EXAMPLES:
                report.skipped_examples.append(example(path, linenos[i], records[i], why))
        values = values[~numeric_bad[np.flatnonzero(keep)]]
        keep = ~bad
    return values, keep


def _note_unusual_widths(records: list[str], linenos: list[int], report: ReadReport) -> None:
    """Count records longer than the file's usual width (``extra_fields_ignored``).

    Extended SWF files add the same fields to every line, so only a longer line than the rest
    is suspect: two records run together (a lost newline) would otherwise lose one job silently.
    """
    widths = np.fromiter((len(r.split()) for r in records), dtype=np.int64, count=len(records))
    usual = max(SWF_FIELDS, int(np.bincount(widths).argmax())) if len(widths) else SWF_FIELDS
    longer = widths > usual
    report.note("extra_fields_ignored", int(longer.sum()), lines_of(np.asarray(linenos), longer))


def _all_plain_records(records: list[str]) -> np.ndarray | None:
    """All records at once when every one has exactly 18 numbers (the common case), else None.

    One pass of pandas' C tokenizer over the whole text; anything unusual (extended fields,
    short lines, non-numbers) falls back to the per-record checks that name the bad line.
    """
    if not records:
        return None
    try:
        frame = pd.read_csv(
            io.StringIO("\n".join(records)),
            sep=r"\s+",
            header=None,
            dtype=np.float64,
            quoting=csv.QUOTE_NONE,
            engine="c",
        )
    except (ValueError, pd.errors.ParserError):
        return None
    values = frame.to_numpy()
    if values.shape != (len(records), SWF_FIELDS) or not _usable(values).all():
        return None
    return values


def _usable(values: np.ndarray) -> np.ndarray:
    """Which numbers are finite and small enough to be a time, size or id (``inf`` is not)."""
    return np.abs(values) <= MAX_MAGNITUDE  # False for NaN and infinities too


def _to_floats(rows: list[list[str]]) -> np.ndarray:
    """Rows of 18 numeric strings as a float matrix; non-numbers become NaN."""
    if not rows:
        return np.empty((0, SWF_FIELDS))
    # pandas' C tokenizer converts about twice as fast as np.array(list_of_str, dtype=float)
    text = "\n".join(map(" ".join, rows))
    try:
        frame = pd.read_csv(
            io.StringIO(text), sep=" ", header=None, dtype=np.float64, quoting=csv.QUOTE_NONE
        )
        return frame.to_numpy()
    except ValueError:
        flat = pd.Series(list(chain.from_iterable(rows)), dtype=object)
        numbers = pd.to_numeric(flat, errors="coerce").to_numpy(dtype=np.float64)
        return numbers.reshape(len(rows), SWF_FIELDS)


def _what_is_wrong(fields: list[str]) -> str:
    if len(fields) < SWF_FIELDS:
        return f"expected {SWF_FIELDS} fields, found {len(fields)}"
    for number, text in enumerate(fields, 1):
        try:
            value = float(text)
        except ValueError:
            return f"field {number} is not a number: {text!r}"
        if math.isnan(value):
            return f"field {number} is not a number: {text!r}"
        if not abs(value) <= MAX_MAGNITUDE:
            return f"field {number} is not a finite number in range: {text!r}"
    return "unparseable line"  # pragma: no cover - both checks above cover every bad record


def _skip(
    path: Path,
    report: ReadReport,
    mask: np.ndarray,
    records: list[str],
    linenos: np.ndarray,
    why: str,
) -> None:
    count = int(np.count_nonzero(mask))
    if not count:
        return
    report.skipped += count
    report.note("skipped_" + why.replace(" ", "_"), count, lines_of(linenos, mask))
    for i in np.flatnonzero(mask)[: max(0, MAX_EXAMPLES - len(report.skipped_examples))]:
        report.skipped_examples.append(example(path, int(linenos[i]), records[i], why))


def _header_int(path: Path, header: dict[str, tuple[str, int]], key: str) -> int | None:
    if key not in header:
        return None
    text, lineno = header[key]
    try:
        value = int(float(text.split()[0]))
    except (ValueError, IndexError, OverflowError):  # OverflowError: inf
        raise TraceFormatError(path, lineno, f"header {key} is not a number: {text!r}") from None
    return value if value > 0 else None


def _machines_file(path: Path) -> Path | None:
    """``<trace>.machines`` beside the trace (for ``x.swf.gz`` also ``x.swf.machines``)."""
    names = [path.name + ".machines"]
    if path.suffix == ".gz":
        names.append(path.stem + ".machines")
    for name in names:
        if (candidate := path.with_name(name)).is_file():
            return candidate
    return None


def _read_machines(path: Path) -> tuple[list[str], int, int]:
    """Names, total nodes and total CPUs of a ``.machines`` file (id name nodes cpus ...)."""
    names, nodes, cpus = [], 0, 0
    for lineno, line in enumerate(read_lines(path), 1):
        fields = line.split()
        if not fields or fields[0].startswith(("#", ";")):
            continue
        try:
            count, per_node = int(fields[2]), int(fields[3])
        except (ValueError, IndexError):
            raise TraceFormatError(
                path, lineno, "expected 'id name nodes cpus_per_node ...'"
            ) from None
        if count <= 0 or per_node <= 0:
            raise TraceFormatError(path, lineno, "node and cpu counts must be positive")
        names.append(fields[1])
        nodes += count
        cpus += count * per_node
    if not nodes:
        raise TraceFormatError(path, None, "no machine lines")
    return names, nodes, cpus


def _machine(
    path: Path,
    header: dict[str, tuple[str, int]],
    option: int | None,
    report: ReadReport,
) -> tuple[MachineInfo | None, bool, bool]:
    """The machine, whether job sizes are in nodes, and whether core counts are known."""
    if option is not None and option <= 0:
        raise ValueError(f"cores_per_node must be positive, got {option}")
    name = (header.get("Installation") or header.get("Computer") or ("", 0))[0]
    epoch = header.get("UnixStartTime", ("0", 0))
    try:
        start_epoch = float(epoch[0].split()[0])
        if not math.isfinite(start_epoch):
            raise ValueError
    except (ValueError, IndexError):
        raise TraceFormatError(
            path, epoch[1], f"UnixStartTime is not a number: {epoch[0]!r}"
        ) from None

    machines = _machines_file(path)
    max_nodes = _header_int(path, header, "MaxNodes")
    max_procs = _header_int(path, header, "MaxProcs")
    if machines is not None:
        names, nodes, cpus = _read_machines(machines)
        name = name or "+".join(names)
        per_node = _per_node(cpus, nodes, report)
        units_are_nodes, cores_known = False, True
    elif max_nodes and max_procs:
        nodes = max_nodes
        units_are_nodes = max_procs == max_nodes
        cores_known = not units_are_nodes or option is not None
        per_node = (option or 1) if units_are_nodes else _per_node(max_procs, max_nodes, report)
    elif max_nodes or max_procs:
        per_node = option or 1
        units_are_nodes, cores_known = (
            max_procs is None,
            option is not None or max_procs is not None,
        )
        nodes = max_nodes or math.ceil((max_procs or 0) / per_node)
    else:
        return None, False, True
    if option is not None and option != per_node:
        report.note("cores_per_node_option_ignored")
    machine = MachineInfo(
        name=name or path.name.split(".")[0],
        nodes=nodes,
        cores_per_node=per_node,
        start_epoch=start_epoch,
    )
    return machine, units_are_nodes, cores_known


def _per_node(cpus: int, nodes: int, report: ReadReport) -> int:
    """Cores per node of a possibly heterogeneous machine: the mean, rounded (and counted)."""
    if cpus % nodes:
        report.note("cores_per_node_rounded")
    return max(1, round(cpus / nodes))


def _id_strings(column: np.ndarray) -> pd.Series:
    """SWF numeric ids (user, queue) as strings; ``-1`` (unknown) becomes ``""``."""
    ids = column.astype(np.int64)
    text = np.where(ids < 0, "", ids.astype(str))
    return pd.Series(text, dtype="string")
