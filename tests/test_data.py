"""The carried data (``parsl_malleable/data``): found by name, compressed, listed in its README."""

from __future__ import annotations

import gzip
import re

import pytest

from parsl_malleable import data
from parsl_malleable.traces import read_idle_intervals, read_trace

README = data.data_dir() / "README.md"


def test_path_finds_files_by_name_with_or_without_compression_suffix():
    gz = data.path("theta_2022.swf.gz")
    assert gz == data.data_dir() / "traces" / "theta_2022.swf.gz" and gz.is_file()
    assert data.path("theta_2022.swf") == gz
    assert data.path("traces/theta_2022.swf.gz") == gz
    assert data.path("hpc2n.swf.machines").name == "hpc2n.swf.machines"
    assert data.path("summit-idle-intervals-2021-02.csv").parent.name == "bftrainer"


def test_unknown_name_lists_what_is_carried():
    with pytest.raises(
        FileNotFoundError, match=r"no carried data file 'nope\.swf'.*hpc2n\.swf\.gz"
    ):
        data.path("nope.swf")


def test_every_trace_and_workload_is_compressed():
    names = data.files()
    assert (
        "traces/theta_2022.swf.gz" in names and "bftrainer/hps-shufflenet-10J-jobs.csv.gz" in names
    )
    for name in names:
        if name.endswith(".machines"):
            continue
        assert name.endswith(".gz"), f"{name} is not compressed"
        with gzip.open(data.data_dir() / name) as fh:
            assert fh.read(64), name


def _readme_names() -> set[str]:
    """File names in the README table's first column, ``{a,b}`` alternatives expanded."""
    names = set()
    for cell in re.findall(r"^\| `([^`]+)` \|", README.read_text(), flags=re.M):
        match = re.fullmatch(r"(.*)\{([^}]*)\}(.*)", cell)
        alternatives = match.group(2).split(",") if match else [""]
        for alt in alternatives:
            names.add(f"{match.group(1)}{alt}{match.group(3)}" if match else cell)
    return names


def test_readme_table_lists_exactly_the_carried_files():
    assert _readme_names() == set(data.files())


def test_readme_names_source_and_terms():
    text = README.read_text()
    assert "Parallel Workloads Archive" in text and "Feitelson" in text
    for url in ("github.com/BFTrainer/Replayer", "github.com/aleasimulator/alea"):
        assert url in text


@pytest.mark.parametrize(
    ("name", "jobs", "nodes"),
    [("hpc2n.swf.gz", 3_170, 120), ("wagap-2013.swf.gz", 17_900, 68)],
)
def test_compressed_traces_read_directly_with_their_machines_file(name, jobs, nodes):
    trace = read_trace(data.path(name))
    assert len(trace.jobs) == jobs
    assert trace.machine.nodes == nodes  # from the .machines file beside the .swf.gz
    assert trace.report.skipped == 0


def test_summit_idle_intervals_read_directly():
    frame = read_idle_intervals(data.path("summit-idle-intervals-2021-02.csv.gz"))
    assert len(frame) == 423_502
