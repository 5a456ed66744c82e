"""PBS Pro accounting logs: ctime/start/end, exec_host counting, select statements."""

from __future__ import annotations

import math

import pytest

from parsl_malleable.errors import TraceFormatError
from parsl_malleable.traces import read_pbs_accounting
from parsl_malleable.traces.pbs import count_pbs_hosts

T0 = 1712052000

LOG = f"""\
04/02/2024 10:00:00;Q;123.pbs01;queue=workq
04/02/2024 10:00:30;Q;124.pbs01;queue=long
04/02/2024 10:01:40;S;123.pbs01;user=alice group=users queue=workq ctime={T0} qtime={T0} \
etime={T0} start={T0 + 100} exec_host=n1/0*36+n2/0*36 exec_vnode=(n1:ncpus=36)+(n2:ncpus=36) \
Resource_List.ncpus=72 Resource_List.nodect=2 Resource_List.select=2:ncpus=36 \
Resource_List.walltime=01:00:00
04/02/2024 11:01:40;E;123.pbs01;user=alice group=users queue=workq ctime={T0} qtime={T0} \
etime={T0} start={T0 + 100} end={T0 + 3700} exec_host=n1/0*36+n2/0*36 \
Resource_List.ncpus=72 Resource_List.nodect=2 Resource_List.select=2:ncpus=36 \
Resource_List.walltime=01:00:00 session=4242 Exit_status=0 resources_used.walltime=01:00:00
04/02/2024 10:05:00;S;124.pbs01;user=bob queue=long ctime={T0 + 30} start={T0 + 300} \
exec_host=n3/0*4+n3/1*4+n4/0*8 Resource_List.ncpus=16 \
Resource_List.select=1:ncpus=8+1:ncpus=8 Resource_List.walltime=12:00:00
"""


def test_joins_records_and_counts_hosts(tmp_path):
    path = tmp_path / "20240402"
    path.write_text(LOG)
    trace = read_pbs_accounting(path)
    jobs = trace.jobs
    assert trace.machine.start_epoch == T0
    assert trace.machine.nodes == 2  # inferred from the largest job
    assert trace.report.repairs["machine_size_inferred"] == 1
    assert jobs["job_id"].tolist() == [123, 124]
    assert jobs["submit"].tolist() == [0.0, 30.0]
    assert jobs["start"].tolist() == [100.0, 300.0]
    assert jobs["end"][0] == 3700.0 and math.isnan(jobs["end"][1])
    assert jobs["walltime"].tolist() == [3600.0, 43200.0]
    assert jobs["nodes_req"].tolist() == [2, 2]  # job 124: two select chunks
    assert jobs["nodes"].tolist() == [2, 2]  # n3 counted once
    assert jobs["cores_req"].tolist() == [72, 16]
    assert jobs["cores"].tolist() == [72, 16]
    assert jobs["user"].tolist() == ["alice", "bob"]
    assert trace.report.repairs["no_end_record"] == 1


def test_machine_size_given_clamps(tmp_path):
    path = tmp_path / "acct"
    path.write_text(LOG)
    trace = read_pbs_accounting(path, nodes=1)
    assert trace.jobs["nodes"].tolist() == [1, 1]
    assert trace.report.repairs["nodes_clamped"] == 2
    assert "machine_size_inferred" not in trace.report.repairs


def test_malformed_time_attribute(tmp_path):
    path = tmp_path / "acct"
    path.write_text(LOG.replace(f"start={T0 + 300}", "start=later"))
    with pytest.raises(TraceFormatError, match=r"acct:5: start=later is not a Unix time"):
        read_pbs_accounting(path)
    trace = read_pbs_accounting(path, skip_bad=True)
    # the bad S line, then job 124 whose remaining Q record has no size
    assert trace.report.skipped == 2
    assert trace.report.repairs["skipped_no_node_count"] == 1
    assert trace.jobs["job_id"].tolist() == [123]


@pytest.mark.parametrize(
    ("host", "expected"),
    [("n1/0*36+n2/0*36", (2, 72)), ("n3/0+n3/1", (1, 2)), ("a/0*4+b/0*4+c/2*1", (3, 9))],
)
def test_count_pbs_hosts(host, expected):
    assert count_pbs_hosts(host) == expected
