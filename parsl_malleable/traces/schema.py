"""The one pandas schema that every trace reader produces.

Job traces
----------
A :class:`JobTrace` holds a ``jobs`` DataFrame with exactly the columns of :data:`JOB_COLUMNS`,
sorted by ``submit`` (ties keep file order), with a fresh ``RangeIndex``:

============  =========  ===================================================================
column        dtype      meaning
============  =========  ===================================================================
job_id        int64      the scheduler's job number (or the line number when there is none)
submit        float64    submit time, seconds since ``MachineInfo.start_epoch``
start         float64    recorded start time (same clock); NaN when unknown
end           float64    recorded end time; NaN when unknown
walltime      float64    requested walltime in seconds; NaN when unknown
nodes_req     int64      requested nodes (converted from cores when the log counts cores)
nodes         int64      allocated nodes; equals ``nodes_req`` when the log has no allocation
cores_req     int64      requested cores; -1 when unknown
cores         int64      allocated cores; -1 when unknown
queue         string     queue or partition name ("" when unknown)
user          string     user name or id ("" when unknown)
============  =========  ===================================================================

Derived values (``runtime = end - start``, ``wait = start - submit``) are not stored: compute
them where needed. Readers never invent a value silently: every repair (a missing field filled
from another, a request clamped to the machine size, unsorted submits re-sorted) is counted in
:class:`ReadReport`.

Idle intervals
--------------
:data:`IDLE_COLUMNS`: one row per idle interval of one node: ``node`` (string), ``idle_start``
and ``idle_end`` (float64 seconds, same clock as the jobs of the trace they came from or Unix
seconds for stand-alone files), sorted by ``(idle_start, node)``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import islice

import numpy as np
import pandas as pd

JOB_COLUMNS: dict[str, str] = {
    "job_id": "int64",
    "submit": "float64",
    "start": "float64",
    "end": "float64",
    "walltime": "float64",
    "nodes_req": "int64",
    "nodes": "int64",
    "cores_req": "int64",
    "cores": "int64",
    "queue": "string",
    "user": "string",
}

MAX_WHERE = 5  # rows named per repair reason in ReadReport.examples

IDLE_COLUMNS: dict[str, str] = {
    "node": "string",
    "idle_start": "float64",
    "idle_end": "float64",
}


@dataclass(frozen=True)
class MachineInfo:
    """What a trace says about the machine it was recorded on."""

    name: str
    nodes: int
    cores_per_node: int = 1
    start_epoch: float = 0.0  # Unix time that trace time 0 corresponds to


@dataclass
class ReadReport:
    """What a reader skipped, repaired or guessed; printed by every command, never dropped.

    ``repairs`` counts rows by reason (``nodes_clamped``, ``unsorted_submit``, ...; the table in
    ``docs/traces.md`` lists them all) and ``examples`` keeps, per reason, where the first
    :data:`MAX_WHERE` of them are (``line 12 (job 345)``). ``format`` and ``format_reason`` say
    which reader ran and why it was chosen when the format was guessed.
    """

    lines_read: int = 0
    skipped: int = 0
    skipped_examples: list[str] = field(default_factory=list)
    repairs: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)
    format: str = ""
    format_reason: str = ""

    def note(self, kind: str, count: int = 1, where: Iterable[object] = ()) -> None:
        """Count ``count`` rows repaired, dropped or guessed for one reason (``kind``).

        ``where`` names the rows (line numbers as ``"line 12"``, or job ids); only the first
        :data:`MAX_WHERE` are kept, so callers may pass the whole list.
        """
        if not count:
            return
        self.repairs[kind] += int(count)
        kept = self.examples.setdefault(kind, [])
        for item in islice(where, max(0, MAX_WHERE - len(kept))):
            kept.append(str(item))

    def describe(self, kind: str) -> str:
        """``"3 (line 4, line 9, ...)"``: the count of one reason and where its first rows are."""
        count = self.repairs.get(kind, 0)
        where = self.examples.get(kind, [])
        more = ", ..." if count > len(where) and where else ""
        return f"{count:,}" + (f" ({', '.join(where)}{more})" if where else "")


@dataclass
class JobTrace:
    """A job trace in the common schema plus the machine it ran on."""

    jobs: pd.DataFrame
    machine: MachineInfo
    report: ReadReport = field(default_factory=ReadReport)

    def __post_init__(self) -> None:
        validate_jobs(self.jobs)


def empty_jobs() -> pd.DataFrame:
    """A jobs DataFrame with the schema's columns and no rows."""
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in JOB_COLUMNS.items()})


def validate_jobs(jobs: pd.DataFrame) -> None:
    """Raise ``ValueError`` naming the first column that breaks the schema."""
    missing = [c for c in JOB_COLUMNS if c not in jobs.columns]
    if missing:
        raise ValueError(f"jobs DataFrame lacks columns {missing}")
    for col, dtype in JOB_COLUMNS.items():
        if str(jobs[col].dtype) != dtype and not (
            dtype == "string" and pd.api.types.is_string_dtype(jobs[col])
        ):
            raise ValueError(f"jobs column {col!r} has dtype {jobs[col].dtype}, expected {dtype}")
    if len(jobs) and bool(np.any(np.diff(jobs["submit"].to_numpy()) < 0)):
        raise ValueError("jobs are not sorted by submit time")
