"""Reported metrics in a campaign's state: the merge through rollbacks and resumes, the best by
the campaign's metric (NaN and infinities never), results.csv's columns, metrics/<job>.csv,
the learning-curve picture, the live table and ``status``."""

from __future__ import annotations

import json
import math
import stat
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from click.testing import CliRunner
from rich.console import Console

from parsl_malleable.campaign.display import live_table
from parsl_malleable.campaign.results import results_frame, write_results
from parsl_malleable.campaign.spec import MetricSpec
from parsl_malleable.campaign.store import CampaignStore, summarise
from parsl_malleable.cli import main
from parsl_malleable.elastic.metric_book import MetricRecord


def _records(*pairs: tuple[int, float]) -> list[MetricRecord]:
    return [MetricRecord(step, 1000.0 + step, {"acc": value}) for step, value in pairs]


def sweep(tmp_path: Path) -> CampaignStore:
    """Job a: rolled back to 3 in run 1, resumed from 2 in run 2; job b reports a NaN, an inf
    and the best finite value; job c never reports."""
    store = CampaignStore(tmp_path)
    store.begin_run("c.yaml", now=0.0)
    store.set_metric_spec("acc", "max")
    store.sync_jobs([(n, {"app": "m:f"}, {}) for n in "abc"])
    store.record_metrics("a", 1, 0, _records((1, 0.1), (2, 0.2), (3, 0.3), (4, 0.9), (5, 0.95)))
    store.record_metrics("a", 1, 3, _records((4, 0.4)))  # a lost peer: 4 again, 5 gone
    store.begin_run("c.yaml", now=100.0)
    store.record_metrics("a", 2, 2, _records((3, 0.33), (4, 0.44), (5, 0.5)))  # from disk at 2
    store.record_metrics("b", 2, 0, _records((1, math.nan), (2, 0.8), (3, math.inf), (4, 0.7)))
    store.finish("a", 2, result={"test_accuracy": 0.5})
    store.finish("b", 2, result={"test_accuracy": 0.7})
    return store


def test_the_store_keeps_each_step_once_from_the_committed_timeline(tmp_path: Path) -> None:
    store = sweep(tmp_path)
    rows = store.metrics("a")
    assert [(r["step"], r["acc"], r["run"]) for r in rows] == [
        (1, 0.1, 1),
        (2, 0.2, 1),
        (3, 0.33, 2),
        (4, 0.44, 2),
        (5, 0.5, 2),
    ]
    b = store.metrics("b")
    assert math.isnan(b[0]["acc"]) and b[2]["acc"] == math.inf  # stored as reported
    store.close()


def test_the_best_is_by_direction_and_never_nan_or_inf() -> None:
    series = [(1, math.nan), (2, 0.8), (3, math.inf), (4, 0.7), (5, -math.inf)]
    best = summarise(series, "max")
    assert (best.best, best.best_step, best.final, best.final_step) == (0.8, 2, -math.inf, 5)
    assert best.nonfinite == 3
    assert summarise(series, "min").best == 0.7
    assert summarise(series, None).best is None
    assert summarise([(1, 0.5), (2, 0.5)], "max").best_step == 1  # the earliest on a tie


def test_results_have_final_best_and_its_step_and_the_files_are_private(tmp_path: Path) -> None:
    sweep(tmp_path).close()
    store = CampaignStore(tmp_path)
    frame = results_frame(store).set_index("job")
    assert frame.loc["a", "acc_final"] == 0.5 and frame.loc["a", "acc_best"] == 0.5
    assert frame.loc["a", "acc_best_step"] == 5
    assert frame.loc["b", "acc_best"] == 0.8 and frame.loc["b", "acc_best_step"] == 2
    assert frame.loc["b", "acc_nonfinite"] == 2 and frame.loc["b", "reports"] == 4
    assert pd.isna(frame.loc["c", "acc_best"]) and frame.loc["c", "reports"] == 0
    written = write_results(store, tmp_path)
    store.close()
    curves = tmp_path / "curves.png"
    assert curves in written and curves.stat().st_size > 0
    folder = tmp_path / "metrics"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert sorted(p.name for p in folder.iterdir()) == ["a.csv", "b.csv"]
    assert stat.S_IMODE((folder / "a.csv").stat().st_mode) == 0o600
    a = pd.read_csv(folder / "a.csv")
    assert a["step"].tolist() == [1, 2, 3, 4, 5] and a["acc"].tolist()[-1] == 0.5
    results = pd.read_csv(tmp_path / "results.csv").set_index("job")
    assert results.loc["b", "acc_best_step"] == 2


def test_status_shows_the_best_trial_so_far(tmp_path: Path) -> None:
    sweep(tmp_path).close()
    out = CliRunner().invoke(main, ["status", str(tmp_path)], terminal_width=200)
    assert out.exit_code == 0, out.output
    assert "best so far: b acc=0.8 at step 2 (max)" in out.output
    words = " ".join(out.output.split())  # the title wraps at 80 columns
    assert "jobs: 2 done, 0 unfinished" in words  # no pruned or failed job: not named
    data = json.loads(CliRunner().invoke(main, ["status", str(tmp_path), "--json"]).output)
    assert data["metric"] == {"name": "acc", "direction": "max"}
    assert data["best"] == {"job": "b", "value": 0.8, "step": 2}


def test_the_live_table_shows_the_latest_value_of_the_campaigns_metric(tmp_path: Path) -> None:
    store = sweep(tmp_path)
    runner = SimpleNamespace(
        store=store,
        run=2,
        started=0.0,
        last_site=None,
        harvest_fraction=None,
        last_jobs={},
        campaign=SimpleNamespace(metric=MetricSpec(name="acc", direction="max")),
    )
    console = Console(record=True, width=200)
    console.print(live_table(runner))
    text = console.export_text()
    cells = {}
    for line in text.splitlines():
        parts = [cell.strip() for cell in line.split("│")[1:-1]]
        if parts:
            cells[parts[0]] = parts
    header = next(line for line in text.splitlines() if "samples/s" in line)
    column = [cell.strip() for cell in header.split("┃")[1:-1]].index("acc")
    assert (cells["a"][column], cells["b"][column], cells["c"][column]) == ("0.5", "0.7", "-")
    store.close()


def test_a_declared_metric_that_a_finished_job_never_reported_is_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from parsl_malleable.campaign.runner import CampaignRunner

    store = sweep(tmp_path)
    store.finish("c", 2, result={"test_accuracy": 0.6})  # done, but never reported "acc"
    runner = SimpleNamespace(
        store=store,
        entries={n: None for n in "abc"},
        campaign=SimpleNamespace(metric=MetricSpec(name="acc", direction="max")),
    )
    with caplog.at_level("WARNING"):
        CampaignRunner._check_metric_reported(runner)  # type: ignore[arg-type]
    (message,) = [r.getMessage() for r in caplog.records]
    assert "metric 'acc' was never reported by 1 finished job(s) (c)" in message
    assert "reported metrics: acc" in message
    caplog.clear()
    runner.campaign = SimpleNamespace(metric=MetricSpec(name="accuracy", direction="max"))
    with caplog.at_level("WARNING"):
        CampaignRunner._check_metric_reported(runner)  # type: ignore[arg-type]
    assert "'accuracy' was never reported by 3 finished job(s) (a, b, c)" in caplog.text
    store.close()


def test_the_status_header_counts_pruned_and_failed_trials(tmp_path: Path) -> None:
    store = sweep(tmp_path)
    store.sync_jobs([(n, {"app": "m:f"}, {}) for n in "abcde"])
    store.prune("c", 2, step=3)
    store.finish("d", 2, error="boom")
    store.close()
    out = CliRunner().invoke(main, ["status", str(tmp_path)], terminal_width=200)
    assert out.exit_code == 0, out.output
    words = " ".join(out.output.split())  # the title wraps at 80 columns
    assert "jobs: 2 done, 1 pruned, 1 failed, 0 unfinished, 1 waiting" in words, out.output


def test_a_folder_where_a_metrics_file_was_is_one_warning_and_the_rest_is_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A run's end once stopped at it with a traceback, and no pictures were drawn."""
    sweep(tmp_path).close()
    (tmp_path / "metrics" / "a.csv" / "x").mkdir(parents=True, mode=0o700)
    (tmp_path / "metrics").chmod(0o700)
    store = CampaignStore(tmp_path)
    with caplog.at_level("WARNING", logger="parsl_malleable"):
        written = write_results(store, tmp_path)
    store.close()
    for name in ("results.csv", "gantt.png", "curves.png", "nodes.png", "startup.csv"):
        assert tmp_path / name in written and (tmp_path / name).stat().st_size > 0, name
    assert tmp_path / "metrics" / "b.csv" in written and (tmp_path / "metrics" / "b.csv").is_file()
    assert tmp_path / "metrics" / "a.csv" not in written
    (record,) = [r for r in caplog.records if r.levelname == "WARNING"]
    assert record.getMessage() == (
        f"could not write metrics/a.csv (a folder is in its place) in {tmp_path}; the other "
        "results were written. Move what is in the way (or free space), then run the campaign "
        "again: a rerun writes the results again"
    )
    assert record.exc_info is None
    assert not list((tmp_path / "metrics").glob(".*.tmp"))  # no temporary file left behind


def test_a_resume_keeps_the_time_and_run_of_every_earlier_report(tmp_path: Path) -> None:
    """A resumed rank re-sends its committed reports to the new driver; they were stamped with
    its run and time, as if trained again."""
    store = CampaignStore(tmp_path)
    store.begin_run("c.yaml", now=0.0)
    store.sync_jobs([("a", {"app": "m:f"}, {})])
    store.record_metrics("a", 1, 0, _records((1, 0.1), (2, math.nan), (3, 0.3)))
    store.begin_run("c.yaml", now=100.0)  # a new driver; the job resumes from step 2
    resent = [MetricRecord(s, 5000.0 + s, {"acc": v}) for s, v in ((1, 0.1), (2, math.nan))]
    store.record_metrics("a", 2, 2, [*resent, MetricRecord(3, 5003.0, {"acc": 0.33})])
    rows = store.metrics("a")
    assert [(r["step"], r["time"], r["run"]) for r in rows] == [
        (1, 1001.0, 1),
        (2, 1002.0, 1),
        (3, 5003.0, 2),  # trained again after the resume: the new report
    ]
    assert rows[2]["acc"] == 0.33 and math.isnan(rows[1]["acc"])
    # a report of the same step with other values is a new report
    store.record_metrics("a", 2, None, [MetricRecord(1, 6001.0, {"acc": 0.15})])
    first = store.metrics("a")[0]
    assert (first["time"], first["run"], first["acc"]) == (6001.0, 2, 0.15)
    store.close()
