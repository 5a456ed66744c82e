"""Idle-interval CSV files: the Summit trace and hand-written bad inputs."""

from __future__ import annotations

import gzip

import pytest

from parsl_malleable.errors import TraceFormatError
from parsl_malleable.traces import IDLE_COLUMNS, read_idle_intervals


def test_summit_trace(bftrainer_dir):
    frame = read_idle_intervals(bftrainer_dir / "summit-idle-intervals-2021-02.csv.gz")
    assert list(frame.columns) == list(IDLE_COLUMNS)
    assert {c: str(t) for c, t in frame.dtypes.items()}["idle_start"] == "float64"
    assert len(frame) == 423_502  # as in bftrainer/README.md
    # README says 4,734 nodes (the machine); 4,680 of them appear in an interval
    assert frame["node"].nunique() == 4_680
    assert (frame["idle_end"] >= frame["idle_start"]).all()
    assert frame["idle_start"].is_monotonic_increasing
    length = frame["idle_end"] - frame["idle_start"]
    assert 400 < length.median() < 550  # README: median 475 s
    span = frame["idle_end"].max() - frame["idle_start"].min()
    assert 0.08 < length.sum() / (4_734 * span) < 0.095  # README: about 8.7% idle


def test_sorted_by_start_then_node_and_extra_columns_dropped(tmp_path):
    path = tmp_path / "idle.csv.gz"
    with gzip.open(path, "wt") as fh:
        fh.write("idle_end,node,idle_start,note\n30,b,10,x\n20,a,5,y\n25,a,10,z\n")
    frame = read_idle_intervals(path)
    assert list(frame.columns) == list(IDLE_COLUMNS)
    assert frame["node"].tolist() == ["a", "a", "b"]
    assert frame["idle_start"].tolist() == [5.0, 10.0, 10.0]
    assert frame["idle_end"].tolist() == [20.0, 25.0, 30.0]


@pytest.mark.parametrize(
    ("body", "line", "message"),
    [
        ("node,idle_start,idle_end\na,1,2\nb,x,3\n", 3, "idle_start 'x' is not a number"),
        ("node,idle_start,idle_end\na,1,2\nb,3,\n", 3, "idle_end is missing"),
        ("node,idle_start,idle_end\na,5,2\n", 2, "idle_end is before idle_start"),
        ("node,idle_start,idle_end\n,1,2\n", 2, "no node"),
        ("node,start,end\na,1,2\n", 1, "header lacks columns"),
    ],
)
def test_bad_input_names_line(tmp_path, body, line, message):
    path = tmp_path / "idle.csv"
    path.write_text(body)
    with pytest.raises(TraceFormatError) as err:
        read_idle_intervals(path)
    assert err.value.line == line and message in str(err.value)


def test_missing_file(tmp_path):
    with pytest.raises(TraceFormatError, match="no such file"):
        read_idle_intervals(tmp_path / "none.csv")


def test_equal_starts_ordered_by_node(tmp_path):
    path = tmp_path / "idle.csv"
    path.write_text("node,idle_start,idle_end\na,5,6\nc,10,11\nb,10,12\n")
    assert read_idle_intervals(path)["node"].tolist() == ["a", "b", "c"]
