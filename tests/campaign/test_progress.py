"""The progress column (steps done / total, ETA) of the live view and ``status``."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from rich.console import Console

from parsl_malleable.campaign.display import progress_text, status_table
from parsl_malleable.campaign.store import CampaignStore
from parsl_malleable.cli import main

NODES = {"nodes": 2, "world": 2, "rate": 50.0, "node_names": ["n1", "n2"]}


def training(tmp_path: Path) -> CampaignStore:
    """Job a (200 steps in all) trains at 5 steps/s in run 2 after a resume from step 40;
    job b has no total; job c is done; job d has not committed a step yet."""
    store = CampaignStore(tmp_path)
    store.begin_run("c.yaml", now=0.0)
    store.sync_jobs(
        [
            ("a", {"app": "m:f", "total_steps": 200}, {}),
            ("b", {"app": "m:f"}, {}),
            ("c", {"app": "m:f", "total_steps": 10}, {}),
            ("d", {"app": "m:f", "total_steps": 10}, {}),
        ]
    )
    for name in "abcd":
        store.mark_submitted(name, None)
    for t in range(20):  # run 1: 2 steps/s, up to step 38; then the driver dies
        store.record(float(t), 1, 1.0, {"a": {**NODES, "step": 2 * t}}, None)
    store.begin_run("c.yaml", now=100.0)
    for t in range(100, 111):  # run 2 resumed at 40: 5 steps/s
        store.record(
            float(t),
            2,
            1.0,
            {
                "a": {**NODES, "step": 40 + 5 * (t - 100)},
                "b": {**NODES, "step": 3 * (t - 100)},
                "d": {**NODES, "step": -1},
            },
            None,
        )
    store.finish("c", 2, result={"steps": 10, "test_accuracy": 0.9})
    return store


def test_progress_uses_the_latest_run_and_its_recent_rate(tmp_path: Path) -> None:
    store = training(tmp_path)
    progress = store.progress()
    assert progress["a"].step == 90 and progress["a"].steps_per_s == 5.0
    assert progress["a"].eta_s(200) == 22.0  # 110 steps left at 5/s
    assert progress["b"].step == 30 and progress["b"].steps_per_s == 3.0
    assert "d" not in progress  # no committed step yet
    rows = {r.name: r for r in store.jobs()}
    assert progress_text(rows["a"], progress["a"]) == "90/200 (45%) ETA 22 s"
    assert progress_text(rows["b"], progress["b"]) == "step 30, 3.0/s"
    assert progress_text(rows["c"], progress.get("c")) == "10 steps"
    assert progress_text(rows["d"], progress.get("d")) == "-"
    console = Console(record=True, width=200)
    console.print(status_table(store.jobs(), {"runs": "2", "state": "running now"}, progress))
    assert "90/200 (45%) ETA 22 s" in console.export_text()
    store.close()


def test_status_json_has_step_total_and_eta(tmp_path: Path) -> None:
    training(tmp_path).close()
    out = CliRunner().invoke(main, ["status", str(tmp_path), "--json"])
    assert out.exit_code == 0, out.output
    jobs = {j["name"]: j for j in json.loads(out.output)["jobs"]}
    assert (jobs["a"]["step"], jobs["a"]["total_steps"], jobs["a"]["eta_s"]) == (90, 200, 22.0)
    assert jobs["b"]["eta_s"] is None and jobs["c"]["eta_s"] is None


def test_a_store_from_before_steps_were_sampled_shows_no_progress(tmp_path: Path) -> None:
    import sqlite3

    store = CampaignStore(tmp_path)
    store.close()
    db = sqlite3.connect(tmp_path / CampaignStore.FILE)
    db.execute("ALTER TABLE job_samples DROP COLUMN step")
    db.commit()
    db.close()
    old = CampaignStore(tmp_path, read_only=True)
    assert old.progress() == {}  # no error: the column is missing
    old.close()
    CampaignStore(tmp_path).close()  # a writer adds the column
    db = sqlite3.connect(tmp_path / CampaignStore.FILE)
    assert "step" in {row[1] for row in db.execute("PRAGMA table_info(job_samples)")}
    db.close()
