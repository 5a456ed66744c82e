"""Property: corrupting bytes of a valid trace never gives a traceback, nor a silent job loss.

Whatever the damage, the ``trace`` command either fails with a message (exit 1) or succeeds;
when it succeeds, every record it read is a job or a counted skip, and with fewer jobs than the
file had its output says how many records it read and skipped and why.
"""

from __future__ import annotations

from pathlib import Path

import hypothesis.strategies as st
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings

from parsl_malleable.cli import main
from parsl_malleable.traces import read_trace

JOBS = 6
SWF = "; MaxNodes: 8\n; MaxProcs: 8\n" + "".join(
    f"{i} {10 * i} 5 {60 + i} {1 + i % 4} -1 -1 {1 + i % 4} 120 -1 1 {i % 3} 1 -1 1 -1 -1 -1\n"
    for i in range(1, JOBS + 1)
)
SACCT = "JobID|Submit|Start|End|Timelimit|NNodes\n" + "".join(
    f"{i}|2024-03-01T10:0{i}:00|2024-03-01T10:0{i}:30|2024-03-01T11:00:00|01:00:00|{i % 3 + 1}\n"
    for i in range(1, JOBS + 1)
)

edits = st.lists(
    st.tuples(st.floats(0, 1, exclude_max=True), st.binary(min_size=0, max_size=2)),
    min_size=1,
    max_size=4,
)


def corrupt(text: str, changes: list[tuple[float, bytes]]) -> bytes:
    data = bytearray(text.encode())
    for where, new in changes:
        at = int(where * len(data))
        data[at : at + 1] = new  # replace one byte by 0-2 bytes: change, delete or insert
    return bytes(data)


def check(path: Path, skip_bad: bool) -> None:
    args = ["trace", str(path), *(["--skip-bad"] if skip_bad else [])]
    result = CliRunner().invoke(main, args)
    # exit 1 with a message, or 0: never a traceback (CliRunner keeps it in .exception)
    assert result.exit_code in (0, 1), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    if result.exit_code == 1:
        assert result.output.startswith("Error: "), result.output
        return
    trace = read_trace(path, skip_bad=skip_bad)
    report = trace.report
    # every record read is a job, a skipped line, or a counted job step: nothing vanishes
    steps = report.repairs.get("job_steps_skipped", 0)
    assert len(trace.jobs) == report.lines_read - report.skipped - steps, report
    if len(trace.jobs) < JOBS:
        # fewer jobs: the output says how many records it read and skipped (lines run
        # together read as one record, and SWF counts them as extra_fields_ignored)
        out = result.output
        assert _row(out, "records read", report.lines_read), out
        assert _row(out, "skipped", report.skipped), out
        assert report.skipped + steps or report.lines_read < JOBS, report
        for kind in report.repairs:
            assert kind in out


def _row(output: str, name: str, value: int) -> bool:
    return any(name in line and f" {value:,} " in line for line in output.splitlines())


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(changes=edits, skip_bad=st.booleans())
def test_corrupted_swf_is_an_error_or_an_explained_read(tmp_path, changes, skip_bad):
    path = tmp_path / "t.swf"
    path.write_bytes(corrupt(SWF, changes))
    check(path, skip_bad)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(changes=edits, skip_bad=st.booleans())
def test_corrupted_sacct_is_an_error_or_an_explained_read(tmp_path, changes, skip_bad):
    path = tmp_path / "sacct.txt"
    path.write_bytes(corrupt(SACCT, changes))
    check(path, skip_bad)


def test_the_clean_files_read_fully(tmp_path):
    for name, text in (("t.swf", SWF), ("sacct.txt", SACCT)):
        path = tmp_path / name
        path.write_text(text)
        trace = read_trace(path)
        assert len(trace.jobs) == JOBS and trace.report.skipped == 0


def test_a_lost_newline_between_two_swf_records_is_counted(tmp_path):
    lines = SWF.splitlines(keepends=True)
    lines[3] = lines[3].rstrip("\n") + " "  # job 2 runs into job 3
    path = tmp_path / "t.swf"
    path.write_text("".join(lines))
    trace = read_trace(path)
    assert len(trace.jobs) == JOBS - 1
    assert trace.report.examples["extra_fields_ignored"] == ["line 4"]
