"""Issue 34: inputs that were read silently wrong or crashed now give a clear error or a
counted fix (Torque exec_host ranges, fractional and infinite values, duplicated sacct
columns, binary and sparse files)."""

from __future__ import annotations

import gzip
import os
import time
import tracemalloc
from pathlib import Path

import pytest
from click.testing import CliRunner

from parsl_malleable.cli import main
from parsl_malleable.errors import TraceFormatError
from parsl_malleable.traces import read_idle_intervals, read_trace
from parsl_malleable.traces._io import MAX_LINE_CHARS
from parsl_malleable.traces.pbs import count_pbs_hosts

T0 = 1_712_052_000
SACCT_HEADER = "JobID|Submit|Start|End|NNodes|NCPUS\n"
SWF_HEADER = "; MaxNodes: 4\n; MaxProcs: 4\n"


def pbs_log(exec_host: str, extra: str = "") -> str:
    times = f"ctime={T0} start={T0 + 100} end={T0 + 3700}"
    return (
        f"04/02/2024 10:00:00;Q;7.srv;queue=workq ctime={T0} Resource_List.nodect=2{extra}\n"
        f"04/02/2024 11:01:40;E;7.srv;user=alice {times} exec_host={exec_host}\n"
    )


def sacct_row(nnodes: str) -> str:
    return f"7|2024-03-01T10:00:00|2024-03-01T10:01:00|2024-03-01T11:00:00|{nnodes}|72\n"


def swf(run: str) -> str:
    return f"1 0 5 {run} 2 -1 -1 2 100 -1 1 1 1 -1 1 -1 -1 -1\n"


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("exec_host", "nodes", "cores"),
    [
        ("n3/0-35+n4/0-35", 2, 72),  # Torque ranges
        ("n3/0+n3/1+n4/0+n4/1", 2, 4),  # Torque, one core per chunk
        ("n5/0,2,4-7", 1, 6),  # Torque lists
        ("n1/0*36+n2/0*36", 2, 72),  # PBS Pro index*ncpus
        ("n1/0*36+n1/1*4", 1, 40),
    ],
)
def test_pbs_exec_host_counts_cores_of_every_layout(tmp_path, exec_host, nodes, cores):
    assert count_pbs_hosts(exec_host) == (nodes, cores)
    trace = read_trace(write(tmp_path / "acct", pbs_log(exec_host)), "pbs")
    assert trace.jobs[["nodes", "cores"]].values.tolist() == [[nodes, cores]]
    assert "nodes_from_request" not in trace.report.repairs


@pytest.mark.parametrize("exec_host", ["n3/0-35*2", "n3/35-0", "n3/0*x", "n3/"])
def test_pbs_exec_host_that_does_not_parse_falls_back_to_the_request_counted(tmp_path, exec_host):
    trace = read_trace(write(tmp_path / "acct", pbs_log(exec_host)), "pbs")
    assert trace.jobs[["nodes", "cores"]].values.tolist() == [[2, -1]]
    assert trace.report.describe("nodes_from_request") == "1 (line 1)"


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (" Resource_List.ncpus=1.5", "acct:1: resource_list.ncpus=1.5 is not a whole count"),
        (" Resource_List.ncpus=inf", "acct:1: resource_list.ncpus=inf is not a whole count"),
        (" end=inf", "acct:1: end=inf is not a Unix time"),
    ],
)
def test_pbs_fractional_or_infinite_values_are_refused(tmp_path, extra, says):
    path = write(tmp_path / "acct", pbs_log("n3/0", extra))
    with pytest.raises(TraceFormatError, match=says):
        read_trace(path, "pbs")


def test_pbs_fractional_node_count_is_refused_or_counted_when_skipping(tmp_path):
    text = pbs_log("n3/0").replace("nodect=2", "nodect=1.5") + pbs_log("n3/0+n4/0").replace(
        "7.srv", "8.srv"
    )
    path = write(tmp_path / "acct", text)
    with pytest.raises(TraceFormatError, match=r"acct:1: resource_list\.nodect=1\.5 is not"):
        read_trace(path, "pbs")
    trace = read_trace(path, "pbs", skip_bad=True)
    assert trace.report.describe("bad_resource_list.nodect") == "1 (line 1)"
    assert trace.report.describe("skipped_no_node_count") == "1 (line 1)"
    assert trace.jobs[["job_id", "nodes"]].values.tolist() == [[8, 2]]


@pytest.mark.parametrize("nnodes", ["1.5", "inf", "1e30"])
def test_sacct_fractional_or_infinite_node_count_is_refused_or_skipped(tmp_path, nnodes):
    path = write(tmp_path / "sacct.txt", SACCT_HEADER + sacct_row(nnodes) + sacct_row("2"))
    with pytest.raises(TraceFormatError, match=f"sacct.txt:2: NNodes '{nnodes}' is not a whole"):
        read_trace(path)
    trace = read_trace(path, skip_bad=True)
    assert trace.report.skipped == 1
    assert "sacct.txt:2: NNodes" in trace.report.skipped_examples[0]
    assert trace.jobs["nodes"].tolist() == [2]


def test_sacct_duplicated_column_is_a_clear_error(tmp_path):
    text = "JobID|Submit|JobID|NNodes\n7|2024-03-01T10:00:00|7|2\n"
    result = CliRunner().invoke(main, ["trace", str(write(tmp_path / "sacct.txt", text))])
    assert result.exit_code == 1, result.output
    assert "sacct.txt:1: header names columns ['JobID'] more than once" in result.output


@pytest.mark.parametrize("run", ["inf", "-inf", "1e400", "nan"])
def test_swf_non_finite_run_time_is_refused_by_the_trace_command(tmp_path, run):
    path = write(tmp_path / "t.swf", SWF_HEADER + swf("50") + swf(run))
    result = CliRunner().invoke(main, ["trace", str(path)])
    assert result.exit_code == 1, result.output
    assert "t.swf:4: field 4 is not a" in result.output
    trace = read_trace(path, skip_bad=True)
    assert trace.report.skipped == 1 and len(trace.jobs) == 1


def test_swf_infinite_header_is_refused(tmp_path):
    with pytest.raises(TraceFormatError, match=r"t\.swf:1: header MaxNodes is not a number"):
        read_trace(write(tmp_path / "t.swf", "; MaxNodes: inf\n" + swf("50")))


def test_idle_file_with_infinite_time_is_refused(tmp_path):
    path = write(tmp_path / "idle.csv", "node,idle_start,idle_end\na,0,10\nb,5,inf\n")
    with pytest.raises(TraceFormatError, match=r"idle\.csv:3: idle_end inf is not a finite time"):
        read_idle_intervals(path)


def sparse(path: Path, head: str = "") -> Path:
    path.write_text(head)
    os.truncate(path, 1 << 30)  # a 1 GiB hole: no disk used, reads as NUL bytes
    return path


def refused_quickly_in_bounded_memory(read, path: Path, line: int) -> None:
    tracemalloc.start()
    began = time.monotonic()
    try:
        with pytest.raises(TraceFormatError, match="NUL byte: this is not a text trace") as err:
            read(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert err.value.line == line
    assert peak < 64 << 20, f"peak {peak:,} bytes"
    assert time.monotonic() - began < 30  # reading the whole GiB would take far longer


@pytest.mark.parametrize("name", ["big.swf", "big.log", "big.txt"])
def test_a_sparse_gigabyte_is_refused_without_reading_it(tmp_path, name):
    refused_quickly_in_bounded_memory(read_trace, sparse(tmp_path / name), 1)


def test_a_trace_whose_tail_is_a_hole_is_refused_at_its_line(tmp_path):
    path = sparse(tmp_path / "cut.swf", SWF_HEADER + swf("50"))
    refused_quickly_in_bounded_memory(read_trace, path, 4)


def test_a_sparse_idle_file_is_refused_without_reading_it(tmp_path):
    path = sparse(tmp_path / "idle.csv", "node,idle_start,idle_end\na,0,10\n")
    refused_quickly_in_bounded_memory(read_idle_intervals, path, 3)


@pytest.mark.parametrize("gzipped", [False, True])
def test_a_line_longer_than_any_trace_writes_is_refused(tmp_path, gzipped):
    text = SWF_HEADER + "1" * (MAX_LINE_CHARS + 10) + "\n"
    path = tmp_path / "long.swf"
    path.write_bytes(gzip.compress(text.encode()) if gzipped else text.encode())
    with pytest.raises(TraceFormatError, match=r"long\.swf:3: a line longer than"):
        read_trace(path)


def test_chunked_reading_keeps_every_line_end_as_before(tmp_path):
    # CRLF, lone CR and a record across the 1 Mi-character chunk boundary all read as before
    records = [swf(str(i)).rstrip("\n") for i in range(1, 70_000)]
    text = SWF_HEADER.replace("\n", "\r\n") + "\r".join(records[:3]) + "\r\n"
    text += "\n".join(records[3:]) + "\n"
    path = write(tmp_path / "t.swf", text)
    trace = read_trace(path)
    assert len(trace.jobs) == len(records)
    assert (trace.jobs["end"] - trace.jobs["start"]).tolist() == list(range(1, 70_000))


def test_an_idle_file_with_an_overlong_line_is_refused(tmp_path):
    text = "node,idle_start,idle_end\na,0,10\n" + "b" * (MAX_LINE_CHARS + 10) + ",1,2\n"
    with pytest.raises(TraceFormatError, match=r"idle\.csv:3: a line longer than"):
        read_idle_intervals(write(tmp_path / "idle.csv", text))
