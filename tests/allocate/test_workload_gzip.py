"""Workload CSVs may be gzipped (``<name>-jobs.csv.gz``): the form the project carries them in."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from parsl_malleable.allocate import load_scaling, load_workload
from parsl_malleable.errors import TraceFormatError

SCALING = "job,nodes,throughput\nA,1,10\nA,2,18\nB,1,5\n"
JOBS = "job,Tcup,Tcdw,Jmin,Jmax\nA,1,2,1,2\nB,3,4,1,1\n"


def _write(folder: Path, name: str, text: str, gz: bool) -> None:
    if gz:
        (folder / f"{name}.gz").write_bytes(gzip.compress(text.encode()))
    else:
        (folder / name).write_text(text)


@pytest.mark.parametrize(("scaling_gz", "jobs_gz"), [(True, True), (True, False), (False, True)])
def test_gzipped_workload_reads_like_plain(tmp_path, scaling_gz, jobs_gz):
    plain = tmp_path / "plain"
    packed = tmp_path / "packed"
    plain.mkdir()
    packed.mkdir()
    _write(plain, "w-scaling.csv", SCALING, gz=False)
    _write(plain, "w-jobs.csv", JOBS, gz=False)
    _write(packed, "w-scaling.csv", SCALING, gz=scaling_gz)
    _write(packed, "w-jobs.csv", JOBS, gz=jobs_gz)
    expected = load_workload(plain, "w")
    got = load_workload(packed, "w")
    assert [j.name for j in got] == ["A", "B"]
    assert [(j.name, j.min_nodes, j.max_nodes, j.scale_up_cost) for j in got] == [
        (j.name, j.min_nodes, j.max_nodes, j.scale_up_cost) for j in expected
    ]
    assert got[0].curve(2) == pytest.approx(18.0)


def test_plain_file_wins_over_gzipped(tmp_path):
    _write(tmp_path, "w-scaling.csv", SCALING, gz=False)
    _write(tmp_path, "w-scaling.csv", SCALING.replace("A,2,18", "A,2,99"), gz=True)
    _write(tmp_path, "w-jobs.csv", JOBS, gz=False)
    assert load_workload(tmp_path, "w")[0].curve(2) == pytest.approx(18.0)


def test_load_scaling_reads_a_gzipped_file(tmp_path):
    _write(tmp_path, "s.csv", SCALING, gz=True)
    assert load_scaling(tmp_path / "s.csv.gz")["A"](2) == pytest.approx(18.0)


def test_truncated_gzip_is_a_trace_error(tmp_path):
    data = gzip.compress((SCALING * 200).encode())
    (tmp_path / "w-scaling.csv.gz").write_bytes(data[: len(data) // 2])
    _write(tmp_path, "w-jobs.csv", JOBS, gz=False)
    with pytest.raises(TraceFormatError, match=r"w-scaling\.csv\.gz.*cannot read"):
        load_workload(tmp_path, "w")


def test_missing_workload_names_the_plain_file(tmp_path):
    with pytest.raises(TraceFormatError, match=r"w-scaling\.csv.*cannot read"):
        load_workload(tmp_path, "w")


def test_carried_workloads_are_gzipped_and_load(bftrainer_dir):
    assert not (bftrainer_dir / "imagenet-imgps-1001J-jobs.csv").exists()
    assert (bftrainer_dir / "imagenet-imgps-1001J-jobs.csv.gz").is_file()
    jobs = load_workload(bftrainer_dir, "hps-shufflenet-10J")
    assert len(jobs) == 10
