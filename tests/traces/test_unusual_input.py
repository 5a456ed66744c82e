"""Issue 16: every bad or unusual trace gives a clear error or an explicit, counted fix.

Each test writes its own small file and runs the command a user would run, asserting the exit
status and the words that explain what happened.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from parsl_malleable.cli import main
from parsl_malleable.errors import TraceFormatError
from parsl_malleable.sim.trace_replay import SimulationError, simulate
from parsl_malleable.traces import read_trace

HEADER = "; MaxNodes: 4\n; MaxProcs: 4\n"
T0 = 1_552_644_000


def swf(job: int, submit: int, wait: int, run: int, procs: int, req_time: int = 100) -> str:
    fields = [job, submit, wait, run, procs, -1, -1, procs, req_time, -1, 1, 1, 1, -1, 1, -1, -1]
    return " ".join(map(str, [*fields, -1])) + "\n"


def write(tmp_path: Path, text: str, name: str = "t.swf") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def run(*args: object):
    return CliRunner().invoke(main, [str(a) for a in args])


def cobalt_log(with_cobalt_words: bool) -> str:
    extra = " mode=script" if with_cobalt_words else ""
    lines = []
    for i in range(3):
        job, t = f"{100 + i}.theta", T0 + 600 * i
        lines += [
            f"03/15/2019 10:0{i}:00;Q;{job};qtime={t} Resource_List.nodect=128{extra}",
            f"03/15/2019 10:0{i}:10;S;{job};start={t + 10} exec_host=3800-3927",
            f"03/15/2019 10:0{i}:50;E;{job};start={t + 10} end={t + 50} exec_host=3800-3927",
        ]
    return "\n".join(lines) + "\n"


def test_cobalt_log_without_cobalt_words_is_read_as_cobalt_and_says_why(tmp_path):
    path = write(tmp_path, cobalt_log(False), "events.log")
    result = run("trace", path, "--nodes", 4392)
    assert result.exit_code == 0, result.output
    assert "cobalt (line 2 has exec_host=3800-3927 (Cobalt))" in result.output
    trace = read_trace(path, nodes=4392)
    assert trace.jobs["nodes"].tolist() == [128, 128, 128]  # not 1 node each, as PBS read it


def test_accounting_log_without_evidence_is_refused(tmp_path):
    text = "\n".join(
        f"03/15/2019 10:00:0{i};Q;{i}.srv;qtime={T0 + i} Resource_List.nodect=2" for i in range(3)
    )
    result = run("sim", write(tmp_path, text + "\n", "events.log"))
    assert result.exit_code == 1
    assert "cannot tell Cobalt from PBS" in result.output
    assert "no Cobalt-only or PBS-only attribute" in result.output


def test_cobalt_log_forced_through_the_pbs_reader_counts_its_nodes_from_the_request(tmp_path):
    trace = read_trace(write(tmp_path, cobalt_log(True), "events.log"), "pbs", nodes=4392)
    assert trace.jobs["nodes"].tolist() == [128, 128, 128]
    assert trace.report.repairs["nodes_from_request"] == 3


def test_unknown_waits_are_simulated_from_submit_and_runtime_and_said(tmp_path):
    text = HEADER + "".join(swf(i, 10 * i, -1, 50, 2) for i in range(1, 5))
    result = run("sim", write(tmp_path, text), "--end-cut", "last_end")
    assert result.exit_code == 0, result.output
    assert "4 of 4 (dropped: none)" in result.output
    assert "start_set_to_submit: 4 (line 3, line 4, line 5, line 6)" in result.output
    assert "nan" not in result.output


def test_trace_with_no_usable_runtime_fails_and_says_why(tmp_path):
    text = HEADER + "".join(swf(i, 10 * i, -1, -1, 2) for i in range(1, 4))
    result = run("sim", write(tmp_path, text))
    assert result.exit_code == 1
    assert "none of the 3 jobs can be simulated: unknown_times 3 (jobs 1, 2, 3)" in result.output


@pytest.mark.parametrize("command", ["trace", "sim", "windows"])
@pytest.mark.parametrize("text", ["", HEADER])
def test_empty_trace_is_an_error_in_every_command(tmp_path, command, text):
    result = run(command, write(tmp_path, text))
    assert result.exit_code == 1, result.output
    assert "no usable job (swf): the file has no job records" in result.output


def test_trace_whose_every_line_is_skipped_says_which_and_why(tmp_path):
    text = HEADER + swf(1, -1, 0, 5, 1) + swf(2, 3, 0, 5, -1)
    with pytest.raises(
        TraceFormatError,
        match=r"2 records read, 2 skipped: .*count 1 \(line 4\).*time 1 \(line 3\)",
    ):
        read_trace(write(tmp_path, text))


def test_negative_runtimes_are_named_by_line_and_dropped_by_job_id(tmp_path):
    text = HEADER + swf(1, 0, 0, 10, 1) + swf(2, 5, 0, -5, 1) + swf(3, 6, 0, -1, 1)
    path = write(tmp_path, text)
    trace_out = run("trace", path)
    assert trace_out.exit_code == 0
    assert "runtime_negative" in trace_out.output and "1 (line 4)" in trace_out.output
    sim_out = run("sim", path)
    assert sim_out.exit_code == 0
    assert "1 of 3 (dropped: unknown_times 2 (jobs 2, 3))" in sim_out.output
    assert "runtime_negative: 1 (line 4)" in sim_out.output


def test_clamped_requests_and_unsorted_submits_are_named_in_trace_and_sim(tmp_path):
    text = HEADER + swf(1, 50, 0, 10, 9) + swf(2, 10, 0, 10, 1) + swf(3, 60, 0, 10, 6)
    path = write(tmp_path, text)
    result = run("sim", path)
    assert result.exit_code == 0, result.output
    assert "nodes_clamped: 2 (line 3, line 5)" in result.output
    assert "unsorted_submit: 1 (line 4 (job 2))" in result.output
    trace = read_trace(path)
    assert trace.report.examples["nodes_req_clamped"] == ["line 3", "line 5"]


def test_sim_dropping_jobs_larger_than_a_smaller_machine_names_them(tmp_path):
    text = HEADER + swf(1, 0, 0, 10, 1) + swf(2, 5, 0, 10, 3) + swf(3, 6, 0, 10, 4)
    result = run("sim", write(tmp_path, text), "--nodes", 2)
    assert result.exit_code == 0
    assert "1 of 3 (dropped: too_big 2 (jobs 2, 3))" in result.output


@pytest.fixture
def no_parquet(monkeypatch):
    for name in ("pyarrow", "fastparquet"):
        monkeypatch.setitem(sys.modules, name, None)  # import raises ImportError


def test_sim_parquet_without_pyarrow_fails_before_simulating(tmp_path, no_parquet):
    path = write(tmp_path, HEADER + swf(1, 0, 0, 10, 1))
    result = run("sim", path, "--out", tmp_path / "out", "--format", "parquet")
    assert result.exit_code == 1
    assert "writing Parquet needs pyarrow" in result.output
    assert "jobs simulated" not in result.output and not (tmp_path / "out").exists()


def test_trace_parquet_without_pyarrow_fails_before_reading(tmp_path, no_parquet):
    result = run(
        "trace", write(tmp_path, HEADER + swf(1, 0, 0, 10, 1)), "--out", tmp_path / "j.parquet"
    )
    assert result.exit_code == 1 and "writing Parquet needs pyarrow" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["sim", "--warmup", "nan"], "must be a finite number"),
        (["sim", "--warmup", "inf"], "must be a finite number"),
        (["windows", "--quantile", "nan"], "must be a finite number"),
        (["windows", "--quantile", "1.5"], "must be <= 1.0"),
    ],
)
def test_nan_and_out_of_range_options_are_usage_errors(tmp_path, args, message):
    path = write(tmp_path, HEADER + swf(1, 0, 0, 10, 1))
    result = run(args[0], path, *args[1:])
    assert result.exit_code == 2
    assert message in result.output


@pytest.mark.parametrize("nodes", [float("nan"), 1.5, 0])
def test_simulate_refuses_a_bad_node_count_by_name(tmp_path, nodes):
    trace = read_trace(write(tmp_path, HEADER + swf(1, 0, 0, 10, 1)))
    with pytest.raises(SimulationError, match="machine size"):
        simulate(trace, nodes=nodes)


def test_plain_csv_with_gz_name_and_gzip_with_csv_name_both_read(tmp_path):
    import gzip

    text = "node,idle_start,idle_end\nn1,0,10\n"
    plain = write(tmp_path, text, "idle.csv.gz")
    zipped = tmp_path / "idle.csv"
    zipped.write_bytes(gzip.compress(text.encode()))
    from parsl_malleable.traces import read_idle_intervals

    for path in (plain, zipped):
        assert read_idle_intervals(path)["idle_end"].tolist() == [10.0]
