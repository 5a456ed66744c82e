"""Reader for per-node idle-interval files (``node,idle_start,idle_end`` CSV, optionally gzipped),
such as the Summit trace of the FreeTrain/BFTrainer evaluation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from parsl_malleable.errors import TraceFormatError
from parsl_malleable.traces._io import check_text_file, is_gzip
from parsl_malleable.traces.schema import IDLE_COLUMNS


def read_idle_intervals(path: str | Path) -> pd.DataFrame:
    """Read idle intervals into a DataFrame with :data:`IDLE_COLUMNS`, sorted by start then node.

    The header must name ``node``, ``idle_start`` and ``idle_end`` (other columns are dropped).
    Times stay as in the file (Unix seconds for stand-alone files). A non-numeric time, a missing
    value, a time that is not finite, or an interval that ends before it starts raises
    :class:`TraceFormatError` with the file line; so does a NUL byte (a binary or sparse file).
    """
    path = Path(path)
    check_text_file(path)  # a binary or sparse file would be loaded whole by the parser
    try:
        frame = _read(path, {"node": "string", "idle_start": "float64", "idle_end": "float64"})
    except ValueError:  # a bad number somewhere: read as text to name its line
        frame = _read(path, {c: "string" for c in IDLE_COLUMNS})
    missing = [c for c in IDLE_COLUMNS if c not in frame.columns]
    if missing:
        raise TraceFormatError(path, 1, f"header lacks columns {missing}")
    for col in ("idle_start", "idle_end"):
        if frame[col].dtype == "float64" and not frame[col].isna().any():
            continue
        text = frame[col]
        numbers = pd.to_numeric(text, errors="coerce")
        wrong = numbers.isna().to_numpy()
        if wrong.any():
            row = int(np.flatnonzero(wrong)[0])
            value = text.iloc[row]
            why = f"{col} is missing" if pd.isna(value) else f"{col} {value!r} is not a number"
            raise TraceFormatError(path, row + 2, why)
        frame[col] = numbers.astype("float64")
    for col in ("idle_start", "idle_end"):
        infinite = ~np.isfinite(frame[col].to_numpy())
        if infinite.any():
            row = int(np.flatnonzero(infinite)[0])
            why = f"{col} {frame[col].iloc[row]} is not a finite time"
            raise TraceFormatError(path, row + 2, why)
    no_node = frame["node"].isna()
    if no_node.any():
        raise TraceFormatError(path, int(np.flatnonzero(no_node.to_numpy())[0]) + 2, "no node")
    backwards = (frame["idle_end"] < frame["idle_start"]).to_numpy()
    if backwards.any():
        row = int(np.flatnonzero(backwards)[0])
        raise TraceFormatError(path, row + 2, "idle_end is before idle_start")

    frame = frame[list(IDLE_COLUMNS)]
    starts = frame["idle_start"].to_numpy()
    if (len(frame) and np.any(np.diff(starts) < 0)) or _ties_unsorted(frame):
        frame = frame.sort_values(["idle_start", "node"], kind="stable")
    return frame.reset_index(drop=True)


def _read(path: Path, dtypes: dict[str, str]) -> pd.DataFrame:
    try:
        compression = "gzip" if is_gzip(path) else None  # by content: names may lie
        return pd.read_csv(
            path,
            usecols=lambda c: c in IDLE_COLUMNS,
            dtype=dtypes,
            engine="c",
            compression=compression,
        )
    except pd.errors.ParserError as exc:
        raise TraceFormatError(path, None, f"not an idle-interval CSV: {exc}") from None
    except (UnicodeDecodeError, EOFError, OSError) as exc:
        raise TraceFormatError(path, None, f"cannot read: {exc}") from None


def _ties_unsorted(frame: pd.DataFrame) -> bool:
    """Whether rows with equal start times are out of node order."""
    starts = frame["idle_start"].to_numpy()
    same = np.flatnonzero(np.diff(starts) == 0)
    if not len(same):
        return False
    nodes = frame["node"]
    left = nodes.iloc[same].reset_index(drop=True)
    right = nodes.iloc[same + 1].reset_index(drop=True)
    return bool((left > right).any())
