"""Vectorised conversions of the text values found in scheduler logs."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

UNKNOWN = {"", "unknown", "none", "n/a", "unlimited", "partition_limit", "infinite"}
_NUMBER = re.compile(r"^\d+(?:\.\d+)?$")


def duration_seconds(text: str, *, bare_unit: float = 1.0) -> float:
    """Seconds in ``D-HH:MM:SS``, ``D-HH[:MM]``, ``[D:]HH:MM:SS``, ``MM:SS`` or a bare number.

    A bare number is multiplied by ``bare_unit`` (Slurm counts bare time limits in minutes).
    Unknown and unlimited values (``UNLIMITED``, ``Partition_Limit``, ``Unknown``) give NaN;
    anything else that does not parse raises ``ValueError``.
    """
    text = text.strip()
    if text.lower() in UNKNOWN:
        return float("nan")
    days, dash, clock = text.rpartition("-")
    parts = clock.split(":")
    if not all(_NUMBER.match(p) for p in parts) or (dash and not days.isdigit()) or len(parts) > 4:
        raise ValueError(f"not a duration: {text!r}")
    values = [float(p) for p in parts]
    if dash:  # D-HH, D-HH:MM, D-HH:MM:SS
        if len(values) > 3:
            raise ValueError(f"not a duration: {text!r}")
        values = [float(days)] + values + [0.0] * (3 - len(values))
    elif len(values) == 1:
        return values[0] * bare_unit
    elif len(values) == 2:  # MM:SS
        values = [0.0, 0.0, *values]
    elif len(values) == 3:
        values = [0.0, *values]
    d, h, m, sec = values
    return ((d * 24 + h) * 60 + m) * 60 + sec


def map_unique(values: pd.Series, convert) -> tuple[np.ndarray, np.ndarray]:
    """Apply ``convert`` once per distinct value (logs repeat the same few walltimes).

    Returns the converted float array and a mask of the entries that raised ``ValueError``.
    """
    uniques, inverse = np.unique(values.astype(str).to_numpy(), return_inverse=True)
    out = np.empty(len(uniques))
    bad = np.zeros(len(uniques), dtype=bool)
    for i, text in enumerate(uniques):
        try:
            out[i] = convert(text)
        except ValueError:
            out[i], bad[i] = np.nan, True
    return out[inverse], bad[inverse]


def leading_int(ids: pd.Series) -> np.ndarray:
    """The leading number of job ids such as ``12345.theta`` or ``123_4`` (-1 when none)."""
    numbers = ids.astype(str).str.extract(r"^\s*(\d+)", expand=False)
    return pd.to_numeric(numbers, errors="coerce").fillna(-1).to_numpy(dtype=np.int64)
