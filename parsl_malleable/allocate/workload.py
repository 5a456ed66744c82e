"""Read FreeTrain/BFTrainer workload CSVs (``<name>-jobs.csv``, ``<name>-scaling.csv``; either may
be gzipped, as ``.csv.gz``)."""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

from parsl_malleable.allocate.curve import ScalingCurve
from parsl_malleable.allocate.errors import AllocationInputError
from parsl_malleable.allocate.spec import TrainingJob
from parsl_malleable.errors import MalleableError, TraceFormatError
from parsl_malleable.inputs import whole_count
from parsl_malleable.traces._io import open_text

JOB_FIELDS = ("job", "Tcup", "Tcdw", "Jmin", "Jmax")
SCALING_FIELDS = ("job", "nodes", "throughput")


def _rows(path: Path, fields: tuple[str, ...]) -> list[tuple[int, dict[str, str]]]:
    try:
        handle = open_text(path, newline="")
    except OSError as exc:
        raise TraceFormatError(path, None, f"cannot read: {exc.strerror}") from exc
    with handle:
        try:
            reader = csv.DictReader(handle)
            missing = [f for f in fields if f not in (reader.fieldnames or [])]
            if missing:
                raise TraceFormatError(path, 1, f"missing column(s) {', '.join(missing)}")
            return [(i, row) for i, row in enumerate(reader, start=2)]
        except (OSError, EOFError) as exc:  # a truncated or corrupt gzip stream
            raise TraceFormatError(path, None, f"cannot read: {exc}") from exc


def _csv_file(directory: Path, stem: str) -> Path:
    """``<stem>.csv`` in ``directory``, else ``<stem>.csv.gz`` if only that exists."""
    plain = directory / f"{stem}.csv"
    gzipped = directory / f"{stem}.csv.gz"
    return gzipped if not plain.is_file() and gzipped.is_file() else plain


def _number(text: str | None) -> float:
    """A CSV number as float (counts are checked whole by the caller, never truncated)."""
    return float(text if text is not None else "missing")


def load_scaling(path: str | Path) -> dict[str, ScalingCurve]:
    """Curves per job from a ``job,nodes,throughput[,objective]`` CSV."""
    path = Path(path)
    points: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for line, row in _rows(path, SCALING_FIELDS):
        try:
            nodes = whole_count(_number(row["nodes"]), "nodes", minimum=0)
            points[row["job"]].append((nodes, float(row["throughput"])))
        except (ValueError, MalleableError) as exc:
            raise TraceFormatError(path, line, f"bad number: {exc}") from exc
    curves = {}
    for name, pts in points.items():
        try:
            curves[name] = ScalingCurve.from_points(pts)
        except AllocationInputError as exc:
            raise TraceFormatError(path, None, f"job {name}: {exc}") from exc
    return curves


def load_workload(directory: str | Path, name: str, limit: int | None = None) -> list[TrainingJob]:
    """Jobs of workload ``name`` (e.g. ``imagenet-imgps-1001J``) with their curves, in file order.

    ``limit`` keeps the first jobs only. Every job starts with no nodes.
    """
    directory = Path(directory)
    curves = load_scaling(_csv_file(directory, f"{name}-scaling"))
    jobs_path = _csv_file(directory, f"{name}-jobs")
    jobs: list[TrainingJob] = []
    for line, row in _rows(jobs_path, JOB_FIELDS):
        if limit is not None and len(jobs) >= limit:
            break
        if row["job"] not in curves:
            raise TraceFormatError(jobs_path, line, f"job {row['job']} has no scaling curve")
        where = f"job {row['job']!r}"
        try:
            # whole counts, never truncated: "1.5" is an error, not 1
            low, high = (
                whole_count(_number(row[col]), f"{where}: {key}", error=AllocationInputError)
                for col, key in (("Jmin", "min_nodes"), ("Jmax", "max_nodes"))
            )
            jobs.append(
                TrainingJob(
                    name=row["job"],
                    min_nodes=low,
                    max_nodes=high,
                    curve=curves[row["job"]],
                    scale_up_cost=float(row["Tcup"]),
                    scale_down_cost=float(row["Tcdw"]),
                )
            )
        except ValueError as exc:
            raise TraceFormatError(jobs_path, line, f"bad number: {exc}") from exc
        except MalleableError as exc:
            raise TraceFormatError(jobs_path, line, str(exc)) from exc
    return jobs
