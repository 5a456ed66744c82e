"""Property test: random jobs written as SWF read back unchanged."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from parsl_malleable.traces import JobTrace, MachineInfo, read_swf, write_swf
from parsl_malleable.traces._frame import jobs_frame
from parsl_malleable.traces.schema import ReadReport


@st.composite
def traces(draw) -> JobTrace:
    nodes = draw(st.integers(1, 64))
    per_node = draw(st.sampled_from([1, 2, 8, 36]))
    in_cores = per_node > 1
    n = draw(st.integers(1, 30))
    rows = []
    for job_id in range(1, n + 1):
        submit = draw(st.integers(0, 10**7))
        wait = draw(st.one_of(st.none(), st.integers(0, 10**5)))
        run = draw(st.one_of(st.none(), st.integers(0, 10**5)))
        cores_req = draw(st.integers(1, nodes * per_node))
        cores = draw(st.integers(1, nodes * per_node))
        walltime = draw(st.one_of(st.none(), st.integers(0, 10**6)))
        start = math.nan if wait is None else float(submit + wait)
        rows.append(
            {
                "job_id": job_id,
                "submit": float(submit),
                "start": start,
                "end": math.nan if run is None or wait is None else start + run,
                "walltime": math.nan if walltime is None else float(walltime),
                "nodes_req": math.ceil(cores_req / per_node),
                "nodes": math.ceil(cores / per_node),
                "cores_req": cores_req if in_cores else -1,
                "cores": cores if in_cores else -1,
                "queue": str(draw(st.integers(0, 3))),
                "user": str(draw(st.integers(0, 99))),
            }
        )
    frame = pd.DataFrame(rows)
    columns = {c: frame[c].to_numpy() for c in frame.columns}
    jobs = jobs_frame(columns, ReadReport())
    machine = MachineInfo(name="prop", nodes=nodes, cores_per_node=per_node, start_epoch=100.0)
    return JobTrace(jobs=jobs, machine=machine)


@settings(max_examples=60, deadline=None)
@given(trace=traces())
def test_write_then_read_is_identity(tmp_path_factory, trace):
    path = tmp_path_factory.mktemp("rt") / "t.swf"
    write_swf(trace, path)
    back = read_swf(path)
    pd.testing.assert_frame_equal(back.jobs, trace.jobs)
    m = back.machine
    assert (m.nodes, m.cores_per_node, m.start_epoch) == (
        trace.machine.nodes,
        trace.machine.cores_per_node,
        trace.machine.start_epoch,
    )
    assert back.report.skipped == 0
    assert not np.isnan(back.jobs["submit"]).any()
