"""The campaign's SQLite state and the results built from it (no Parsl: fast)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from parsl_malleable.campaign.results import (
    assigned_fraction,
    harvest_fraction,
    results_frame,
    training_fraction,
    write_results,
)
from parsl_malleable.campaign.sample import job_sample, site_counts
from parsl_malleable.campaign.store import CampaignStore
from parsl_malleable.snapshot import Node, NodeState, RunningJob, Snapshot


def test_jobs_are_inserted_once_and_a_changed_spec_is_reported(tmp_path: Path) -> None:
    store = CampaignStore(tmp_path)
    assert store.sync_jobs([("a", {"lr": 1}, {}), ("b", {"lr": 2}, {"lr": 2})]) == []
    store.finish("a", 1, result={"acc": 0.97})
    # A second run with b's spec changed: a keeps its result, b is reported, nothing is reset.
    assert store.sync_jobs([("a", {"lr": 1}, {}), ("b", {"lr": 3}, {"lr": 3})]) == ["b"]
    rows = {r.name: r for r in store.jobs()}
    assert rows["a"].status == "done" and rows["a"].result == {"acc": 0.97}
    assert rows["b"].status == "waiting" and rows["b"].spec == {"lr": 2}
    assert (tmp_path / "state.sqlite").stat().st_mode & 0o077 == 0


def test_samples_accumulate_node_seconds_rescales_and_first_start(tmp_path: Path) -> None:
    store = CampaignStore(tmp_path)
    store.sync_jobs([("a", {}, {})])
    run = store.begin_run("c.yaml", now=100.0)
    waiting = {"nodes": 0, "world": 0, "node_names": []}
    training = {"nodes": 2, "world": 2, "node_names": ["n1", "n2"], "new_rescales": 1}
    store.record(101.0, run, 1.0, {"a": waiting}, None)
    store.record(
        102.0,
        run,
        1.0,
        {"a": training},
        {"total": 4, "native": 1, "harvested": 2, "assigned": 2, "idle": 1},
    )
    store.record(104.0, run, 2.0, {"a": {**training, "new_rescales": 0}}, None)
    row = store.jobs()[0]
    assert row.node_seconds == pytest.approx(6.0)
    assert row.rescales == 1 and row.first_start == 102.0
    store.mark_submitted("a", resumed_from_step=40)
    store.mark_submitted("a", resumed_from_step=None)  # a later run with no newer checkpoint
    row = store.jobs()[0]
    assert row.submissions == 2 and row.resumed_from_step == 40


def test_harvest_fraction_skips_the_gap_between_runs(tmp_path: Path) -> None:
    store = CampaignStore(tmp_path)
    site = {"total": 4, "native": 0, "assigned": 0}
    for t, run, harvested, idle in [(0, 1, 3, 1), (10, 1, 3, 1), (1000, 2, 0, 4), (1010, 2, 0, 4)]:
        store.record(t, run, 1.0, {}, {**site, "harvested": harvested, "idle": idle})
    # run 1: 30 harvested, 10 idle node-s; run 2: 40 idle; the 990 s between runs count for none
    assert harvest_fraction(store) == pytest.approx(30 / 80)


def test_assigned_fraction_counts_harvested_node_time_given_to_jobs(tmp_path: Path) -> None:
    store = CampaignStore(tmp_path)
    assert assigned_fraction(store) is None and training_fraction(store) is None
    rows = [(0, 1, 3, 2), (10, 1, 3, 3), (20, 1, 3, 3), (1000, 2, 2, 0), (1010, 2, 2, 0)]
    for t, run, harvested, assigned in rows:
        site = {"total": 4, "native": 0, "idle": 4 - harvested}
        store.record(t, run, 1.0, {}, {**site, "harvested": harvested, "assigned": assigned})
    # run 1: 60 harvested node-s, 20 + 30 given to jobs; run 2: 20 harvested, none given
    assert assigned_fraction(store) == pytest.approx(50 / 80)
    # No sample counted steps: the training fraction is not known, not taken from assigned.
    assert training_fraction(store) is None


def test_a_mapping_that_names_assigned_training_is_still_taken(tmp_path: Path) -> None:
    store = CampaignStore(tmp_path)
    site = {"total": 4, "native": 0, "harvested": 3, "training": 2, "idle": 1}
    store.record(0.0, 1, 1.0, {}, site)
    assert store.site_samples() == [(0.0, 1, 4, 0, 3, 2, 1, None)]


def old_site_samples(folder: Path) -> None:
    """A state file as versions before step counting wrote it: site_samples without
    ``stepping_s``, two samples of run 1."""
    import sqlite3

    old = sqlite3.connect(folder / CampaignStore.FILE)
    old.execute(
        "CREATE TABLE site_samples (t REAL NOT NULL, run INTEGER NOT NULL, total INTEGER NOT"
        " NULL, native INTEGER NOT NULL, harvested INTEGER NOT NULL, training INTEGER NOT NULL,"
        " idle INTEGER NOT NULL)"
    )
    old.executemany(
        "INSERT INTO site_samples VALUES (?, 1, 4, 0, 3, 3, 1)", [(0.0,), (10.0,), (20.0,)]
    )
    old.commit()
    old.close()


def test_a_store_from_before_steps_were_counted_says_it_does_not_know(tmp_path: Path) -> None:
    import sqlite3

    old_site_samples(tmp_path)
    # Read-only (status on an old folder): nothing migrated, the figure read as unknown.
    reader = CampaignStore(tmp_path, read_only=True)
    assert [row[7] for row in reader.site_samples()] == [None, None, None]
    assert training_fraction(reader) is None and assigned_fraction(reader) == 1.0
    assert reader.node_startups() == []
    reader.close()
    # Opened to write (a resume): the column is added, the old rows stay NULL.
    store = CampaignStore(tmp_path)
    columns = {row[1] for row in store.db.execute("PRAGMA table_info(site_samples)")}
    assert "stepping_s" in columns
    assert [row[7] for row in store.site_samples()] == [None, None, None]
    assert training_fraction(store) is None
    # Run 2 counts steps: the fraction is of its intervals only, the old ones named apart.
    site = {"total": 4, "native": 0, "harvested": 2, "assigned": 2, "idle": 2}
    store.record(100.0, 2, 1.0, {}, {**site, "stepping_s": 0.0})
    store.record(110.0, 2, 10.0, {}, {**site, "stepping_s": 15.0})
    assert training_fraction(store) == pytest.approx(15 / 20)
    store.close()
    db = sqlite3.connect(tmp_path / CampaignStore.FILE)
    stored = db.execute("SELECT t, stepping_s FROM site_samples ORDER BY t").fetchall()
    db.close()
    assert stored == [(0.0, None), (10.0, None), (20.0, None), (100.0, 0.0), (110.0, 15.0)]


def test_results_table_and_pictures(tmp_path: Path) -> None:
    store = CampaignStore(tmp_path)
    store.begin_run("c.yaml", now=0.0)
    store.sync_jobs([("a", {"app": "m:f", "max_nodes": 2}, {"lr": 0.1}), ("b", {"app": "m:f"}, {})])
    store.record(
        1.0,
        1,
        1.0,
        {"a": {"nodes": 1, "world": 1, "node_names": ["n1"]}},
        {"total": 2, "native": 1, "harvested": 1, "assigned": 1, "idle": 0},
    )
    store.finish("a", 1, result={"test_accuracy": 0.96, "steps": 10})
    store.finish("b", 1, error="ValueError: boom")
    frame = results_frame(store)
    assert list(frame["job"]) == ["a", "b"]
    assert frame.loc[0, "param.lr"] == 0.1 and frame.loc[0, "result.test_accuracy"] == 0.96
    assert (
        list(frame["status"]) == ["done", "failed"] and frame.loc[1, "error"] == "ValueError: boom"
    )
    written = write_results(store, tmp_path)
    assert {p.name for p in written} == {
        "results.csv",
        "results.parquet",
        "gantt.png",
        "nodes.png",
        "startup.csv",
    }
    assert all(p.stat().st_size > 0 for p in written)
    # No node reached a step: the start-up table is there, with its columns and no row.
    startup = pd.read_csv(tmp_path / "startup.csv")
    assert startup.empty and "idle_to_first_step_s" in startup.columns


def test_site_counts_and_job_sample() -> None:
    snap = Snapshot(
        now=0.0,
        nodes=[Node(f"n{i}", NodeState.ALLOCATED if i < 3 else NodeState.IDLE) for i in range(5)],
        running=[
            RunningJob("1", ("n0",), 0.0, 60.0),
            RunningJob("2", ("n1", "n2"), 0.0, 60.0, ours=True),
        ],
    )
    counts = site_counts(snap, assigned=1)
    assert counts is not None and counts.stepping is None  # steps not counted: none said
    assert (counts.total, counts.native, counts.harvested, counts.assigned, counts.idle) == (
        5,
        1,
        2,
        1,
        2,
    )
    assert site_counts(None, 0) is None
    counted = site_counts(snap, assigned=2, stepping_s=3.0, interval_s=2.0)
    assert counted is not None and counted.stepping == 1.5 and counted.stepping_s == 3.0
    epochs = [{"world_size": 2}, {"world_size": 2}, {"world_size": 3}, {"world_size": 1}]
    sample = job_sample({"nodes": 3, "world_size": 3, "throughput": {3: 90.0}}, epochs)
    assert sample["rescales"] == 2 and sample["rate"] == 90.0  # a same-size re-form is no rescale


def test_live_and_status_tables_show_jobs_nodes_and_fraction(tmp_path: Path) -> None:
    from rich.console import Console

    from parsl_malleable.campaign.display import live_table, status_table
    from parsl_malleable.campaign.runner import CampaignRunner
    from parsl_malleable.campaign.sample import SiteCounts
    from parsl_malleable.campaign.spec import parse_campaign

    campaign = parse_campaign(
        {"site": "emulated", "jobs": [{"name": "a", "app": "m:f"}, {"name": "b", "app": "m:f"}]}
    )
    runner = CampaignRunner(campaign, tmp_path)
    runner.store = CampaignStore(tmp_path)
    runner.store.sync_jobs([("a", {}, {}), ("b", {}, {})])
    runner.store.finish("a", 1, result={"test_accuracy": 0.971})
    runner.store.mark_submitted("b", None)
    runner.last_site = SiteCounts(
        total=6, native=2, harvested=3, assigned=2, idle=1, stepping_s=1.25, stepping=1.25
    )
    runner.last_jobs = {"b": {"nodes": 2, "world": 2, "rate": 812.4}}
    runner.harvested_s, runner.idle_s, runner.stepping_s = 30.0, 10.0, 18.0
    console = Console(record=True, width=160)
    console.print(live_table(runner))
    text = " ".join(console.export_text().split())  # the caption may wrap
    assert "1 done, 1 running, 0 waiting" in text
    assert "2 native, 3 harvested (2 with ranks, 1.2 stepping), 1 idle of 6" in text
    assert "harvest fraction 75%, in training steps 60% of harvested" in text
    assert "812" in text and "0.971" in text
    console.print(status_table(runner.store.jobs(), {"runs": "1", "state": "finished"}))
    assert "test_accuracy=0.971" in console.export_text()


def test_checkpoint_fallbacks_reach_the_campaign_results(tmp_path: Path) -> None:
    store = CampaignStore(tmp_path)
    store.begin_run("c.yaml", now=0.0)
    store.sync_jobs([("a", {"app": "m:f"}, {}), ("b", {"app": "m:f"}, {})])
    fallback = "resuming from step 20: skipped 1 newer checkpoint(s): step-40.pt: truncated"
    store.finish("a", 1, result={"steps": 50}, warnings=[fallback])
    store.finish("b", 1, result={"steps": 50})
    rows = {r.name: r for r in store.jobs()}
    assert rows["a"].warnings == [fallback] and rows["b"].warnings == []
    frame = results_frame(store)
    assert frame.loc[0, "warnings"] == fallback and pd.isna(frame.loc[1, "warnings"])


def test_a_store_from_before_warnings_gains_the_column(tmp_path: Path) -> None:
    import sqlite3

    old = sqlite3.connect(tmp_path / CampaignStore.FILE)
    old.execute(
        "CREATE TABLE jobs (name TEXT PRIMARY KEY, spec TEXT NOT NULL, params TEXT NOT NULL,"
        " status TEXT NOT NULL, submissions INTEGER NOT NULL DEFAULT 0, finished_in_run INTEGER,"
        " resumed_from_step INTEGER, first_start REAL, finished_at REAL,"
        " node_seconds REAL NOT NULL DEFAULT 0, rescales INTEGER NOT NULL DEFAULT 0,"
        " result TEXT, error TEXT)"
    )
    old.execute("INSERT INTO jobs (name, spec, params, status) VALUES ('a', '{}', '{}', 'done')")
    old.commit()
    old.close()
    store = CampaignStore(tmp_path)
    assert [(r.name, r.status, r.warnings) for r in store.jobs()] == [("a", "done", [])]
    store.finish("a", 2, result={}, warnings=["w"])
    assert store.jobs()[0].warnings == ["w"]
