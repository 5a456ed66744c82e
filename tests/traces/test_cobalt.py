"""Cobalt event logs: Q/S/E records joined per job, hand-written in the ALCF public format."""

from __future__ import annotations

import math

import pytest

from parsl_malleable.errors import TraceFormatError
from parsl_malleable.traces import read_cobalt
from parsl_malleable.traces.cobalt import count_cobalt_hosts

T0 = 1552644000  # 03/15/2019 10:00:00 UTC

LOG = f"""\
03/15/2019 10:00:00;Q;12345.theta;queue=default qtime={T0} Resource_List.nodect=128 \
Resource_List.walltime=01:00:00 user=alice project=Proj1
03/15/2019 10:01:00;Q;12346.theta;queue=debug-cache-quad qtime={T0 + 60} \
Resource_List.nodect=8 Resource_List.walltime=00:30:00 user=bob
03/15/2019 10:05:00;S;12345.theta;user=alice queue=default qtime={T0} ctime={T0} \
start={T0 + 300} exec_host=3800-3927 Resource_List.nodect=128 Resource_List.walltime=01:00:00 \
mode=script
03/15/2019 10:06:00;S;12346.theta;user=bob queue=debug-cache-quad start={T0 + 360} \
exec_host=0-3,8-10 Resource_List.nodect=8 Resource_List.walltime=00:30:00
03/15/2019 10:20:00;E;12346.theta;user=bob queue=debug-cache-quad qtime={T0 + 60} \
start={T0 + 360} end={T0 + 1200} exec_host=0-3,8-10 Resource_List.nodect=8 \
Resource_List.walltime=00:30:00 Exit_status=0
03/15/2019 11:00:00;E;12345.theta;user=alice queue=default qtime={T0} start={T0 + 300} \
end={T0 + 3600} exec_host=3800-3927 Resource_List.nodect=128 Resource_List.walltime=01:00:00 \
Exit_status=0 resources_used.walltime=00:55:00
03/15/2019 11:10:00;Q;12347.theta;queue=default qtime={T0 + 4200} Resource_List.nodect=5000 \
Resource_List.walltime=1:00:00:00 user=carol
03/15/2019 11:20:00;D;12347.theta;requestor=carol
"""


@pytest.fixture
def log(tmp_path):
    path = tmp_path / "theta.cobalt"
    path.write_text(LOG)
    return path


def test_joins_q_s_e_records(log):
    trace = read_cobalt(log, nodes=4392)
    jobs = trace.jobs
    assert trace.machine.nodes == 4392 and trace.machine.start_epoch == T0
    assert jobs["job_id"].tolist() == [12345, 12346, 12347]
    assert jobs["submit"].tolist() == [0.0, 60.0, 4200.0]
    assert jobs["start"].tolist()[:2] == [300.0, 360.0]
    assert jobs["end"].tolist()[:2] == [3600.0, 1200.0]
    assert jobs["walltime"].tolist() == [3600.0, 1800.0, 86400.0]
    assert jobs["nodes_req"].tolist() == [128, 8, 4392]
    assert jobs["nodes"].tolist() == [128, 7, 4392]  # exec_host of 12346 lists 7 nodes
    assert jobs["user"].tolist() == ["alice", "bob", "carol"]
    assert jobs["queue"].tolist() == ["default", "debug-cache-quad", "default"]
    assert math.isnan(jobs["start"][2]) and math.isnan(jobs["end"][2])
    rep = trace.report.repairs
    assert rep["never_started"] == 1 and rep["records_ignored"] == 1
    assert rep["nodes_req_clamped"] == 1 and rep["nodes_clamped"] == 1
    assert trace.report.lines_read == 8


def test_record_times_fill_missing_attributes(tmp_path):
    path = tmp_path / "c.log"
    path.write_text(
        "03/15/2019 10:00:00;Q;7;Resource_List.nodect=2 Resource_List.walltime=10:00\n"
        "03/15/2019 10:01:00;S;7;exec_host=1-2\n"
        "03/15/2019 10:02:00;E;7;exec_host=1-2\n"
    )
    trace = read_cobalt(path, nodes=10)
    jobs = trace.jobs
    assert (jobs["submit"][0], jobs["start"][0], jobs["end"][0]) == (0.0, 60.0, 120.0)
    assert jobs["walltime"][0] == 600.0
    rep = trace.report.repairs
    assert rep["submit_from_record_time"] == rep["start_from_record_time"] == 1
    assert rep["end_from_record_time"] == 1


def test_malformed_record_names_line(log):
    text = LOG.replace("03/15/2019 10:06:00;S;", "03/15/2019 10:06;S;")
    log.write_text(text)
    with pytest.raises(TraceFormatError) as err:
        read_cobalt(log, nodes=4392)
    assert err.value.line == 4 and "bad record time" in str(err.value)
    trace = read_cobalt(log, nodes=4392, skip_bad=True)
    assert trace.report.skipped == 1
    assert "theta.cobalt:4" in trace.report.skipped_examples[0]
    assert trace.report.repairs["start_from_record_time"] == 0
    assert trace.jobs["start"][1] == 360.0  # the E record still carries start=


def test_non_numeric_time_and_bad_walltime(tmp_path):
    path = tmp_path / "c.log"
    path.write_text("03/15/2019 10:00:00;Q;7;qtime=soon Resource_List.nodect=2\n")
    with pytest.raises(TraceFormatError, match=r"c\.log:1: qtime=soon is not a Unix time"):
        read_cobalt(path, nodes=4)
    path.write_text("03/15/2019 10:00:00;Q;7;Resource_List.nodect=2 Resource_List.walltime=1h\n")
    with pytest.raises(TraceFormatError, match=r"c\.log:1: resource_list.walltime=1h"):
        read_cobalt(path, nodes=4)
    assert read_cobalt(path, nodes=4, skip_bad=True).report.repairs["bad_resource_list.walltime"]


def test_too_few_fields_and_missing_node_count(tmp_path):
    path = tmp_path / "c.log"
    path.write_text("03/15/2019 10:00:00;Q\n")
    with pytest.raises(TraceFormatError, match=r"c\.log:1: expected"):
        read_cobalt(path, nodes=4)
    path.write_text("03/15/2019 10:00:00;Q;7;queue=default\n03/15/2019 10:00:00;Q;8;\n")
    trace = read_cobalt(path, nodes=4)
    assert len(trace.jobs) == 0 and trace.report.skipped == 2
    assert trace.report.repairs["skipped_no_node_count"] == 2


@pytest.mark.parametrize(
    ("host", "count"),
    [("3800-3927", 128), ("0-3,8-10", 7), ("12", 1), ("nid00010-nid00013", 4), ("MIR-0-7", -1)],
)
def test_count_cobalt_hosts(host, count):
    assert count_cobalt_hosts(host)[0] == count
