"""read_trace: format detection by suffix and content, options passed through."""

from __future__ import annotations

import gzip

import pytest

from parsl_malleable.errors import TraceFormatError
from parsl_malleable.traces import detect_format, read_trace

SWF_LINE = "1 0 5 10 4 -1 -1 4 20 -1 1 1 1 -1 1 -1 -1 -1\n"
SACCT = "JobID|Submit|NNodes\n1|2024-01-01T00:00:00|2\n"
PBS = "04/02/2024 10:00:00;Q;1.srv;queue=q ctime=1712052000 Resource_List.nodect=3\n"
PBS += "04/02/2024 10:01:00;S;1.srv;start=1712052060 exec_host=n1/0*8+n2/0*8+n3/0*8\n"
COBALT = "04/02/2024 10:00:00;Q;1.theta;qtime=1712052000 Resource_List.nodect=3 mode=script\n"


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("t.swf", SWF_LINE, "swf"),
        ("t.log", "; MaxNodes: 8\n" + SWF_LINE, "swf"),
        ("t.dat", SWF_LINE, "swf"),
        ("t.txt", SACCT, "sacct"),
        ("20240402", PBS, "pbs"),
        ("events.log", COBALT, "cobalt"),
    ],
)
def test_detect_format(tmp_path, name, text, expected):
    path = tmp_path / name
    path.write_text(text)
    assert detect_format(path) == expected


def test_gzipped_swf_by_suffix(tmp_path):
    path = tmp_path / "t.swf.gz"
    with gzip.open(path, "wt") as fh:
        fh.write("; MaxNodes: 8\n; MaxProcs: 8\n" + SWF_LINE)
    assert detect_format(path) == "swf"
    assert read_trace(path).jobs["nodes"].tolist() == [4]


def test_dispatch_and_options(tmp_path):
    swf = tmp_path / "t.swf"
    swf.write_text(SWF_LINE)
    assert read_trace(swf, cores_per_node=2).jobs["nodes"].tolist() == [2]
    sacct = tmp_path / "s.txt"
    sacct.write_text(SACCT)
    assert read_trace(sacct, "slurm", nodes=5).machine.nodes == 5
    pbs = tmp_path / "p"
    pbs.write_text(PBS)
    pbs_trace = read_trace(pbs)
    assert pbs_trace.jobs["nodes_req"].tolist() == [3]
    assert pbs_trace.report.format == "pbs"
    assert pbs_trace.report.format_reason == "line 2 has exec_host=n1/0*8+n2/0*8+n3/0*8 (PBS)"
    cobalt = tmp_path / "c"
    cobalt.write_text(COBALT)
    assert read_trace(cobalt, nodes=8).machine.nodes == 8
    with pytest.raises(ValueError, match="pass nodes="):
        read_trace(cobalt)


def test_unknown_inputs(tmp_path):
    path = tmp_path / "x.txt"
    path.write_text("hello world\n")
    with pytest.raises(TraceFormatError, match="unknown trace format"):
        read_trace(path)
    with pytest.raises(ValueError, match="unknown trace format 'xml'"):
        read_trace(path, "xml")
    path.write_text("")
    with pytest.raises(TraceFormatError, match="empty file"):
        read_trace(path)
    with pytest.raises(TraceFormatError, match="no such file"):
        read_trace(tmp_path / "missing.log")
