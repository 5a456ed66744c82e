"""Assembling a schema-conformant jobs table from column arrays."""

from __future__ import annotations

import numpy as np
import pandas as pd

from parsl_malleable.traces.schema import JOB_COLUMNS, ReadReport


def clamp_to_machine(values: np.ndarray, limit: int, report: ReadReport, kind: str) -> np.ndarray:
    """Cap sizes at the machine size, counting each capped job under ``kind``."""
    over = values > limit
    report.note(kind, int(over.sum()))
    return np.where(over, limit, values)


def jobs_frame(columns: dict[str, np.ndarray | pd.Series], report: ReadReport) -> pd.DataFrame:
    """Build the jobs DataFrame in schema order and dtypes, stably sorted by submit time.

    Out-of-order submits are counted under ``unsorted_submit`` (one per descent in file order).
    """
    # positional: inputs may carry the index of a filtered frame, which must not realign rows
    frame = pd.DataFrame(
        {c: pd.Series(_positional(columns[c])).astype(t) for c, t in JOB_COLUMNS.items()}
    )
    submit = frame["submit"].to_numpy()
    descents = int(np.count_nonzero(np.diff(submit) < 0)) if len(submit) else 0
    if descents:
        report.note("unsorted_submit", descents)
        order = np.argsort(submit, kind="stable")
        frame = frame.iloc[order].reset_index(drop=True)
    return frame


def _positional(values: np.ndarray | pd.Series) -> np.ndarray | pd.Series:
    return values.reset_index(drop=True) if isinstance(values, pd.Series) else values
