"""Build small job traces by hand (examples, tests, what-if studies)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from parsl_malleable.traces.schema import JOB_COLUMNS, JobTrace, MachineInfo


def handmade_trace(
    rows: Sequence[tuple[float, float, float, int]], nodes: int, name: str = "handmade"
) -> JobTrace:
    """A trace from ``(submit, runtime, walltime, nodes)`` rows (sorted by submit here).

    Recorded start is the submit time (the recorded wait is zero), so ``end = submit +
    runtime``; use NaN for an unknown walltime or runtime.
    """
    arr = np.array(rows, dtype=np.float64).reshape(-1, 4)
    arr = arr[np.argsort(arr[:, 0], kind="stable")]
    submit, runtime, walltime, size = arr.T
    size = size.astype(np.int64)
    jobs = pd.DataFrame(
        {
            "job_id": np.arange(1, len(arr) + 1, dtype=np.int64),
            "submit": submit,
            "start": submit,
            "end": submit + runtime,
            "walltime": walltime,
            "nodes_req": size,
            "nodes": size,
            "cores_req": np.full(len(arr), -1, dtype=np.int64),
            "cores": np.full(len(arr), -1, dtype=np.int64),
            "queue": pd.array([""] * len(arr), dtype="string"),
            "user": pd.array([""] * len(arr), dtype="string"),
        }
    ).astype(JOB_COLUMNS)
    return JobTrace(jobs, MachineInfo(name=name, nodes=int(nodes)))
