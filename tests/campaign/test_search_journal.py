"""A search's Optuna journal under the same guarantees as ``state.sqlite``: a journal with a
garbage line, random bytes, another study's records, cut by half, or deleted gives one warning
line naming it and the recovery (a torn tail: the bytes cut, counted), and the rerun's study
holds every trial of the campaign state with the parameters its job trained with, its end and
its reports; new trials get new job names. A journal another user could have written is
refused in one line.

Unit-level, as the runner drives a search (:meth:`CampaignRunner._open_searches`): open the
studies with the state, record their trials' jobs, reconcile, ask."""

from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from optuna.trial import TrialState

from parsl_malleable.campaign.runner import CampaignRunner
from parsl_malleable.campaign.search import SearchBook, journal_path
from parsl_malleable.campaign.search_journal import RETOLD
from parsl_malleable.campaign.spec import Campaign
from parsl_malleable.campaign.store import CampaignStore
from parsl_malleable.elastic.metric_book import MetricRecord
from parsl_malleable.errors import StateStoreError, UnsafePathError

SPACE = {
    "lr": {"type": "float", "low": 0.001, "high": 0.5, "log": True},
    "hidden": {"type": "categorical", "choices": [[32], [64], [128]]},
}
TRAINED = 10  # trials s-000 .. s-009 in the state before the journal is damaged
BUDGET = 12
STATES = {"done": "COMPLETE", "failed": "FAIL", "pruned": "PRUNED", "running": "RUNNING"}


def campaign(name: str = "s", seed: int = 0, **search: Any) -> Campaign:
    entry = {
        "name": name,
        "app": "apps.digits:train_elastic",
        "epochs": 4,
        "args": {"batch_size": 32},
        "space": SPACE,
        "trials": BUDGET,
        "parallel": 3,
        "sampler": {"type": "random", "seed": seed},
        "pruner": {"type": "median", "n_startup_trials": 1},
        "resource": "epoch",
        **search,
    }
    return Campaign(metric={"name": "acc", "direction": "max"}, searches=[entry])


def records(*values: float) -> list[MetricRecord]:
    return [
        MetricRecord(10 * (i + 1), 0.0, {"acc": v, "epoch": i + 1}) for i, v in enumerate(values)
    ]


def driver(c: Campaign, folder: Path, store: CampaignStore) -> SearchBook:
    """What a run does with its searches at its start (runner.py, ``_open_searches``)."""
    book = SearchBook.open(c, folder, 8, store=store)
    store.sync_jobs((n, j.model_dump(), p) for n, j, p in book.entries())
    book.reconcile(store.jobs(), store, 1)
    asked = book.ask()
    assert not store.sync_jobs((n, j.model_dump(), p) for n, j, p in asked)
    for name, _, _ in asked:
        store.mark_submitted(name, None)
    return book


def trained(folder: Path, c: Campaign | None = None) -> CampaignStore:
    """A search that ran ``TRAINED`` trials, three at a time, each reporting to the state and
    the study: all ended (``-003`` failed, ``-005`` pruned at epoch 2, the others done) but
    ``-009``, still running with two reports."""
    c = c or campaign()
    name = c.searches[0].name
    store = CampaignStore(folder)
    store.begin_run("c.yaml")
    store.set_metric_spec("acc", "max")
    book = driver(
        c.model_copy(update={"searches": [c.searches[0].model_copy(update={"trials": TRAINED})]}),
        folder,
        store,
    )
    study = book.runs[name].study
    for number in range(TRAINED):
        job = f"{name}-{number:03d}"
        final = 0.6 + number / 100
        store.record_metrics(job, 1, None, records(0.5, final))
        book.observe(job, records(0.5, final))
        if number == 5:
            study.tell(number, state=TrialState.PRUNED)
            book.runs[name].trials.pop(number)
            store.prune(job, 1, 20)
        elif number == 3:
            store.finish(job, 1, error="boom")
            book.finish(job, None, failed=True)
        elif number < TRAINED - 1:
            store.finish(job, 1)
            book.finish(job, final, failed=False)
        for new, entry, params in book.ask():
            store.sync_jobs([(new, entry.model_dump(), params)])
            store.mark_submitted(new, None)
    assert [r.name for r in store.jobs()] == [f"{name}-{n:03d}" for n in range(TRAINED)]
    return store


def state_params(store: CampaignStore) -> dict[str, Any]:
    return {r.name: r.params for r in store.jobs()}


def check_agree(book: SearchBook, store: CampaignStore, before: dict[str, Any]) -> None:
    """Every job that was in the state keeps its parameters, in the state and in the study;
    the study's verdict on it is its row's status; new trials are new names."""
    study_params = {name: params for name, _, params in book.entries()}
    rows = {r.name: r for r in store.jobs()}
    for name, params in before.items():
        assert rows[name].params == params, name
        assert json.dumps(study_params[name], sort_keys=True) == json.dumps(params, sort_keys=True)
    study = book.runs["s"].study
    for row in rows.values():
        trial = study.trials[int(row.name[2:])]
        assert trial.state.name == STATES[row.status], (row.name, row.status, trial.state)
    assert len(study.trials) == BUDGET and set(rows) == {f"s-{n:03d}" for n in range(BUDGET)}


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def garbage_line(path: Path) -> None:
    with path.open("ab") as file:
        file.write(b"this is no journal record\n")


def random_bytes(path: Path) -> None:
    path.write_bytes(random.Random(7).randbytes(4096))


def cut_by_half(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def deleted(path: Path) -> None:
    path.unlink()


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (garbage_line, r"is damaged \(line \d+ of \d+ is not a journal record\); moved it to "),
        (random_bytes, r"is damaged \(line 1 of \d+ is not a journal record\); moved it to "),
        (
            cut_by_half,
            r": (dropped \d+ byte\(s\) of a record torn when a driver was killed; )?\d+ "
            r"trial\(s\) the state holds \(s-00\d..s-009\) were cut from it: re-told from ",
        ),
        (
            deleted,
            r" is missing; rebuilt its study from \S+: 10 trial\(s\) \(s-000..s-009\) re-told ",
        ),
    ],
    ids=["garbage-line", "random-bytes", "cut-by-half", "deleted"],
)
def test_a_damaged_or_lost_journal_is_one_line_and_trials_keep_their_parameters(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    damage: Callable[[Path], None],
    said: str,
) -> None:
    store = trained(tmp_path)
    before = state_params(store)
    assert len(before) == TRAINED
    journal = journal_path(tmp_path, "s")
    damage(journal)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        book = driver(campaign(), tmp_path, store)
    said_lines = warnings_of(caplog)
    assert len(said_lines) == 1, said_lines
    assert said_lines[0].startswith(f"search s: {journal}") and re.search(said, said_lines[0])
    if damage in (garbage_line, random_bytes):
        assert f"moved it to {journal}.damaged and rebuilt its study from " in said_lines[0]
        assert (journal.parent / f"{journal.name}.damaged").is_file()  # kept to look at
    check_agree(book, store, before)
    study = book.runs["s"].study
    # What the state knew is told again: the failed trial FAIL, the pruned one PRUNED with its
    # reports up to its pruning step, the done ones COMPLETE with their final values.
    assert study.trials[5].intermediate_values == {1: 0.5, 2: 0.65}
    assert study.trials[5].value == 0.65  # a pruned trial has its last report as its value
    assert study.trials[4].value == pytest.approx(0.64)
    assert book.live("s-009") and book.live("s-010") and book.live("s-011")
    # The rerun goes on: the reports of s-009 reach the pruner, and a third run still agrees.
    book.observe("s-009", records(0.5, 0.69, 0.7))
    for name in ("s-009", "s-010", "s-011"):
        store.finish(name, 1)
        book.finish(name, 0.7, failed=False)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        again = driver(campaign(), tmp_path, store)
    assert warnings_of(caplog) == []  # repaired once: nothing left to say
    check_agree(again, store, before)
    assert again.ask() == []  # the budget holds across the repair


def test_another_studys_journal_is_moved_aside_and_the_study_rebuilt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = trained(tmp_path / "ours")
    before = state_params(store)
    # A journal of another search (another name), and one of a search of the same name in
    # another folder (other parameters under the same job names).
    trained(tmp_path / "t", campaign("t", seed=1)).close()
    trained(tmp_path / "twin", campaign(seed=1)).close()
    journal = journal_path(tmp_path / "ours", "s")
    for other, why in (
        ("t", r"it is the journal of study 't', not of 's'"),
        ("twin", r"10 trial\(s\) \(s-000..s-009\) hold other parameters than their jobs trained"),
    ):
        shutil.copy(journal_path(tmp_path / other, other if other == "t" else "s"), journal)
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            book = SearchBook.open(campaign(), tmp_path / "ours", 8, store=store)
        said = warnings_of(caplog)
        assert len(said) == 1 and re.search(f"is damaged \\({why}", said[0]), said
        assert all(t.user_attrs.get(RETOLD) for t in book.runs["s"].study.trials)
        names = {n: p for n, _, p in book.entries()}
        for name, params in before.items():
            assert json.dumps(names[name], sort_keys=True) == json.dumps(params, sort_keys=True)
    assert sorted(p.name for p in journal.parent.iterdir() if "damaged" in p.name) == [
        "s.journal.damaged",
        "s.journal.damaged-2",
    ]
    book = driver(campaign(), tmp_path / "ours", store)
    check_agree(book, store, before)


def test_a_torn_record_is_cut_and_counted_and_nothing_else_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = trained(tmp_path)
    before = state_params(store)
    journal = journal_path(tmp_path, "s")
    torn = b'{"op_code": 6, "worker_id": "x", "trial_id": 1'  # a killed driver's last append
    with journal.open("ab") as file:
        file.write(torn)
    with caplog.at_level(logging.WARNING):
        book = driver(campaign(), tmp_path, store)
    assert warnings_of(caplog) == [
        f"search s: {journal}: dropped {len(torn)} byte(s) of a record torn when a driver was "
        "killed"
    ]
    check_agree(book, store, before)
    assert not any(t.user_attrs.get(RETOLD) for t in book.runs["s"].study.trials)


def test_a_grid_rebuilt_from_the_state_does_not_ask_its_points_again(tmp_path: Path) -> None:
    space = {"hidden": SPACE["hidden"], "depth": {"type": "int", "low": 1, "high": 3}}
    c = campaign(space=space, sampler={"type": "grid"}, trials=9, parallel=4)
    store = CampaignStore(tmp_path)
    store.begin_run("c.yaml")
    store.set_metric_spec("acc", "max")
    first = driver(c, tmp_path, store)  # four points asked
    for name in ("s-000", "s-001"):
        store.finish(name, 1)
        first.finish(name, 0.5, failed=False)
    journal_path(tmp_path, "s").unlink()
    book = driver(c, tmp_path, store)  # the four re-told, two new ones asked
    for _ in range(9):
        for name in [n for n in book.jobs if book.live(n)]:
            store.finish(name, 1)
            book.finish(name, 0.5, failed=False)
        for name, job, params in book.ask():
            store.sync_jobs([(name, job.model_dump(), params)])
    assert len(book.runs["s"].study.trials) == 9 == len(store.jobs())
    points = {json.dumps(r.params, sort_keys=True) for r in store.jobs()}
    assert len(points) == 9  # every point once, across the rebuild


def test_a_new_trial_under_a_name_the_state_holds_is_refused(tmp_path: Path) -> None:
    store = trained(tmp_path)
    book = SearchBook.open(campaign(), tmp_path, 8, store=store)
    # A row the open study does not know of (written under a running driver): the next ask
    # would give its name other parameters.
    store.sync_jobs([("s-010", {"name": "s-010"}, {"lr": 0.1, "hidden": [32]})])
    with pytest.raises(StateStoreError, match=r"asked a new trial as job s-010, which .* holds"):
        book.ask()


@pytest.mark.parametrize("how", ["mode", "link"])
def test_a_journal_another_user_could_write_is_refused_in_one_line(
    tmp_path: Path, how: str
) -> None:
    store = trained(tmp_path)
    journal = journal_path(tmp_path, "s")
    if how == "mode":
        journal.chmod(0o666)
        said = f"refusing to open {journal}: its mode is 0666: its group and other users can"
    else:
        journal.rename(tmp_path / "elsewhere")
        journal.symlink_to(tmp_path / "elsewhere")
        said = f"refusing to open {journal}: it is a symbolic link"
    with pytest.raises(UnsafePathError) as caught:
        SearchBook.open(campaign(), tmp_path, 8, store=store)
    assert str(caught.value).startswith(said) and "\n" not in str(caught.value)


def test_the_runner_says_which_trials_changed_and_rebuilds_through_the_state(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Through the runner (``_open_searches``): a trial whose job the campaign file changed is
    named in a warning (``sync_jobs``' changed list, once dropped), and a deleted journal
    gives the runner's jobs the parameters they trained with."""
    store = trained(tmp_path)
    before = state_params(store)
    journal_path(tmp_path, "s").unlink()
    edited = campaign(epochs=5)  # the search's fixed arguments changed
    runner = CampaignRunner(edited, tmp_path, adopt_folder=True)
    runner.store, runner.run = store, 2
    with caplog.at_level(logging.WARNING):
        runner._open_searches()
    said = warnings_of(caplog)
    assert said[0].startswith(f"search s: {journal_path(tmp_path, 's')} is missing; rebuilt")
    assert said[1:] == [
        f"job s-{n:03d}: its trial's job differs from the one in the state (the campaign file "
        "changed the search's fixed arguments); it keeps its state"
        for n in range(TRAINED)
    ]
    for name, params in before.items():
        assert runner.entries[name][1] == params
    assert sorted(set(runner.entries) - set(before)) == ["s-010", "s-011"]


def test_a_number_the_state_never_held_keeps_the_later_trials_numbers(tmp_path: Path) -> None:
    """A trial asked by a driver killed before the state had it never trained: rebuilt, its
    number is a FAIL trial without a job, and the trials after it keep their numbers."""
    store = trained(tmp_path)
    before = state_params(store)
    store.db.execute("DELETE FROM jobs WHERE name = 's-002'")  # as if never recorded
    store.db.commit()
    del before["s-002"]
    journal_path(tmp_path, "s").unlink()
    book = SearchBook.open(campaign(), tmp_path, 8, store=store)
    study = book.runs["s"].study
    assert study.trials[2].state == TrialState.FAIL and study.trials[2].params == {}
    entries = {name: params for name, _, params in book.entries()}
    assert "s-002" not in entries and len(entries) == TRAINED - 1
    for name, params in before.items():
        assert json.dumps(entries[name], sort_keys=True) == json.dumps(params, sort_keys=True)
    assert [n for n, _, _ in book.ask()] == ["s-010", "s-011"]
