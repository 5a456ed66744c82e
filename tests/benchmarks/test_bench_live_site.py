"""``bench_live_site.py``'s parts that need no cluster: the Summit window its rule picks and the
natives made from it, and the submitit-style trial that checkpoints on Slurm's preemption
notice (SIGTERM) and resumes without losing or repeating a step."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name: str) -> Any:
    sys.path.insert(0, str(BENCH))  # the scripts import their neighbours
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_window_meets_its_rule_and_its_natives_fill_exactly_its_busy_time() -> None:
    bench = _load("bench_live_site")
    window, natives = bench.summit_stream(20)
    length = 20 * 60.0
    assert window.length_s == length
    assert bench.IDLE_SHARE[0] <= window.idle_share <= bench.IDLE_SHARE[1]
    assert len(natives) >= bench.MIN_NATIVES
    # Holes kept at Summit's length: their median is the trace's own, near enough.
    assert abs(window.median_hole_s - bench.TRACE_MEDIAN_HOLE_S) < 100
    busy = sum(j.nodes * j.run_s for j in natives)
    assert busy == pytest.approx((1 - window.idle_share) * bench.NODES * length)
    for j in natives:
        assert j.at >= 0 and j.at + j.run_s <= length + 1e-6
        assert j.limit_min * 60 >= j.run_s  # no native is killed by its own limit
    # Never more nodes busy than the machine has (the stream fits, as it did on Summit).
    for t in sorted({j.at for j in natives}):
        assert sum(j.nodes for j in natives if j.at <= t < j.at + j.run_s) <= bench.NODES


def _wait_for(condition: Any, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _segments(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(folder.glob("t.seg-*.json"))]


def test_a_trial_checkpoints_on_the_notice_and_resumes_to_the_same_step_count(
    tmp_path: Path,
) -> None:
    argv = [
        sys.executable, str(BENCH / "scavenger_trial.py"), "--name", "t", "--dir",
        str(tmp_path), "--hidden", "16", "--epochs", "3", "--step-s", "0.02",
        "--checkpoint-every", "5",
    ]  # fmt: skip
    env = {**os.environ, "SLURM_JOB_ID": "1", "OMP_NUM_THREADS": "1"}
    first = subprocess.Popen(argv, env=env)
    # The notice comes after its first checkpoint (step 5), between two others.
    _wait_for(lambda: any(s["step"] >= 5 for s in _segments(tmp_path)))
    first.send_signal(signal.SIGTERM)
    assert first.wait(60) == 0
    (seg,) = _segments(tmp_path)
    assert seg["notice"] is not None
    assert not (tmp_path / "t.done").exists()
    stopped_at = seg["step"]
    subprocess.run(argv, env={**env, "SLURM_JOB_ID": "2"}, check=True, timeout=300)
    done = json.loads((tmp_path / "t.done").read_text())
    second = next(s for s in _segments(tmp_path) if s["job"] == "2")
    assert second["start_step"] == stopped_at
    # The same steps and the same model as one uninterrupted process: nothing lost or repeated.
    from parsl_malleable.apps.digits import train_reference

    reference = train_reference(epochs=3, hidden=(16,), seed=0)
    assert done["steps"] == reference["steps"]
    assert done["test_accuracy"] == pytest.approx(reference["test_accuracy"], abs=1e-12)


def _epochs(t: float) -> list[dict[str, Any]]:
    """A job's membership epochs as the coordinator records them: 1,000 steps on one node in
    100 s, then 900 steps on two in 50 s."""
    return [
        {"world_size": 1, "resumed_at": t, "progress_at": t + 100.0, "start_step": 0,
         "last_step": 1000},
        {"world_size": 2, "resumed_at": t + 101.0, "progress_at": t + 151.0,
         "start_step": 1000, "last_step": 1900},
    ]  # fmt: skip


def test_a_step_counts_the_global_batch_at_any_world_size() -> None:
    """The apps' batch is global: a step of two ranks trains BATCH samples, half on each. Counted
    per rank, as before, a second node looked 3.7x as fast as the first and the replay of a
    live run came out 36% optimistic."""
    _load("bench_live_site")
    training = sys.modules["bench_live_training"]
    epochs = _epochs(0.0)
    batch = training.BATCH
    assert training.per_node_rates(epochs) == {1: 1000 * batch / 100.0, 2: 900 * batch / 50.0}
    assert training.samples_trained(epochs, until=1e9) == 1900 * batch
    assert training.samples_trained(epochs, until=50.0) == 1000 * batch  # resumed by then


def test_a_recorded_run_reprints_the_same_replay_without_the_cluster(tmp_path: Path) -> None:
    """``--out`` keeps each run's raw record, and ``--replay-from`` replays it: the runs come
    back equal (JSON's string keys turned back into integers), and so does the replay."""
    bench = _load("bench_live_site")
    training = sys.modules["bench_live_training"]
    names = list(training.NAMES)
    natives = [bench.Native(0, 0.0, 2, 300.0, 8), bench.Native(1, 120.0, 1, 200.0, 5)]
    run = training.LiveRun(
        mode="poll",
        waits={0: 1.5, 1: 0.7},
        native_nodes={0: names[:2], 1: names[2:3]},
        native_starts={0: 1000.0, 1: 1120.0},
        t0=999.0,
        t1=1400.0,
        idle_node_s=2000.0,
        training_node_s=1500.0,
        epochs={job: _epochs(1000.0 + 10 * i) for i, job in enumerate(bench.SITE_JOBS)},
        jobs_done={job: 500.0 + 10 * i for i, job in enumerate(bench.SITE_JOBS)},
        startup_phases=[{"running": 0.1, "worker": 4.5, "joined": None}],
    )
    # Rates and samples are derived from the epochs, when the run is recorded as on reading.
    run.rates = {job: training.per_node_rates(e) for job, e in run.epochs.items()}
    run.samples = {job: training.samples_trained(e, run.t1) for job, e in run.epochs.items()}
    base = training.LiveRun("baseline", {0: 1.0, 1: 0.5}, {0: [], 1: []}, {}, 999.0, 1400.0, 0.0)
    saved = tmp_path / "site.json"
    raw = bench.raw_record(natives, [base, run], 3)
    # A record written before the batch fix holds rates counted per rank: read, they are
    # derived from the epochs again.
    raw["runs"][1]["rates"] = {job: {"1": 1.0, "2": 99.0} for job in bench.SITE_JOBS}
    saved.write_text(json.dumps({"raw": raw}, default=str))
    loaded_natives, loaded_runs, epochs = bench.load_raw(saved)
    assert (loaded_natives, loaded_runs, epochs) == (natives, [base, run], 3)
    replayed = bench.replay_of(run, natives, epochs)
    assert set(replayed) == set(bench.SITE_JOBS)  # every job finishes in the replay
    assert bench.replay_of(loaded_runs[1], loaded_natives, epochs) == replayed


RECORD = BENCH / "records" / "site-2026-12-05.json"
# The same stream in preemption mode alone, on the fork-server pool and the queue watch's fix.
RECORD_PREEMPT = BENCH / "records" / "site-preempt-2026-12-05.json"


@pytest.mark.parametrize(
    ("record", "modes"), [(RECORD, ["poll", "preempt"]), (RECORD_PREEMPT, ["preempt"])]
)
def test_the_replay_of_the_recorded_site_run_finishes_within_10_percent_of_live(
    record: Path, modes: list[str]
) -> None:
    """The 1:1 site runs of docs/benchmarks.md, recorded: each replay (nodes served as the live
    provider served them) finishes the last job, and the jobs on average, within 10% of live.
    The replay's default windows, from the history of idle intervals, do not: they are the
    comparison that shows what the block serving is for."""
    bench = _load("bench_live_site")
    natives, runs, epochs = bench.load_raw(record)
    harvests = [r for r in runs if r.mode in ("poll", "preempt")]
    assert [r.mode for r in harvests] == modes
    for run in harvests:
        live = run.jobs_done
        replayed = bench.replay_of(run, natives, epochs)
        assert set(replayed) == set(live) == set(bench.SITE_JOBS), run.mode
        last = max(replayed.values()) / max(live.values())
        mean = sum(replayed.values()) / sum(live.values())
        assert 0.9 <= last <= 1.1 and 0.9 <= mean <= 1.1, (run.mode, last, mean)
    history = bench.replay_of(harvests[0], natives, epochs, as_live=False)
    assert max(history.values()) / max(harvests[0].jobs_done.values()) > 1.1
