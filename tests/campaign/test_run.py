"""The README's main job end to end: the demo campaign (smaller) trains on the emulated site,
writes its table and pictures, survives a SIGKILL of its driver, and runs on real Slurm."""

from __future__ import annotations

import itertools
import signal
import struct
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from apps.digits import load_data
from parsl_malleable.campaign.driver_lock import driver_running
from tests.campaign import runs
from tests.provider.conftest import wait_for
from tests.schedulers.conftest import SlurmCluster

pytestmark = pytest.mark.slow


# The tests that compare with the reference run stay on one xdist worker, so that it runs once.
REFERENCE = pytest.mark.xdist_group("demo-reference")


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """One full run of the small demo: (campaign file, output folder)."""
    tmp = tmp_path_factory.mktemp("demo")
    campaign = runs.small_demo(tmp)
    output = tmp / "out"
    done = runs.run(campaign, output)
    assert done.returncode == 0, done.stderr[-4000:]
    return campaign, output


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", path
    return struct.unpack(">II", head[16:24])


@REFERENCE
def test_demo_trains_every_job_and_writes_table_and_pictures(
    uninterrupted: tuple[Path, Path],
) -> None:
    _, output = uninterrupted
    table = runs.results(output)
    assert len(table) == 3
    assert (table["status"] == "done").all(), table
    assert (table["result.test_accuracy"] >= 0.95).all(), table["result.test_accuracy"]
    train_size = len(load_data()[0])
    # Every sample of every epoch was trained exactly once, whatever the resizes.
    assert (table["result.samples_seen"] == runs.EPOCHS * train_size).all()
    assert (table["node_hours"] > 0).all() and (table["time_to_result_s"] > 0).all()
    parquet = pd.read_parquet(output / "results.parquet").set_index("job")
    assert parquet["result.test_accuracy"].tolist() == table["result.test_accuracy"].tolist()
    for name in ("gantt.png", "nodes.png", "curves.png"):
        width, height = png_size(output / name)
        assert width > 500 and height > 150
    # digits reports test accuracy at each epoch's end: one row per epoch, in step order.
    for job in table.index:
        curve = pd.read_csv(output / "metrics" / f"{job}.csv")
        assert curve["epoch"].tolist() == list(range(1, runs.EPOCHS + 1)), curve
        assert curve["step"].is_monotonic_increasing and table.loc[job, "reports"] == runs.EPOCHS
    # Blocks appeared and vanished while native jobs held part of the site.
    site = runs.query(output, "SELECT harvested, native FROM site_samples")
    harvested = [h for h, _ in site]
    assert max(harvested) >= 2 and any(n > 0 for _, n in site)
    vanished = sum(1 for a, b in itertools.pairwise(harvested) if b < a)
    assert vanished >= 1, harvested
    status = subprocess.run(
        [*runs.command(Path("x"), output)[:3], "status", str(output)],
        env=runs.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert status.returncode == 0 and "3 done" in status.stdout, status.stdout


@REFERENCE
def test_a_killed_driver_leaves_nothing_running_and_the_rerun_finishes_every_job_once(
    uninterrupted: tuple[Path, Path], tmp_path: Path
) -> None:
    campaign, reference = uninterrupted
    output = tmp_path / "out"
    first = subprocess.Popen(
        runs.command(campaign, output),
        env=runs.env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def one_done_one_checkpointed() -> bool:
            rows = runs.query(output, "SELECT name, status FROM jobs")
            done = [n for n, s in rows if s == "done"]
            unfinished = [n for n, s in rows if s != "done"]
            return bool(done) and any(
                list((output / "checkpoints" / n).glob("*.pt")) for n in unfinished
            )

        assert wait_for(one_done_one_checkpointed, 300), runs.query(
            output, "SELECT name, status FROM jobs"
        )
        assert runs.processes_of(output, 1), "the run's processes carry its tag"
        first.send_signal(signal.SIGKILL)
        first.wait(30)
        done_before = {
            n for (n,) in runs.query(output, "SELECT name FROM jobs WHERE status='done'")
        }
        checkpointed = {
            n
            for (n,) in runs.query(output, "SELECT name FROM jobs WHERE status != 'done'")
            if list((output / "checkpoints" / n).glob("*.pt"))
        }
        # The watchdog kills the interchange, the emulated site's nodes die with their driver.
        assert wait_for(lambda: not runs.processes_of(output, 1), 60), runs.processes_of(output, 1)
    finally:
        runs.kill(runs.processes_of(output, 1))
        if first.poll() is None:
            first.kill()

    second = runs.run(campaign, output)
    assert second.returncode == 0, second.stderr[-4000:]
    table = runs.results(output)
    expected = runs.results(reference)
    assert set(table.index) == set(expected.index)
    assert (table["status"] == "done").all()
    for name in done_before:  # finished before the kill: never run again
        assert table.loc[name, "driver_runs"] == 1 and table.loc[name, "finished_in_run"] == 1
    assert checkpointed and (table.loc[sorted(checkpointed), "finished_in_run"] == 2).all()
    # Every job that had a checkpoint when the driver died resumed from it, not from step 0.
    resumed = table.loc[sorted(checkpointed)]
    assert (resumed["resumed_from_step"] > 0).all(), resumed
    # Same samples, and the accuracy of the run without the kill (resizes change batches).
    assert (table["result.samples_seen"] == expected["result.samples_seen"]).all()
    gap = (table["result.test_accuracy"] - expected["result.test_accuracy"]).abs()
    assert (gap <= 0.02).all(), pd.concat(
        [table["result.test_accuracy"], expected["result.test_accuracy"]], axis=1
    )
    assert (table["result.test_accuracy"] >= 0.95).all()
    # The reports of every epoch survived the kill and the resume: once each, none missing.
    for name in table.index:
        curve = pd.read_csv(output / "metrics" / f"{name}.csv")
        assert curve["epoch"].tolist() == list(range(1, runs.EPOCHS + 1)), (name, curve)


@pytest.mark.slurm
def test_the_same_campaign_runs_on_the_local_slurm_cluster(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    campaign = runs.small_demo(tmp_path, site="local-slurm")
    output = tmp_path / "out"
    env = {**runs.env(), **slurm_cluster.env}
    done = subprocess.run(
        runs.command(campaign, output), env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-4000:]
    table = runs.results(output)
    assert (table["status"] == "done").all() and (table["result.test_accuracy"] >= 0.95).all()

    def blocks_left() -> int:
        out = subprocess.run(
            ["squeue", "-h", "-o", "%j"], env=env, capture_output=True, text=True, timeout=30
        )
        return out.stdout.count("pm-block")

    assert wait_for(lambda: blocks_left() == 0, 60), "blocks outlived the campaign"


def test_sigterm_stops_the_run_cleanly_and_keeps_it_resumable(tmp_path: Path) -> None:
    campaign = runs.small_demo(tmp_path)  # no reference run needed: the file is enough
    output = tmp_path / "out"
    driver = subprocess.Popen(
        runs.command(campaign, output), env=runs.env(), stdout=subprocess.PIPE, text=True
    )
    try:
        assert wait_for(lambda: runs.query(output, "SELECT 1 FROM site_samples"), 120)
        driver.send_signal(signal.SIGTERM)
        out, _ = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 3, out  # stopped early, not finished
    meta = dict(runs.query(output, "SELECT key, value FROM meta"))
    assert meta["run1_outcome"] == "interrupted"
    statuses = {s for (s,) in runs.query(output, "SELECT status FROM jobs")}
    assert statuses <= {"running", "waiting"}  # nothing marked done or failed by the stop
    assert (output / "results.csv").exists()
    # A clean stop cleaned up itself: the watchdog had nothing to do, no process is left.
    assert wait_for(lambda: not runs.processes_of(output, 1), 30), runs.processes_of(output, 1)
    # ... and the driver's lock went with it: status no longer says it runs.
    assert not driver_running(output)
