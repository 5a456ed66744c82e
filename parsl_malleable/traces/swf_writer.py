"""Writing a :class:`JobTrace` as SWF, so generated workloads can be shared with other tools."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from parsl_malleable.traces.schema import JobTrace


def write_swf(trace: JobTrace, path: str | Path) -> Path:
    """Write ``trace`` as an SWF file that :func:`read_swf` reads back to the same jobs.

    Sizes are written in processors (``MaxProcs = nodes * cores_per_node``) when every job has a
    known core count, else in nodes (``MaxProcs == MaxNodes``). Unknown values become ``-1``;
    user and queue names that are not numbers are numbered in order of first appearance (SWF
    fields are numeric). Times are written relative to ``machine.start_epoch``.
    """
    path = Path(path)
    jobs, machine = trace.jobs, trace.machine
    in_cores = len(jobs) > 0 and bool((jobs["cores"] > 0).all() and (jobs["cores_req"] > 0).all())
    procs = jobs["cores"] if in_cores else jobs["nodes"]
    req_procs = jobs["cores_req"] if in_cores else jobs["nodes_req"]
    max_procs = machine.nodes * machine.cores_per_node if in_cores else machine.nodes

    wait = (jobs["start"] - jobs["submit"]).fillna(-1)
    run = (jobs["end"] - jobs["start"]).fillna(-1)
    columns = [
        jobs["job_id"],
        jobs["submit"],
        wait,
        run,
        procs,
        -1,
        -1,
        req_procs,
        jobs["walltime"].fillna(-1),
        -1,
        1,
        _numbered(jobs["user"]),
        -1,
        -1,
        _numbered(jobs["queue"]),
        -1,
        -1,
        -1,
    ]
    table = pd.DataFrame({i: _text(c, len(jobs)) for i, c in enumerate(columns)})
    header = [
        "; Version: 2.2",
        f"; Computer: {machine.name}",
        f"; UnixStartTime: {machine.start_epoch:.0f}",
        f"; MaxNodes: {machine.nodes}",
        f"; MaxProcs: {max_procs}",
        f"; MaxJobs: {len(jobs)}",
    ]
    body = table.agg(" ".join, axis=1).tolist() if len(jobs) else []
    path.write_text("\n".join(header + body) + "\n")
    return path


def _numbered(names: pd.Series) -> np.ndarray:
    """Numeric names as they are; other names 1, 2, ... by first appearance; ``""`` -> -1."""
    text = names.fillna("").astype(str)
    numeric = text.str.fullmatch(r"\d+")
    if numeric.all() or len(text) == 0:
        return np.where(text == "", -1, text).astype(np.int64)
    codes, _ = pd.factorize(text.where(text != ""), use_na_sentinel=True)
    return np.where(codes < 0, -1, codes + 1)


def _text(column: pd.Series | np.ndarray | int, n: int) -> pd.Series:
    """Integers without a decimal point, other numbers in full precision."""
    if np.ndim(column) == 0:
        return pd.Series([str(column)] * n, dtype=object)
    values = np.asarray(column, dtype=np.float64)
    whole = values == np.round(values)
    return pd.Series(
        np.where(whole, values.astype(np.int64).astype(str), values.astype(str)), dtype=object
    )
