"""An output folder belongs to one campaign: another campaign is refused before anything
starts (unless the user adopts the folder), the same campaign resumes there, edited or not.

The first campaign's folder is made the way a run makes it (claim, begin_run, its jobs
finished), so that a rerun has nothing to train: the command then goes its whole way (folder
check, state, results) in seconds, without Parsl.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from parsl_malleable.campaign.folder_owner import owner_note
from parsl_malleable.campaign.runner import CampaignRunner
from parsl_malleable.campaign.spec import load_campaign, parse_campaign
from parsl_malleable.campaign.store import CampaignIdentity, CampaignStore, FolderOwnedError
from parsl_malleable.cli import main
from tests.campaign import runs

REPO = runs.REPO
APP = "apps.digits:train_elastic"


def campaign_file(path: Path, jobs: list[str], *, epochs: int = 1, note: str = "") -> Path:
    """A campaign of digits jobs named ``jobs``; ``time_limit_s`` keeps a run that should have
    been refused short (it would train otherwise)."""
    data = {
        "site": "emulated",
        "python_path": [str(REPO)],
        "time_limit_s": 5,
        "jobs": [{"name": n, "app": APP, "epochs": epochs} for n in jobs],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# {note}\n" + yaml.safe_dump(data))
    return path


def finished_folder(campaign: Path, folder: Path) -> None:
    """``folder`` as a run of ``campaign`` leaves it when every job finished."""
    store = CampaignStore(folder)
    try:
        assert store.claim(CampaignIdentity.of_file(campaign)) is None
        run = store.begin_run(str(campaign))
        jobs = load_campaign(campaign).expanded()
        store.sync_jobs((job.name, job.model_dump(), params) for job, params in jobs)
        for job, _ in jobs:
            store.mark_submitted(job.name, None)
            store.finish(job.name, run, result={"test_accuracy": 0.97})
        store.end_run(run, "finished")
    finally:
        store.close()


def state(folder: Path) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """The folder's meta table and ``(job, status)`` rows."""
    db = sqlite3.connect(f"file:{folder / 'state.sqlite'}?mode=ro", uri=True)
    try:
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
        jobs = db.execute("SELECT name, status FROM jobs ORDER BY rowid").fetchall()
    finally:
        db.close()
    return meta, jobs


def run_command(campaign: Path, folder: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """``parsl-malleable run`` in a process of its own (it installs signal and log handlers)."""
    return subprocess.run(
        runs.command(campaign, folder, *extra),
        env=runs.env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_another_campaign_is_refused_naming_both_campaigns_and_the_folder(
    tmp_path: Path,
) -> None:
    demo = campaign_file(tmp_path / "demo.yaml", ["a", "b"])
    other = campaign_file(tmp_path / "other.yaml", ["x"])
    folder = tmp_path / "out"
    finished_folder(demo, folder)
    before = state(folder)
    result = CliRunner().invoke(main, ["run", str(other), "-o", str(folder), "--quiet"])
    assert result.exit_code == 1, result.output
    text = " ".join(result.output.split())
    assert f"output folder {folder} belongs to campaign 'demo' ({demo.resolve()}" in text
    assert f"refusing to run campaign 'other' ({other.resolve()}" in text
    assert "--adopt-folder" in text
    # Refused before anything was written: same runs, same jobs, no log of the other.
    assert state(folder) == before
    assert not (folder / "campaign.log").exists()


def test_the_same_name_from_another_file_with_other_content_is_refused(tmp_path: Path) -> None:
    demo = campaign_file(tmp_path / "configs" / "demo.yaml", ["a"])
    namesake = campaign_file(tmp_path / "experiments" / "demo.yaml", ["z"])
    folder = tmp_path / "out"
    finished_folder(demo, folder)
    runner_error = pytest.raises(FolderOwnedError, match=r"belongs to campaign 'demo'")
    with runner_error as caught:
        CampaignRunner(load_campaign(namesake), folder, source=str(namesake))
    assert str(namesake.resolve()) in str(caught.value) and str(demo.resolve()) in str(caught.value)


def test_adopt_folder_takes_the_folder_and_keeps_the_other_campaigns_jobs(tmp_path: Path) -> None:
    demo = campaign_file(tmp_path / "demo.yaml", ["a", "b"])
    # Another file, other content (its jobs happen to be done there: nothing to train).
    other = campaign_file(tmp_path / "other.yaml", ["a"], epochs=2)
    folder = tmp_path / "out"
    finished_folder(demo, folder)
    refused = run_command(other, folder)
    assert refused.returncode == 1 and "belongs to campaign 'demo'" in refused.stderr
    done = run_command(other, folder, "--adopt-folder")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "adopts output folder" in done.stderr
    said = f"nothing to run: the 1 job is already done; the results are in {folder}"
    assert "".join(said.split()) in "".join(done.stderr.split())  # rich wraps long lines
    meta, jobs = state(folder)
    assert meta["owner_name"] == "other"
    assert meta["owner_sha256"] == CampaignIdentity.of_file(other).sha256
    assert meta["runs"] == "2" and meta["run2_outcome"] == "nothing to do"
    assert jobs == [("a", "done"), ("b", "done")]  # demo's b is kept, and listed
    assert (folder / "results.csv").exists()
    # Adopted: the folder is other's now; demo is the foreign one.
    with pytest.raises(FolderOwnedError, match=r"belongs to campaign 'other'"):
        CampaignRunner(load_campaign(demo), folder, source=str(demo))
    CampaignRunner(load_campaign(demo), folder, source=str(demo), adopt_folder=True)


def test_the_same_campaign_resumes_and_an_edited_file_is_noted_and_recorded(
    tmp_path: Path,
) -> None:
    demo = campaign_file(tmp_path / "demo.yaml", ["a", "b"])
    folder = tmp_path / "out"
    finished_folder(demo, folder)
    again = run_command(demo, folder)
    assert again.returncode == 0, again.stderr[-3000:]
    said = f"nothing to run: all 2 jobs are already done; the results are in {folder}"
    assert "".join(said.split()) in "".join(again.stderr.split())  # rich wraps long lines
    assert "edited" not in again.stderr and "wrote" in again.stderr
    meta, _ = state(folder)
    assert meta["runs"] == "2" and meta["owner_name"] == "demo"
    assert meta["owner_file"] == str(demo.resolve())
    first_hash = meta["owner_sha256"]
    # The user edits the file between reruns: a resume, said on the terminal and in the log.
    campaign_file(demo, ["a", "b"], epochs=2, note="longer")
    edited = run_command(demo, folder)
    assert edited.returncode == 0, edited.stderr[-3000:]
    assert f"campaign file {demo.resolve()} was edited since the last run" in edited.stderr
    assert "finished jobs keep their results" in edited.stderr
    meta, jobs = state(folder)
    assert meta["runs"] == "3" and jobs == [("a", "done"), ("b", "done")]
    assert meta["owner_sha256"] == CampaignIdentity.of_file(demo).sha256 != first_hash
    assert "was edited since the last run" in (folder / "campaign.log").read_text()
    status = CliRunner().invoke(main, ["status", str(folder), "--json"])
    assert status.exit_code == 0, status.output
    shown = json.loads(status.output)
    assert (shown["campaign"], shown["campaign_sha256"]) == ("demo", meta["owner_sha256"])
    assert (folder / "state.sqlite").stat().st_mode & 0o077 == 0


def test_a_renamed_unedited_file_is_the_same_campaign(tmp_path: Path) -> None:
    demo = campaign_file(tmp_path / "demo.yaml", ["a"])
    folder = tmp_path / "out"
    finished_folder(demo, folder)
    renamed = tmp_path / "demo-v1.yaml"
    renamed.write_bytes(demo.read_bytes())
    store = CampaignStore(folder)
    try:
        note = store.claim(CampaignIdentity.of_file(renamed))
    finally:
        store.close()
    assert note is not None and not note.notable and "renamed or moved" in str(note)


def test_a_folder_from_before_owners_is_claimed_by_its_campaign_only(tmp_path: Path) -> None:
    demo = campaign_file(tmp_path / "demo.yaml", ["a"])
    other = campaign_file(tmp_path / "other.yaml", ["x"])
    folder = tmp_path / "out"
    old = CampaignStore(folder)  # what an earlier version left: runs, no owner
    old.begin_run(str(demo))
    old.close()
    with pytest.raises(FolderOwnedError, match=r"belongs to campaign 'demo'"):
        CampaignRunner(load_campaign(other), folder, source=str(other))
    store = CampaignStore(folder)
    try:
        note = store.claim(CampaignIdentity.of_file(demo))
        assert note is not None and "before folders recorded their campaign" in str(note)
        assert store.owner() == CampaignIdentity.of_file(demo)
    finally:
        store.close()


def test_a_campaign_without_a_file_owns_the_folder_by_its_content(tmp_path: Path) -> None:
    data = {"site": "emulated", "jobs": [{"name": "a", "app": "m:f"}]}
    folder = tmp_path / "out"
    store = CampaignStore(folder)
    first = CampaignRunner(parse_campaign(data), folder).identity
    store.claim(first)
    store.close()
    CampaignRunner(parse_campaign(data), folder)  # the same content: accepted
    changed = {**data, "jobs": [{"name": "b", "app": "m:f"}]}
    with pytest.raises(FolderOwnedError, match="'<campaign>'"):
        CampaignRunner(parse_campaign(changed), folder)


def test_the_owner_rule_alone_accepts_moves_and_edits_and_refuses_strangers(tmp_path: Path) -> None:
    """``owner_note`` without a store: each case of its rule, on identities made by hand."""
    owner = CampaignIdentity("demo", "a" * 64, "/x/demo.yaml")
    assert owner_note(tmp_path, None, None, owner, adopt=False) is None  # a fresh folder
    assert owner_note(tmp_path, owner, None, owner, adopt=False) is None
    moved = CampaignIdentity("renamed", "a" * 64, "/y/renamed.yaml")
    note = owner_note(tmp_path, owner, None, moved, adopt=False)
    assert note is not None and "renamed or moved" in str(note) and not note.notable
    edited = CampaignIdentity("demo", "b" * 64, "/x/demo.yaml")
    note = owner_note(tmp_path, owner, None, edited, adopt=False)
    assert note is not None and note.notable and "was edited" in str(note)
    stranger = CampaignIdentity("demo", "c" * 64, "/z/demo.yaml")
    with pytest.raises(FolderOwnedError, match="belongs to campaign 'demo'"):
        owner_note(tmp_path, owner, None, stranger, adopt=False)
    note = owner_note(tmp_path, owner, None, stranger, adopt=True)
    assert note is not None and note.notable and "adopts" in str(note)
    # Written before owners were recorded: the last run's file name decides.
    assert "before folders" in str(owner_note(tmp_path, None, "/x/demo.yaml", owner, False))
    with pytest.raises(FolderOwnedError, match="'other'"):
        owner_note(tmp_path, None, "/x/other.yaml", owner, adopt=False)
