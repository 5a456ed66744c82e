"""SWF reader: hand-written files with known answers, every repair, and bad input."""

from __future__ import annotations

import gzip
import math
from pathlib import Path

import numpy as np
import pytest

from parsl_malleable.errors import TraceFormatError
from parsl_malleable.traces import read_swf
from parsl_malleable.traces.schema import JOB_COLUMNS

HEADER = "; Installation: Test Site\n; UnixStartTime: 1000\n; MaxNodes: 4\n; MaxProcs: 16\n"


def swf_line(job, submit, wait, run, procs, req_procs, req_time, user=1, queue=1, extra=""):
    fields = [job, submit, wait, run, procs, -1, -1, req_procs, req_time, -1, 1, user, 1, -1]
    fields += [queue, -1, -1, -1]
    return " ".join(str(f) for f in fields) + (" " + extra if extra else "") + "\n"


def write(tmp_path: Path, text: str, name: str = "t.swf") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_known_answers_cores_converted_to_nodes(tmp_path):
    text = HEADER + swf_line(1, 0, 10, 100, 4, 4, 200) + swf_line(2, 5, 0, 50, 5, 6, 60, 2, 3)
    trace = read_swf(write(tmp_path, text))
    m = trace.machine
    assert (m.name, m.nodes, m.cores_per_node, m.start_epoch) == ("Test Site", 4, 4, 1000.0)
    jobs = trace.jobs
    assert list(jobs.columns) == list(JOB_COLUMNS)
    assert jobs["job_id"].tolist() == [1, 2]
    assert jobs["start"].tolist() == [10.0, 5.0]
    assert jobs["end"].tolist() == [110.0, 55.0]
    assert jobs["walltime"].tolist() == [200.0, 60.0]
    assert jobs["cores"].tolist() == [4, 5]
    assert jobs["cores_req"].tolist() == [4, 6]
    assert jobs["nodes"].tolist() == [1, 2]  # ceil(5 / 4)
    assert jobs["nodes_req"].tolist() == [1, 2]
    assert jobs["user"].tolist() == ["1", "2"]
    assert jobs["queue"].tolist() == ["1", "3"]
    assert not trace.report.repairs and trace.report.skipped == 0
    assert trace.report.lines_read == 2


def test_node_units_when_maxprocs_equals_maxnodes(tmp_path):
    text = "; MaxNodes: 100\n; MaxProcs: 100\n" + swf_line(1, 0, 0, 10, 64, 64, 20)
    trace = read_swf(write(tmp_path, text))
    assert trace.jobs["nodes"].tolist() == [64]
    assert trace.jobs["cores"].tolist() == [-1]
    with_cores = read_swf(write(tmp_path, text), cores_per_node=8)
    assert with_cores.jobs["nodes"].tolist() == [64]
    assert with_cores.jobs["cores"].tolist() == [512]
    assert with_cores.machine.cores_per_node == 8


def test_machines_file_wins_over_header(tmp_path):
    path = write(tmp_path, "; MaxNodes: 8\n; MaxProcs: 8\n" + swf_line(1, 0, 0, 10, 6, 6, 20))
    (tmp_path / "t.swf.machines").write_text("0\tnodeA\t4\t2\t1\t1024\n")
    trace = read_swf(path)
    assert (trace.machine.nodes, trace.machine.cores_per_node) == (4, 2)
    assert trace.jobs["nodes"].tolist() == [3]


def test_heterogeneous_machines_file_uses_rounded_mean(tmp_path):
    path = write(tmp_path, swf_line(1, 0, 0, 10, 33, 33, 20))
    (tmp_path / "t.swf.machines").write_text("0 a 2 10 1 1\n1 b 1 4 1 1\n")
    trace = read_swf(path)
    assert trace.machine.name == "a+b"
    assert (trace.machine.nodes, trace.machine.cores_per_node) == (3, 8)  # 24 cpus / 3 nodes
    assert trace.jobs["nodes"].tolist() == [3]  # 33 > 24 cores: clamped first
    assert trace.report.repairs["nodes_clamped"] == 1


def test_unequal_node_types_round_cores_per_node(tmp_path):
    path = write(tmp_path, swf_line(1, 0, 0, 10, 9, 9, 20))
    (tmp_path / "t.swf.machines").write_text("0 a 2 10 1 1\n1 b 1 5 1 1\n")
    trace = read_swf(path)
    assert (trace.machine.nodes, trace.machine.cores_per_node) == (3, 8)  # 25 cpus / 3 nodes
    assert trace.report.repairs["cores_per_node_rounded"] == 1
    assert trace.jobs["nodes"].tolist() == [2]


def test_only_maxprocs_header_uses_option(tmp_path):
    trace = read_swf(
        write(tmp_path, "; MaxProcs: 64\n" + swf_line(1, 0, 0, 1, 20, 20, 5)), cores_per_node=16
    )
    assert (trace.machine.nodes, trace.machine.cores_per_node) == (4, 16)
    assert trace.jobs["nodes"].tolist() == [2]
    assert trace.jobs["cores"].tolist() == [20]


def test_gzip_and_machines_beside_uncompressed_name(tmp_path):
    path = tmp_path / "t.swf.gz"
    with gzip.open(path, "wt") as fh:
        fh.write(swf_line(1, 0, 0, 10, 6, 6, 20))
    (tmp_path / "t.swf.machines").write_text("0 n 4 2 1 1\n")
    trace = read_swf(path)
    assert trace.jobs["nodes"].tolist() == [3]
    assert trace.machine.nodes == 4


def test_extended_swf_fields_are_ignored(tmp_path):
    extra = "{1241,1241} q_1d 1:ppn=2:x86_64#excl"
    trace = read_swf(write(tmp_path, HEADER + swf_line(7, 0, 1, 2, 8, 8, 3, extra=extra)))
    assert trace.jobs["job_id"].tolist() == [7]
    assert trace.jobs["nodes"].tolist() == [2]


def test_missing_procs_filled_from_each_other_and_counted(tmp_path):
    text = HEADER + swf_line(1, 0, 0, 1, -1, 8, 5) + swf_line(2, 1, 0, 1, 4, -1, 5)
    text += swf_line(3, 2, 0, 1, -1, -1, 5)
    trace = read_swf(write(tmp_path, text))
    assert trace.jobs["cores"].tolist() == [8, 4]
    assert trace.jobs["cores_req"].tolist() == [8, 4]
    assert trace.report.repairs["procs_alloc_missing"] == 1
    assert trace.report.repairs["procs_req_missing"] == 1
    assert trace.report.skipped == 1
    assert trace.report.repairs["skipped_no_processor_count"] == 1
    assert "t.swf:7" in trace.report.skipped_examples[0]


def test_oversized_requests_clamped_and_reported(tmp_path):
    text = HEADER + swf_line(1, 0, 0, 1, 16, 40, 5) + swf_line(2, 1, 0, 1, 99, 99, 5)
    trace = read_swf(write(tmp_path, text))
    assert trace.jobs["nodes_req"].tolist() == [4, 4]
    assert trace.jobs["nodes"].tolist() == [4, 4]
    assert trace.jobs["cores_req"].tolist() == [16, 16]
    assert trace.report.repairs["nodes_req_clamped"] == 2
    assert trace.report.repairs["nodes_clamped"] == 1
    assert trace.report.examples["nodes_clamped"] == ["line 6"]


def test_unsorted_submits_sorted_stably_and_counted(tmp_path):
    lines = [swf_line(1, 50, 0, 1, 1, 1, 5), swf_line(2, 10, 0, 1, 1, 1, 5)]
    lines += [swf_line(3, 10, 0, 1, 1, 1, 5), swf_line(4, 60, 0, 1, 1, 1, 5)]
    trace = read_swf(write(tmp_path, HEADER + "".join(lines)))
    assert trace.jobs["job_id"].tolist() == [2, 3, 1, 4]
    assert trace.jobs.index.tolist() == [0, 1, 2, 3]
    assert trace.report.repairs["unsorted_submit"] == 1
    assert trace.report.examples["unsorted_submit"] == ["line 6 (job 2)"]


def test_unknown_wait_starts_at_submit_and_unknown_runtime_is_nan(tmp_path):
    text = HEADER + swf_line(1, 0, -1, 10, 1, 1, 5) + swf_line(2, 1, 3, -1, 1, 1, -1)
    text += swf_line(3, 2, 0, 0, 1, 1, 5) + swf_line(4, 3, 0, -7, 1, 1, 5)
    text += swf_line(5, 4, -1, -1, 1, 1, 5)
    trace = read_swf(write(tmp_path, text))
    jobs = trace.jobs
    assert (jobs["start"][0], jobs["end"][0]) == (0.0, 10.0)  # runtime known: start = submit
    assert jobs["start"][1] == 4.0 and math.isnan(jobs["end"][1])
    assert jobs["end"][2] == jobs["start"][2] == 2.0
    assert math.isnan(jobs["end"][3]) and math.isnan(jobs["start"][4])
    assert math.isnan(jobs["walltime"][1])
    rep = trace.report
    assert rep.repairs["wait_unknown"] == 2 and rep.examples["wait_unknown"] == ["line 5", "line 9"]
    assert rep.examples["start_set_to_submit"] == ["line 5"]
    assert rep.examples["runtime_unknown"] == ["line 6", "line 9"]
    assert rep.examples["runtime_negative"] == ["line 8"]
    assert rep.repairs["runtime_zero"] == 1 and rep.repairs["walltime_unknown"] == 1


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("1 2 3\n", "expected 18 fields, found 3"),
        (swf_line(1, 0, 0, 1, "x", 1, 5), "field 5 is not a number: 'x'"),
        (swf_line(1, 0, 0, 1, "nan", 1, 5), "field 5 is not a number: 'nan'"),
    ],
)
def test_malformed_line_names_file_and_line(tmp_path, line, message):
    path = write(tmp_path, HEADER + swf_line(1, 0, 0, 1, 1, 1, 5) + line)
    with pytest.raises(TraceFormatError) as err:
        read_swf(path)
    assert err.value.line == 6 and err.value.path == str(path)
    assert message in str(err.value)


def test_skip_bad_counts_malformed_lines(tmp_path):
    text = HEADER + "garbage\n" + swf_line(1, 0, 0, 1, 1, 1, 5) + "1 2 x\n"
    text += swf_line(2, 3, 0, 1, "y", 1, 5) + swf_line(3, 4, 0, 1, 1, 1, 5)
    trace = read_swf(write(tmp_path, text), skip_bad=True)
    assert trace.jobs["job_id"].tolist() == [1, 3]
    assert trace.report.skipped == 3
    assert len(trace.report.skipped_examples) == 3
    assert trace.report.skipped_examples[0].startswith("t.swf:5:")


def test_bad_header_value_is_reported(tmp_path):
    with pytest.raises(TraceFormatError, match=r"t\.swf:2: header MaxNodes"):
        read_swf(
            write(tmp_path, "; Computer: x\n; MaxNodes: many\n" + swf_line(1, 0, 0, 1, 1, 1, 5))
        )


def test_no_header_infers_machine_from_largest_job(tmp_path):
    text = swf_line(1, 0, 0, 1, 10, 12, 5) + swf_line(2, 1, 0, 1, 3, 3, 5)
    trace = read_swf(write(tmp_path, text), cores_per_node=4)
    assert (trace.machine.nodes, trace.machine.cores_per_node) == (3, 4)
    assert trace.jobs["nodes_req"].tolist() == [3, 1]
    assert trace.report.repairs["machine_size_inferred"] == 1


def test_missing_file_is_a_trace_error(tmp_path):
    with pytest.raises(TraceFormatError, match="no such file"):
        read_swf(tmp_path / "absent.swf")


def test_empty_trace_reads_as_no_jobs(tmp_path):
    trace = read_swf(write(tmp_path, HEADER))
    assert len(trace.jobs) == 0 and trace.machine.nodes == 4


# job counts and machine sizes from parsl_malleable/data/traces/README.md (gzipped traces)
REAL = [
    ("theta_2022.swf.gz", 23_911, 4_360, 1),
    ("UniLu-Gaia-2014-1.swf.gz", 51_987, 151, 13),
    ("hpc2n.swf.gz", 3_170, 120, 2),
    ("wagap-2013.swf.gz", 17_900, 68, 32),
]


@pytest.mark.parametrize(("name", "jobs", "nodes", "cores_per_node"), REAL)
def test_real_shared_traces(traces_dir, name, jobs, nodes, cores_per_node):
    trace = read_swf(traces_dir / name)
    assert len(trace.jobs) == jobs
    assert (trace.machine.nodes, trace.machine.cores_per_node) == (nodes, cores_per_node)
    frame = trace.jobs
    wait = (frame["start"] - frame["submit"]).dropna()
    assert (wait >= 0).all()
    assert frame["nodes"].between(1, nodes).all()
    assert frame["nodes_req"].between(1, nodes).all()
    assert np.all(np.diff(frame["submit"].to_numpy()) >= 0)
    assert trace.report.skipped == 0
