"""A search's Optuna study in a temporary journal: grid, random and TPE give valid trials as
jobs, reports reach the pruner (NaN counted, not fed), the budget and ``parallel`` hold, and a
reopened study keeps every decision and never replays a seeded sampler's parameters."""

from __future__ import annotations

import math
import stat
from pathlib import Path
from typing import Any

import pytest
from optuna.trial import TrialState

from parsl_malleable.campaign.search import SearchBook, journal_path, sampler_seed
from parsl_malleable.campaign.spec import Campaign
from parsl_malleable.campaign.store import CampaignStore
from parsl_malleable.elastic.metric_book import MetricRecord

SPACE = {
    "lr": {"type": "float", "low": 0.001, "high": 0.5, "log": True},
    "hidden": {"type": "categorical", "choices": [[32], [64], [128]]},
    "seed": {"type": "int", "low": 1, "high": 3},
}


def campaign(**search: Any) -> Campaign:
    entry = {
        "name": "s",
        "app": "apps.digits:train_elastic",
        "epochs": 4,
        "args": {"batch_size": 32},
        "space": SPACE,
        "trials": 6,
        "parallel": 3,
        **search,
    }
    return Campaign(metric={"name": "acc", "direction": "max"}, searches=[entry])


def records(*values: float, key: str = "acc") -> list[MetricRecord]:
    return [MetricRecord(10 * (i + 1), 0.0, {key: v, "epoch": i + 1}) for i, v in enumerate(values)]


def check_valid(entries: list[tuple[str, Any, dict[str, Any]]]) -> None:
    for name, job, params in entries:
        assert name == job.name and name.startswith("s-")
        assert 0.001 <= params["lr"] <= 0.5
        assert params["hidden"] in ([32], [64], [128]) and params["seed"] in (1, 2, 3)
        assert job.call_args() == {"batch_size": 32, "epochs": 4, **params}


@pytest.mark.parametrize("kind", ["random", "tpe"])
def test_random_and_tpe_give_valid_reproducible_trials(tmp_path: Path, kind: str) -> None:
    asked = []
    for folder in ("a", "b"):
        book = SearchBook.open(campaign(sampler={"type": kind, "seed": 3}), tmp_path / folder, 3)
        entries = book.ask()
        assert [n for n, _, _ in entries] == ["s-000", "s-001", "s-002"]  # parallel: 3
        check_valid(entries)
        asked.append([p for _, _, p in entries])
    assert asked[0] == asked[1]  # the same seed, the same trials
    journal = journal_path(tmp_path / "a", "s")
    assert journal.is_file() and stat.S_IMODE(journal.parent.stat().st_mode) == 0o700


def test_grid_covers_its_points_once_across_a_rerun(tmp_path: Path) -> None:
    space = {k: v for k, v in SPACE.items() if k != "lr"}
    c = campaign(space=space, sampler={"type": "grid"}, trials=9, parallel=4, args={"lr": 0.1})
    book = SearchBook.open(c, tmp_path, 9)
    entries = book.ask()  # four: parallel
    for name, _, _ in entries[:3]:
        book.finish(name, 0.5, failed=False)
    book = SearchBook.open(c, tmp_path, 9)  # a rerun, s-003 still running
    for _ in range(9):
        entries += book.ask()
        for name, _, _ in entries:
            book.finish(name, 0.5, failed=False)
    points = {(tuple(p["hidden"]), p["seed"]) for _, _, p in entries}
    assert len(entries) == len(points) == 9, entries


def test_budget_and_parallel_hold_and_a_reopened_study_asks_new_parameters(tmp_path: Path) -> None:
    c = campaign(sampler={"type": "random", "seed": 0}, trials=4, parallel=2)
    book = SearchBook.open(c, tmp_path, 8)
    first = book.ask()
    assert len(first) == 2 and book.ask() == []  # two running: no slot
    book.finish("s-000", 0.9, failed=False)
    book.finish("s-001", None, failed=True)
    # A new driver (the old one killed): the study keeps both decisions and asks on.
    again = SearchBook.open(c, tmp_path, 8)
    states = [t.state.name for t in again.runs["s"].study.trials]
    assert states == ["COMPLETE", "FAIL"]
    more = again.ask()
    assert [n for n, _, _ in more] == ["s-002", "s-003"]
    old = [p for _, _, p in first]
    assert all(p not in old for _, _, p in more), (old, more)  # the seed is not replayed
    assert sampler_seed(0, 0) == 0 and sampler_seed(0, 2) != 0
    again.finish("s-002", 0.5, failed=False)
    assert again.ask() == []  # four trials asked: the budget is spent


def test_reports_reach_the_pruner_nan_is_counted_and_a_bad_trial_is_pruned(tmp_path: Path) -> None:
    pruner = {"type": "median", "n_startup_trials": 1}
    c = campaign(sampler={"type": "random"}, pruner=pruner, resource="epoch", parallel=2)
    book = SearchBook.open(c, tmp_path, 8)
    book.ask()
    assert book.observe("s-000", records(0.5, 0.8, 0.9)) is None
    book.finish("s-000", 0.9, failed=False)
    assert book.observe("s-001", records(math.nan)) is None  # not fed: counted
    run = book.runs["s"]
    assert run.nonfinite == 1 and run.study.trials[1].intermediate_values == {}
    verdict = book.observe("s-001", records(0.1, 0.1))
    assert verdict is not None and (verdict.job, verdict.step, verdict.resource) == ("s-001", 10, 1)
    assert run.study.trials[1].state.name == "PRUNED"
    assert not book.live("s-001") and book.observe("s-001", records(0.1)) is None
    assert run.study.trials[0].intermediate_values == {1: 0.5, 2: 0.8, 3: 0.9}


def test_reconcile_makes_the_state_follow_the_study_and_tells_ended_jobs(tmp_path: Path) -> None:
    pruner = {"type": "median", "n_startup_trials": 1}
    c = campaign(sampler={"type": "random"}, pruner=pruner, resource="epoch", parallel=3)
    book = SearchBook.open(c, tmp_path, 8)
    store = CampaignStore(tmp_path)
    store.begin_run("c.yaml")
    store.set_metric_spec("acc", "max")
    store.sync_jobs((n, j.model_dump(), p) for n, j, p in book.ask())
    for name in ("s-000", "s-001", "s-002"):
        store.mark_submitted(name, None)
    # s-000 ended done in the state, the driver died before telling the study.
    store.record_metrics("s-000", 1, None, records(0.5, 0.9))
    store.finish("s-000", 1, result={"acc": 0.9})
    # s-001 was pruned in the study, the driver died before the state said so.
    book.runs["s"].study.tell(1, state=TrialState.PRUNED)
    again = SearchBook.open(c, tmp_path, 8)
    changed = again.reconcile(store.jobs(), store, 1)
    assert sorted(changed) == ["s-000", "s-001"]
    study = again.runs["s"].study
    assert [t.state.name for t in study.trials] == ["COMPLETE", "PRUNED", "RUNNING"]
    assert study.trials[0].value == 0.9
    rows = {r.name: r for r in store.jobs()}
    assert rows["s-001"].status == "pruned" and rows["s-002"].status == "running"
    assert again.live("s-002") and not again.live("s-001")
    store.close()


def test_a_record_torn_by_a_kill_and_a_stale_lock_do_not_stop_a_rerun(tmp_path: Path) -> None:
    c = campaign(sampler={"type": "random"}, trials=3, parallel=1)
    book = SearchBook.open(c, tmp_path, 8)
    book.ask()
    book.finish("s-000", 0.9, failed=False)
    journal = journal_path(tmp_path, "s")
    with journal.open("ab") as file:
        file.write(b'{"op_code": 6, "worker_id": "x", "trial_id": 1')  # no newline: torn
    (journal.parent / f"{journal.name}.lock").symlink_to(journal)  # the killed driver's lock
    again = SearchBook.open(c, tmp_path, 8)
    assert [n for n, _, _ in again.ask()] == ["s-001"]
    again.finish("s-001", 0.8, failed=False)
    study = SearchBook.open(c, tmp_path, 8).runs["s"].study
    assert [t.state.name for t in study.trials] == ["COMPLETE", "COMPLETE"]
