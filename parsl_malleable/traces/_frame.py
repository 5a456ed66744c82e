"""Assembling a schema-conformant jobs table from column arrays."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd

from parsl_malleable.traces.schema import JOB_COLUMNS, MAX_WHERE, ReadReport


def lines_of(linenos: np.ndarray | pd.Series, mask: np.ndarray | pd.Series) -> Iterator[str]:
    """``"line N"`` for the first rows selected by ``mask`` (for :meth:`ReadReport.note`)."""
    rows = np.flatnonzero(np.asarray(mask))[:MAX_WHERE]
    numbers = np.asarray(linenos)
    return (f"line {int(numbers[i])}" for i in rows)


def clamp_to_machine(
    values: np.ndarray, limit: int, report: ReadReport, kind: str, linenos: np.ndarray
) -> np.ndarray:
    """Cap sizes at the machine size, counting each capped job (with its line) under ``kind``."""
    over = values > limit
    report.note(kind, int(over.sum()), lines_of(linenos, over))
    return np.where(over, limit, values)


def jobs_frame(
    columns: dict[str, np.ndarray | pd.Series],
    report: ReadReport,
    linenos: np.ndarray | pd.Series | None = None,
) -> pd.DataFrame:
    """Build the jobs DataFrame in schema order and dtypes, stably sorted by submit time.

    ``linenos`` gives each row's file line (rows are named by job id alone without it).
    Out-of-order submits are counted under ``unsorted_submit`` (one per descent in file order,
    naming the line that goes back in time); jobs that end before they start under
    ``end_before_start`` (their end becomes unknown, so nothing downstream sees a negative
    runtime).
    """
    # positional: inputs may carry the index of a filtered frame, which must not realign rows
    frame = pd.DataFrame(
        {c: pd.Series(_positional(columns[c])).astype(t) for c, t in JOB_COLUMNS.items()}
    )
    linenos = None if linenos is None else np.asarray(linenos)
    backwards = (frame["end"] < frame["start"]).to_numpy()
    if backwards.any():
        report.note("end_before_start", int(backwards.sum()), _named(frame, linenos, backwards))
        frame.loc[backwards, "end"] = np.nan
    submit = frame["submit"].to_numpy()
    descent = np.r_[False, np.diff(submit) < 0] if len(submit) else np.zeros(0, dtype=bool)
    if descent.any():
        report.note("unsorted_submit", int(descent.sum()), _named(frame, linenos, descent))
        order = np.argsort(submit, kind="stable")
        frame = frame.iloc[order].reset_index(drop=True)
    return frame


def _named(frame: pd.DataFrame, linenos: np.ndarray | None, mask: np.ndarray) -> Iterator[str]:
    ids = frame["job_id"].to_numpy()
    rows = np.flatnonzero(mask)[:MAX_WHERE]
    if linenos is None:
        return (f"job {int(ids[i])}" for i in rows)
    return (f"line {int(linenos[i])} (job {int(ids[i])})" for i in rows)


def _positional(values: np.ndarray | pd.Series) -> np.ndarray | pd.Series:
    return values.reset_index(drop=True) if isinstance(values, pd.Series) else values
