"""``parsl-malleable retry DIR [JOB...]``: failed (or named) jobs rerun in place.

The fast tests build the folder's state with the real store and run the command in process (no
Parsl); the slow one trains a campaign on the emulated site whose job fails on a bug in the
user's module, fixes the module and retries: the job resumes from its checkpoint to done, the
other job keeps its result.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from parsl_malleable.campaign.driver_lock import DriverLock
from parsl_malleable.campaign.store import CampaignIdentity, CampaignStore
from parsl_malleable.cli import main
from tests.campaign import runs


def _folder(tmp_path: Path, owner: Path | None = None) -> Path:
    """An output folder whose last run left ``a`` done, ``b`` and ``c`` failed, ``b`` with a
    checkpoint; ``owner`` is the campaign file the run claimed it with (run as ``c.yaml`` from
    its folder), else the run recorded a file that is gone."""
    folder = tmp_path / "out"
    store = CampaignStore(folder)
    store.sync_jobs([(n, {"app": "m:f"}, {}) for n in ("a", "b", "c")])
    if owner is not None:
        store.claim(CampaignIdentity.of_file(owner))
    store.begin_run(owner.name if owner else str(tmp_path / "gone.yaml"))
    store.record(10.0, 1, 3600.0, {"b": {"nodes": 2, "world": 2, "step": 4}}, None)
    store.finish("a", 1, result={"acc": 0.9})
    store.finish("b", 1, error="ValueError: bug", warnings=["skipped a damaged checkpoint"])
    store.finish("c", 1, error="ValueError: bug")
    store.close()
    (folder / "checkpoints" / "b").mkdir(parents=True)
    (folder / "checkpoints" / "b" / "step-4.pt").write_bytes(b"x")
    return folder


def _rows(folder: Path) -> dict[str, tuple[str, object, object]]:
    store = CampaignStore(folder, read_only=True)
    try:
        return {r.name: (r.status, r.result, r.error) for r in store.jobs()}
    finally:
        store.close()


def test_mark_waiting_clears_the_end_and_keeps_the_node_hours(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    store = CampaignStore(folder)
    assert store.mark_waiting(["b", "nobody"]) == ["b"]
    (row,) = [r for r in store.jobs() if r.name == "b"]
    store.close()
    assert (row.status, row.error, row.result, row.warnings) == ("waiting", None, None, [])
    assert row.finished_in_run is None and row.finished_at is None
    assert row.node_seconds == pytest.approx(7200.0)  # spent, so still counted


def test_no_run_marks_the_failed_jobs_and_keeps_their_checkpoints(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    out = CliRunner().invoke(main, ["retry", str(folder), "--no-run"])
    assert out.exit_code == 0, out.output
    assert "marked waiting, to train from their checkpoints: b, c" in out.output
    assert f"parsl-malleable run FILE -o {folder}" in out.output  # the recorded file is gone
    rows = _rows(folder)
    assert rows["a"] == ("done", {"acc": 0.9}, None)
    assert rows["b"] == ("waiting", None, None) and rows["c"] == ("waiting", None, None)
    assert (folder / "checkpoints" / "b" / "step-4.pt").is_file()


def test_a_named_done_job_from_scratch_loses_its_checkpoints_only(tmp_path: Path) -> None:
    campaign = tmp_path / "c.yaml"
    campaign.write_text("jobs: []\n")
    folder = _folder(tmp_path, campaign)  # the recorded name is relative, the owner's not
    (folder / "checkpoints" / "a").mkdir()
    out = CliRunner().invoke(main, ["retry", str(folder), "a", "b", "--from-scratch", "--no-run"])
    assert out.exit_code == 0, out.output
    assert "to train from scratch: a, b" in out.output
    assert f"parsl-malleable run {campaign} -o {folder}" in out.output
    rows = _rows(folder)
    assert rows["a"][0] == rows["b"][0] == "waiting" and rows["c"][0] == "failed"
    assert not (folder / "checkpoints" / "a").exists()
    assert not (folder / "checkpoints" / "b").exists()


def test_unknown_job_names_are_listed_and_nothing_changes(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    out = CliRunner().invoke(main, ["retry", str(folder), "b", "x1", "x2", "--no-run"])
    assert out.exit_code == 1
    assert "no job named x1, x2 in this campaign; its jobs are: a, b, c" in out.output
    assert _rows(folder)["b"][0] == "failed"


def test_a_folder_without_a_campaign_is_refused(tmp_path: Path) -> None:
    out = CliRunner().invoke(main, ["retry", str(tmp_path)])
    assert out.exit_code == 1
    assert f"{tmp_path}: no campaign here (no state.sqlite)" in out.output


def test_a_folder_a_driver_runs_into_is_refused(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    with DriverLock(folder):
        out = CliRunner().invoke(main, ["retry", str(folder), "--no-run"])
    assert out.exit_code == 1
    assert "a driver is running into this folder now" in out.output
    assert _rows(folder)["b"][0] == "failed"


def test_a_campaign_file_that_is_gone_needs_campaign(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    out = CliRunner().invoke(main, ["retry", str(folder)])
    assert out.exit_code == 1
    assert "gone.yaml (recorded by its last run) is not there" in out.output
    assert "--campaign FILE" in out.output
    assert _rows(folder)["b"][0] == "failed"  # nothing marked without a campaign to run


def test_nothing_failed_is_nothing_to_retry(tmp_path: Path) -> None:
    folder = tmp_path / "out"
    store = CampaignStore(folder)
    store.sync_jobs([("a", {}, {})])
    store.finish("a", 1, result={})
    store.close()
    out = CliRunner().invoke(main, ["retry", str(folder)])
    assert out.exit_code == 0
    assert "no failed job to retry" in out.output


def test_from_scratch_never_deletes_through_a_checkpoints_link(tmp_path: Path) -> None:
    """``checkpoints`` planted as a link to a folder outside the run: ``--from-scratch`` used to
    rmtree ``checkpoints/b`` there; it now refuses in one line and removes nothing."""
    folder = _folder(tmp_path)
    outside = tmp_path / "outside"
    (outside / "b").mkdir(parents=True)
    (outside / "b" / "keep").write_text("keep")
    shutil.rmtree(folder / "checkpoints")
    (folder / "checkpoints").symlink_to(outside)
    out = CliRunner().invoke(main, ["retry", str(folder), "b", "--from-scratch", "--no-run"])
    assert out.exit_code == 1
    assert f"refusing the checkpoints folder {folder / 'checkpoints'}: it is a symbolic link" in (
        out.output
    )
    assert len(out.output.strip().splitlines()) == 1 and "Traceback" not in out.output
    assert (outside / "b" / "keep").read_text() == "keep"
    assert _rows(folder)["b"][0] == "failed"  # nothing marked either


def test_from_scratch_removes_a_job_link_itself_not_its_target(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("keep")
    (folder / "checkpoints" / "c").symlink_to(outside)
    out = CliRunner().invoke(main, ["retry", str(folder), "c", "--from-scratch", "--no-run"])
    assert out.exit_code == 0, out.output
    assert not (folder / "checkpoints" / "c").is_symlink()
    assert (outside / "keep").read_text() == "keep"


def test_a_folder_others_can_write_is_refused_before_anything_is_read(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    folder.chmod(0o770)
    out = CliRunner().invoke(main, ["retry", str(folder), "--from-scratch", "--no-run"])
    assert out.exit_code == 1
    assert "refusing the output folder" in out.output and "mode is 0770" in out.output
    assert (folder / "checkpoints" / "b" / "step-4.pt").is_file()
    assert _rows(folder)["b"][0] == "failed"


# ------------------------------------------------------------------------------------- live

APP = '''"""The user's training module: a bug fails the checked job at step 3."""

import torch

BUG = True  # the user's fix sets this False


def train(ctx, steps: int = 6, checked: bool = True):
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    state = ctx.state(model, optimizer)

    def loop(state):
        while state.step < steps:
            optimizer.zero_grad()
            model(torch.ones(4, 2)).pow(2).mean().backward()
            ctx.allreduce_gradients(model)
            optimizer.step()
            state.commit()
            if BUG and checked and state.step >= 3:
                raise ValueError(f"bug at step {state.step}")
        return {"steps": state.step}

    return ctx.run(loop, state)
'''


def _campaign(tmp_path: Path) -> Path:
    # The user's own module beside the campaign (a ``tests`` package elsewhere on sys.path may
    # shadow this repository's).
    (tmp_path / "buggy_app.py").write_text(APP)
    campaign = tmp_path / "retry.yaml"
    job = {"app": "buggy_app:train", "max_nodes": 1, "checkpoint_every": 1}
    campaign.write_text(
        yaml.safe_dump(
            {
                "site": "emulated",
                "python_path": [str(tmp_path)],
                "time_limit_s": 300,
                "jobs": [
                    {"name": "flaky", **job},
                    {"name": "steady", **job, "args": {"checked": False}},
                ],
            }
        )
    )
    return campaign


@pytest.mark.slow
def test_a_failed_job_is_retried_in_place_to_done(tmp_path: Path) -> None:
    campaign = _campaign(tmp_path)
    output = tmp_path / "out"
    first = runs.run(campaign, output)
    assert first.returncode == 1, first.stderr[-3000:]
    said = " ".join(first.stderr.split())  # the terminal's lines wrap
    assert f"`parsl-malleable retry {output}` reruns the failed jobs" in said
    table = runs.results(output)
    assert table.loc["flaky", "status"] == "failed", table.T
    assert "bug at step 3" in str(table.loc["flaky", "error"])
    assert table.loc["steady", "status"] == "done"
    steady_end = table.loc["steady", "time_to_result_s"]

    # The user fixes the bug in their module, then retries: no campaign file to name.
    (tmp_path / "buggy_app.py").write_text(APP.replace("BUG = True", "BUG = False"))
    retried = subprocess.run(
        [sys.executable, "-m", "parsl_malleable", "retry", str(output), "--quiet"],
        env=runs.env(),
        capture_output=True,
        text=True,
        timeout=480,
    )
    assert retried.returncode == 0, retried.stderr[-3000:]
    assert "retrying 1 job(s) from their checkpoints: flaky" in " ".join(retried.stderr.split())
    table = runs.results(output)
    flaky, steady = table.loc["flaky"], table.loc["steady"]
    assert flaky["status"] == "done" and flaky["result.steps"] == 6, table.T
    assert flaky.isna()["error"]
    # It resumed from a checkpoint of the failed run (one per commit; the last may not have
    # been written before the rank raised), not from step 0.
    assert 1 <= flaky["resumed_from_step"] <= 3, table.T
    # Said on the terminal, not in campaign.log only.
    step = int(flaky["resumed_from_step"])
    said = " ".join(retried.stderr.split())
    assert f"job flaky resumes from its checkpoint at step {step}" in said, retried.stderr[-3000:]
    assert (flaky["driver_runs"], flaky["finished_in_run"]) == (2, 2)
    # The other job was not run again: its result, run and time to result are the first run's.
    assert steady["status"] == "done" and steady["result.steps"] == 6
    assert (steady["driver_runs"], steady["finished_in_run"]) == (1, 1)
    assert steady["time_to_result_s"] == steady_end
    status = CliRunner().invoke(main, ["status", str(output), "--json"])
    assert [j["status"] for j in json.loads(status.output)["jobs"]] == ["done", "done"]
