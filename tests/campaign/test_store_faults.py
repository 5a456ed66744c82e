"""Faults of a campaign's state store (``state.sqlite``): a full disk mid-run, a read-only
folder, a truncated or garbled file. Each is one line naming the file, what is intact (the
checkpoints are not in the database) and how to recover; ``run`` and ``status`` print it and
exit 1, without a traceback; the documented recovery resumes the jobs from their checkpoints.

A full disk is a small tmpfs, which needs root (CI runs the tests as root); without it those
tests are skipped, saying so.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from parsl_malleable.campaign.store import CampaignIdentity, CampaignStore
from parsl_malleable.cli import main
from parsl_malleable.errors import StateStoreError
from tests.campaign import runs
from tests.provider.conftest import wait_for

RERUN = "rerun the same command: each job resumes from its last checkpoint"


def full_message(folder: Path) -> str:
    return (
        f"{folder}/state.sqlite: cannot write the campaign state: the disk is full; the state "
        f"as of its last sample and the checkpoints in {folder}/checkpoints/ are intact. Free "
        f"space on that disk and {RERUN}"
    )


def damaged_message(folder: Path, detail: str) -> str:
    path = folder / "state.sqlite"
    return (
        f"{path} is damaged ({detail}); the checkpoints in {folder}/checkpoints/ are not in it "
        f"and are intact. To recover, move it and its -wal/-shm files aside (mkdir "
        f"{folder}/damaged && mv {path}* {folder}/damaged/) and {RERUN}"
    )


def read_only_message(folder: Path) -> str:
    return (
        f"{folder}/state.sqlite: cannot write the campaign state: its folder {folder} is "
        f"read-only; it and the checkpoints in {folder}/checkpoints/ are as the last run left "
        f"them. Make {folder} writable (or run into another folder with -o DIR) and {RERUN}"
    )


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted on ``path`` (skips the test where that is not allowed)."""
    if os.geteuid() != 0:
        pytest.skip("a small full disk is a tmpfs, and mounting one needs root (CI is root)")
    path.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


def fill(disk: Path) -> Path:
    """Fill ``disk`` to the last byte; the file that fills it."""
    filler = disk / "filler"
    try:
        with open(filler, "wb") as out:
            while True:
                out.write(b"\0" * 65536)
                out.flush()
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
    return filler


def sample(step: int) -> dict[str, Any]:
    return {"nodes": 1, "world": 1, "rate": 10.0, "node_names": ["n1"], "step": step}


def filled_store(folder: Path, samples: int = 2000) -> None:
    """A closed store with one job and ``samples`` samples (several pages of SQLite)."""
    store = CampaignStore(folder)
    try:
        store.sync_jobs([("a", {"app": "m:f"}, {})])
        run = store.begin_run("c.yaml")
        for t in range(samples):
            store.record(float(t), run, 1.0, {"a": sample(t)}, None)
        store.end_run(run, "interrupted")
    finally:
        store.close()


def test_a_full_disk_mid_run_is_one_line_and_the_state_stays_intact(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "disk", "1m") as disk:
        folder = disk / "out"
        store = CampaignStore(folder)
        store.sync_jobs([("a", {"app": "m:f"}, {})])
        run = store.begin_run("c.yaml")
        for t in range(5):
            store.record(float(t), run, 1.0, {"a": sample(t)}, None)
        filler = fill(disk)
        with pytest.raises(StateStoreError) as err:
            for t in range(5, 100_000):
                store.record(float(t), run, 1.0, {"a": sample(t)}, None)
        assert str(err.value) == full_message(folder)
        assert err.value.path == str(folder / "state.sqlite")
        store.close()
        # Free space: the state is as its last commit left it, and takes samples again.
        filler.unlink()
        again = CampaignStore(folder)
        try:
            steps = [s for (s,) in again.db.execute("SELECT step FROM job_samples")]
            assert steps[:5] == [0, 1, 2, 3, 4] and steps == list(range(len(steps)))
            again.record(1e6, run, 1.0, {"a": sample(10**6)}, None)
            assert again.progress()["a"].step == 10**6
        finally:
            again.close()


@pytest.mark.parametrize(
    ("kind", "detail"),
    [
        ("truncated", "database disk image is malformed"),
        ("garbled header", "file is not a database"),
        ("garbled pages", None),  # the integrity check's first finding
    ],
)
def test_a_damaged_state_is_one_line_from_the_store_status_and_run(
    tmp_path: Path, kind: str, detail: str | None
) -> None:
    folder = tmp_path / "out"
    filled_store(folder)
    path = folder / "state.sqlite"
    data = bytearray(path.read_bytes())
    assert len(data) > 16 * 4096 and not path.with_name("state.sqlite-wal").exists()
    if kind == "truncated":
        del data[len(data) // 2 :]
    elif kind == "garbled header":
        data[:100] = b"x" * 100
    else:
        for i in range(2 * 4096, len(data), 97):
            data[i] = (data[i] * 7 + 13) % 256
    path.write_bytes(bytes(data))

    def expected(text: str) -> None:
        if detail is not None:
            assert text == damaged_message(folder, detail)
        else:
            pattern = re.escape(damaged_message(folder, "DETAIL")).replace(
                "DETAIL", r"integrity check: [^;]+"
            )
            assert re.fullmatch(pattern, text), text

    for read_only in (True, False):
        with pytest.raises(StateStoreError) as err:
            CampaignStore(folder, read_only=read_only)
        expected(str(err.value))
    status = CliRunner().invoke(main, ["status", str(folder)])
    assert status.exit_code == 1 and status.output.startswith("Error: "), status.output
    expected(status.output.removeprefix("Error: ").rstrip("\n"))
    campaign = tmp_path / "c.yaml"
    campaign.write_text(
        yaml.safe_dump({"site": "emulated", "jobs": [{"name": "a", "app": "os.path:join"}]})
    )
    ran = CliRunner().invoke(main, ["run", str(campaign), "-o", str(folder), "--quiet"])
    assert ran.exit_code == 1 and ran.output.startswith("Error: "), ran.output
    expected(ran.output.removeprefix("Error: ").rstrip("\n"))
    assert path.read_bytes() == bytes(data)  # refused before anything was written


@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[None]:
    """``folder`` read-only for this user: a read-only remount of its tmpfs as root (root
    writes through a folder's mode), its mode otherwise."""
    if os.geteuid() == 0:
        subprocess.run(["mount", "-o", "remount,ro", str(folder.parent)], check=True, timeout=30)
        yield
    else:
        folder.chmod(0o500)
        try:
            yield
        finally:
            folder.chmod(0o700)


def test_a_read_only_folder_is_one_line_from_run_and_status_still_reads_it(
    tmp_path: Path,
) -> None:
    campaign = tmp_path / "c.yaml"
    campaign.write_text(
        yaml.safe_dump(
            {
                "site": "emulated",
                "python_path": [str(runs.REPO)],
                "jobs": [{"name": "a", "app": "apps.digits:train_elastic", "epochs": 1}],
            }
        )
    )
    disk = tmp_path / "disk"
    context = tmpfs(disk, "4m") if os.geteuid() == 0 else contextlib.nullcontext(disk)
    with context:
        disk.mkdir(exist_ok=True)
        folder = disk / "out"
        folder.mkdir(mode=0o700)
        store = CampaignStore(folder)
        try:
            store.claim(CampaignIdentity.of_file(campaign))
            run = store.begin_run(str(campaign))
            store.sync_jobs([("a", {"app": "apps.digits:train_elastic"}, {})])
            store.end_run(run, "interrupted")
        finally:
            store.close()
        with read_only(folder):
            with pytest.raises(StateStoreError) as err:
                CampaignStore(folder)
            assert str(err.value) == read_only_message(folder)
            status = CliRunner().invoke(main, ["status", str(folder), "--json"])
            assert status.exit_code == 0, status.output
            assert '"status": "waiting"' in status.output
            ran = runs.run(campaign, folder, timeout_s=300)
            assert ran.returncode == 1, ran.stderr[-3000:]
            assert ran.stderr.splitlines()[-1] == f"Error: {read_only_message(folder)}"
            assert "Traceback" not in ran.stderr


@pytest.mark.slow
def test_a_run_that_fills_its_disk_ends_with_one_line_and_the_documented_recovery_resumes(
    tmp_path: Path,
) -> None:
    campaign = tmp_path / "c.yaml"
    job = {
        "name": "one",
        "app": "apps.digits:train_elastic",
        "epochs": 2,
        "max_nodes": 2,
        "checkpoint_every": 5,
        "args": {"step_delay_s": 0.05},
    }
    campaign.write_text(
        yaml.safe_dump({"site": "emulated", "python_path": [str(runs.REPO)], "jobs": [job]})
    )
    with tmpfs(tmp_path / "disk", "64m") as disk:
        output = disk / "out"
        driver = subprocess.Popen(
            runs.command(campaign, output),
            env=runs.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:

            def checkpointed() -> bool:
                return bool(
                    list((output / "checkpoints" / "one").glob("*.pt"))
                    and runs.query(output, "SELECT 1 FROM job_samples WHERE step > 0")
                )

            assert wait_for(checkpointed, 300), runs.query(output, "SELECT * FROM jobs")
            filler = fill(disk)
            _, err = driver.communicate(timeout=180)
        finally:
            if driver.poll() is None:
                driver.kill()
            runs.kill(runs.processes_of(output, 1))
        assert driver.returncode == 1, err[-4000:]
        assert err.splitlines()[-1] == f"Error: {full_message(output)}", err[-4000:]
        assert "Traceback" not in err, err[-4000:]
        # The run's finally clauses released everything: nothing of it is left running.
        assert wait_for(lambda: not runs.processes_of(output, 1), 60), runs.processes_of(output, 1)

        # The state was damaged while the disk was full (say, by another program): run and
        # status say so, and the documented recovery resumes the job from its checkpoint.
        filler.unlink()
        state = output / "state.sqlite"
        db = sqlite3.connect(state)  # its last commits into the file itself, then the damage
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.close()
        state.write_bytes(b"x" * 100 + state.read_bytes()[100:])  # its header garbled
        status = [sys.executable, "-m", "parsl_malleable", "status", str(output)]
        for argv in (runs.command(campaign, output), status):
            said = subprocess.run(argv, env=runs.env(), capture_output=True, text=True, timeout=300)
            assert said.returncode == 1, said.stderr[-3000:]
            assert said.stderr.splitlines()[-1] == (
                f"Error: {damaged_message(output, 'file is not a database')}"
            )
            assert "Traceback" not in said.stderr
        aside = output / "damaged"
        aside.mkdir()
        for part in output.glob("state.sqlite*"):
            part.rename(aside / part.name)
        rerun = runs.run(campaign, output, timeout_s=400)
        assert rerun.returncode == 0, rerun.stderr[-4000:]
        (row,) = runs.query(output, "SELECT status, resumed_from_step FROM jobs")
        assert row[0] == "done" and row[1] is not None and row[1] > 0, row
