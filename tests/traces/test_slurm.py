"""sacct --parsable2 exports: job steps skipped, time formats, unknown values, bad lines."""

from __future__ import annotations

import math

import pytest

from parsl_malleable.errors import TraceFormatError
from parsl_malleable.traces import read_sacct

HEADER = (
    "JobID|JobIDRaw|Submit|Start|End|Timelimit|NNodes|ReqNodes|NCPUS|ReqCPUS|Partition|User|State"
)
EXPORT = f"""{HEADER}
100|100|2024-03-01T10:00:00|2024-03-01T10:05:00|2024-03-01T11:00:00|01:00:00|2|2|72|72|normal|alice|COMPLETED
100.batch|100.batch|2024-03-01T10:05:00|2024-03-01T10:05:00|2024-03-01T11:00:00||1|1|36|36||alice|COMPLETED
100.extern|100.extern|2024-03-01T10:05:00|2024-03-01T10:05:00|2024-03-01T11:00:00||2|2|72|72||alice|COMPLETED
100.0|100.0|2024-03-01T10:05:00|2024-03-01T10:05:00|2024-03-01T11:00:00||2|2|72|72||alice|COMPLETED
101_1|102|2024-03-01T10:01:00|Unknown|Unknown|1-00:00:00|1|1|1|1|debug|bob|PENDING
101_2|103|2024-03-01T09:59:00|2024-03-01T10:00:00|Unknown|UNLIMITED|4|4|144|144|normal|bob|RUNNING
104|104|2024-03-01T10:02:00|None|2024-03-01T10:03:00|Partition_Limit|0|3|0|108|long|carol|CANCELLED
105|105|2024-03-01T10:03:00|2024-03-01T10:04:00|2024-03-01T10:34:00|30|1|1|36|36|normal|dave|TIMEOUT
106|106|2024-03-01T10:04:00|2024-03-01T10:04:00|2024-03-01T10:05:00|05:30|1|1|36|36|normal|dave|COMPLETED
"""


@pytest.fixture
def export(tmp_path):
    path = tmp_path / "sacct.txt"
    path.write_text(EXPORT)
    return path


def test_known_answers(export):
    trace = read_sacct(export)
    jobs = trace.jobs
    assert trace.machine.start_epoch == 1709287140.0  # 2024-03-01T09:59:00Z
    assert jobs["job_id"].tolist() == [103, 100, 102, 104, 105, 106]
    assert jobs["submit"].tolist() == [0.0, 60.0, 120.0, 180.0, 240.0, 300.0]
    assert jobs["start"][1] == 360.0 and math.isnan(jobs["start"][2])
    assert jobs["end"][1] == 3660.0 and math.isnan(jobs["end"][0])
    walltime = jobs["walltime"].tolist()
    assert walltime[1:3] == [3600.0, 86400.0] and walltime[4:] == [1800.0, 330.0]
    assert math.isnan(walltime[0]) and math.isnan(walltime[3])
    assert jobs["nodes"].tolist() == [4, 2, 1, 3, 1, 1]  # 104: NNodes 0 -> ReqNodes
    assert jobs["cores"].tolist() == [144, 72, 1, -1, 36, 36]
    assert jobs["cores_req"].tolist() == [144, 72, 1, 108, 36, 36]
    assert jobs["queue"].tolist()[:3] == ["normal", "normal", "debug"]
    assert jobs["user"].tolist()[3] == "carol"
    rep = trace.report.repairs
    assert rep["job_steps_skipped"] == 3
    assert rep["unsorted_submit"] == 1
    assert rep["nodes_alloc_missing"] == 1
    assert rep["never_started"] == 2 and rep["no_end_time"] == 1
    assert rep["walltime_unknown"] == 2
    assert trace.machine.nodes == 4


def test_job_id_without_raw_column_uses_leading_number(tmp_path):
    path = tmp_path / "s.psv"
    path.write_text("JobID|Submit|NNodes\n7_3|2024-01-01T00:00:00|2\n8+0|2024-01-01T00:00:01|1\n")
    trace = read_sacct(path, nodes=10)
    assert trace.jobs["job_id"].tolist() == [7, 8]
    assert trace.jobs["nodes_req"].tolist() == [2, 1]
    assert trace.report.repairs["nodes_req_missing"] == 2
    assert trace.machine.nodes == 10


def test_oversized_jobs_clamped(export):
    trace = read_sacct(export, nodes=2)
    assert trace.jobs["nodes"].max() == 2
    assert trace.report.repairs["nodes_clamped"] == 2
    assert trace.report.repairs["nodes_req_clamped"] == 2


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("107|107|2024-03-01T10:05:00|x", "expected 13 '|'-separated fields"),
        (
            "107|107|yesterday|Unknown|Unknown|01:00|1|1|1|1|p|u|PENDING",
            "Submit 'yesterday' is not an ISO time",
        ),
        (
            "107|107|2024-03-01T10:05:00|Unknown|Unknown|01:00|two|1|1|1|p|u|PENDING",
            "NNodes 'two' is not a count",
        ),
        (
            "107|107|2024-03-01T10:05:00|Unknown|Unknown|1h|1|1|1|1|p|u|PENDING",
            "Timelimit '1h' is not a time limit",
        ),
    ],
)
def test_bad_line_names_file_and_line(export, bad, message):
    export.write_text(EXPORT + bad + "\n")
    with pytest.raises(TraceFormatError) as err:
        read_sacct(export)
    assert err.value.line == 11 and message in str(err.value)
    trace = read_sacct(export, skip_bad=True)
    assert trace.report.skipped == 1 and len(trace.jobs) == 6
    assert trace.report.skipped_examples[0].startswith("sacct.txt:11:")


def test_unknown_submit_and_no_size_skipped_and_counted(export):
    clean = read_sacct(export).jobs
    lines = EXPORT.splitlines(keepends=True)
    lines.insert(2, "108|108|Unknown|Unknown|Unknown|01:00|1|1|1|1|p|u|PENDING\n")
    lines.insert(3, "109|109|2024-03-01T10:06:00|Unknown|Unknown|01:00|0|0|1|1|p|u|PENDING\n")
    export.write_text("".join(lines))
    trace = read_sacct(export)
    assert trace.report.skipped == 2
    assert trace.jobs.equals(clean)  # skipping rows mid-file leaves the others intact
    assert trace.report.repairs["skipped_no_submit_time"] == 1
    assert trace.report.repairs["skipped_no_node_count"] == 1


def test_header_problems(tmp_path):
    path = tmp_path / "s.txt"
    path.write_text("Start|End\n")
    with pytest.raises(TraceFormatError, match=r"s\.txt:1: header lacks columns"):
        read_sacct(path)
    path.write_text("\n\n")
    with pytest.raises(TraceFormatError, match="empty file"):
        read_sacct(path)


def test_trailing_pipe_tolerated(tmp_path):
    path = tmp_path / "s.txt"
    path.write_text("JobID|Submit|NNodes|\n1|2024-01-01T00:00:00|3|\n")
    assert read_sacct(path).jobs["nodes"].tolist() == [3]
