"""``bench_live_harvest.py`` and ``bench_live_training.py --scheduler pbs`` at a tiny size on the
live OpenPBS server (``scripts/pbs-server start``; skipped without one): the first 3 native jobs
of the stream, baseline / poll / baseline. Each command exits 0 and prints the figures of
docs/benchmarks.md ("Live PBS") in their shape, and they hold together: every native done in
every run, no block job of ours left unfinished after the provider closed, nothing preempted
(PBS here preempts nothing), every native that waited for a block counted in its figures, the
training campaign's jobs done and none failed; afterwards the server has no job of ours left.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.pbs_server import PBSServer

pytestmark = [pytest.mark.slow, pytest.mark.bench, pytest.mark.pbs]

REPO = Path(__file__).resolve().parents[2]
JOBS = 3  # natives: the stream's first three (at 0, 0.8 and 3.6 s; 10-32 s long)
NUMBER = r"[+-]?\d+(?:\.\d+)?"


def run_benchmark(script: str, *args: str, timeout_s: float) -> str:
    """Run ``benchmarks/<script>`` with ``--scheduler pbs``; its stdout (it must exit 0)."""
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / script), "--scheduler", "pbs", *args],
        capture_output=True, text=True, timeout=timeout_s, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return done.stdout


def table_rows(text: str, header_start: str) -> dict[str, list[str]]:
    """The rows after the table header that starts with ``header_start``: mode -> cells (a mode
    printed twice keeps its last row, the second baseline's)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    rows = {}
    for line in lines[start + 1 :]:
        cells = line.split()
        if not cells or cells[0] not in ("baseline", "poll"):
            continue
        rows[cells[0]] = cells[1:]
    return rows


def check_common(text: str, runs: int) -> None:
    """What both benchmarks print on PBS, and its invariants."""
    noise = re.search(rf"PBS's own noise \(baseline vs baseline\):.*?({NUMBER}) s", text)
    assert noise, text
    done = re.findall(r"^(baseline|poll): natives done (\d+) of (\d+)", text, re.M)
    assert len(done) == runs, text
    assert all(int(n) == int(total) == JOBS for _, n, total in done), done
    left = re.search(
        r"^poll: .*block jobs left unfinished after close: (\S+) \(all gone", text, re.M
    )
    assert left and left.group(1) == "none", text
    assert re.search(r"^block jobs of ours left behind: 0$", text, re.M), text
    waited = re.search(rf"^poll: natives that waited for a block: (\d+) of {JOBS}", text, re.M)
    assert waited, text
    if int(waited.group(1)):
        # Its split: submit -> told to go, told -> the native's start.
        assert re.search(r"submit -> block told to go median .* told -> native start", text)


def assert_no_job_of_ours_left(pbs: PBSServer) -> None:
    ours = {
        i: a["job_state"]
        for i, a in pbs.jobs().items()
        if a["Job_Name"].startswith("pm-block-bench-") and a["job_state"] not in ("F", "X")
    }
    assert not ours, ours


def test_live_harvest_on_pbs(pbs: PBSServer, tmp_path: Path) -> None:
    out = tmp_path / "harvest.json"
    text = run_benchmark(
        "bench_live_harvest.py", "--jobs", str(JOBS), "--out", str(out), timeout_s=600
    )
    check_common(text, runs=3)
    rows = table_rows(text, "run ")
    assert set(rows) == {"poll", "baseline"}, text
    # mean, max, > noise, idle node-s, harvested, blocks, yields, preempted
    mean, high, over, idle, share, blocks, yields, preempted = rows["poll"]
    assert float(mean) <= float(high) and 0 <= int(over) <= JOBS
    assert float(idle) > 0 and share.endswith("%")
    # A share of what the natives left idle (their run time is their sleep: a little slack).
    assert 0 < float(share[:-1]) <= 110, share
    assert int(blocks) >= 1 and 0 <= int(yields) <= int(blocks)
    assert int(preempted) == 0  # PBS here preempts nothing: the provider yields
    figures = json.loads(out.read_text())
    assert [r["mode"] for r in figures["runs"]] == ["baseline", "poll", "baseline"]
    for run in figures["runs"]:
        assert len(run["waits"]) == JOBS and run["natives_done"] == JOBS, run
        assert run["blocks_left"] == [], run
    assert_no_job_of_ours_left(pbs)


def test_live_training_on_pbs(pbs: PBSServer, tmp_path: Path) -> None:
    # Two epochs a job: a campaign the machine finishes within the extra minute and a half.
    args = ["--jobs", str(JOBS), "--epochs", "2", "--finish-s", "90"]
    text = run_benchmark("bench_live_training.py", *args, timeout_s=900)
    check_common(text, runs=3)
    rows = table_rows(text, "run ")
    assert set(rows) == {"poll", "baseline"}, text
    cells = rows["poll"]
    # mean, max, > noise, idle, harvested, training, of harvest, samples, replayed, blocks,
    # preempted, yields
    harvested, training = (float(c[:-1]) for c in cells[4:6])
    assert 0 <= training <= harvested <= 100, cells
    assert int(cells[10]) == 0, cells  # nothing preempted
    jobs = re.search(r"^poll: .*training jobs done (\d+) of (\d+)", text, re.M)
    assert jobs and jobs.group(1) == jobs.group(2) == "3", text
    assert "failed:" not in text
    assert_no_job_of_ours_left(pbs)
