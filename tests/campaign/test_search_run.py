"""Searches on the emulated site: a pruned trial stops early and reads ``pruned``; a search
killed with ``kill -9`` and rerun keeps every decision its study had made."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend

from parsl_malleable.campaign.search import journal_path
from parsl_malleable.campaign.search_spec import Distribution, SamplerSpec
from tests.campaign import runs
from tests.provider.conftest import wait_for

pytestmark = pytest.mark.slow

GOOD, BAD = 0.1, [1e-6, 2e-6, 3e-6]  # BAD: the hopeless region, near-random accuracy
EPOCHS = 4
SEARCH = "prune"


def good_first_seed() -> int:
    """A grid seed whose first trial is the good one: the median pruner needs one finished
    trial to judge by, so the bad ones after it are pruned whatever their order."""
    space = {"lr": Distribution(type="categorical", choices=[GOOD, *BAD])}
    for seed in range(50):
        study = optuna.create_study(sampler=SamplerSpec(type="grid").make(space, seed))
        if study.ask({"lr": space["lr"].optuna()}).params["lr"] == GOOD:
            return seed
    raise AssertionError("no seed of the first 50 puts the good trial first")


def search_campaign(tmp: Path) -> Path:
    data: dict[str, Any] = {
        "site": "emulated",
        "python_path": [str(runs.REPO)],
        "time_limit_s": 420,
        "metric": {"name": "test_accuracy", "direction": "max"},
        "searches": [
            {
                "name": SEARCH,
                "app": "apps.digits:train_elastic",
                "epochs": EPOCHS,
                "max_nodes": 1,
                "checkpoint_every": 5,
                "args": {"batch_size": 32, "hidden": [32], "step_delay_s": 0.03},
                "space": {"lr": {"type": "categorical", "choices": [GOOD, *BAD]}},
                "trials": 4,
                "parallel": 1,
                "sampler": {"type": "grid", "seed": good_first_seed()},
                "pruner": {"type": "median", "n_startup_trials": 1},
                "resource": "epoch",
            }
        ],
    }
    path = tmp / "search.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def study_of(output: Path) -> list[tuple[str, dict[str, Any], int]]:
    """``(state, params, number)`` of every trial in the search's study."""
    storage = JournalStorage(JournalFileBackend(str(journal_path(output, SEARCH))))
    study = optuna.load_study(study_name=SEARCH, storage=storage)
    return [(t.state.name, t.params, t.number) for t in study.trials]


STATES = {"COMPLETE": "done", "PRUNED": "pruned", "FAIL": "failed"}


def check_agree(output: Path) -> tuple[list[tuple[str, dict[str, Any], int]], Any]:
    """The study and results.csv agree on every trial; both returned."""
    trials = study_of(output)
    table = runs.results(output)
    assert len(trials) == len(table) == 4, (trials, table)  # the budget, every state counted
    for state, params, number in trials:
        name = f"{SEARCH}-{number:03d}"
        assert table.loc[name, "status"] == STATES[state], (name, state, table)
        assert table.loc[name, "param.lr"] == params["lr"]
    return trials, table


def test_a_search_prunes_the_hopeless_trials_and_completes_the_good_one(tmp_path: Path) -> None:
    output = tmp_path / "out"
    done = runs.run(search_campaign(tmp_path), output)
    assert done.returncode == 0, done.stderr[-4000:]
    trials, table = check_agree(output)
    assert trials[0][:2] == ("COMPLETE", {"lr": GOOD})
    assert table.loc[f"{SEARCH}-000", "result.test_accuracy"] > 0.8
    pruned = table[table["status"] == "pruned"]
    assert len(pruned) >= 1 and (pruned["param.lr"] < GOOD).all(), table
    # Stopped early: fewer epochs reported than the full budget, the step recorded.
    assert (pruned["reports"] < EPOCHS).all() and (pruned["pruned_step"] > 0).all(), pruned
    assert pd_isna(table.loc[f"{SEARCH}-000", "pruned_step"])
    assert (pruned["test_accuracy_best"] < 0.5).all()


def pd_isna(value: Any) -> bool:
    import pandas as pd

    return bool(pd.isna(value))


def test_a_killed_search_keeps_every_decision_on_rerun(tmp_path: Path) -> None:
    campaign = search_campaign(tmp_path)
    output = tmp_path / "out"
    first = subprocess.Popen(
        runs.command(campaign, output),
        env=runs.env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def pruned_and_the_next_asked() -> bool:
            rows = runs.query(output, "SELECT status FROM jobs")
            return any(s == "pruned" for (s,) in rows) and len(rows) >= 3

        assert wait_for(pruned_and_the_next_asked, 300), runs.query(
            output, "SELECT name, status FROM jobs"
        )
        first.send_signal(signal.SIGKILL)
        first.wait(30)
        assert wait_for(lambda: not runs.processes_of(output, 1), 60), runs.processes_of(output, 1)
    finally:
        runs.kill(runs.processes_of(output, 1))
        if first.poll() is None:
            first.kill()
    before = {number: (state, params) for state, params, number in study_of(output)}
    rows_before = {
        name: (status, step, submissions)
        for name, status, step, submissions in runs.query(
            output, "SELECT name, status, pruned_step, submissions FROM jobs"
        )
    }
    decided = {n for n, (state, _) in before.items() if state != "RUNNING"}
    assert any(before[n][0] == "PRUNED" for n in decided) and len(before) < 5, before

    second = runs.run(campaign, output)
    assert second.returncode == 0, second.stderr[-4000:]
    trials, table = check_agree(output)
    after = {number: (state, params) for state, params, number in trials}
    for number, (state, params) in before.items():
        name = f"{SEARCH}-{number:03d}"
        assert after[number][1] == params, (name, params, after[number])  # params unchanged
        if state == "RUNNING":
            continue
        assert after[number][0] == state, (name, state, after[number])  # never revived
        assert table.loc[name, "finished_in_run"] == 1, (name, table.loc[name])
        status, step, submissions = rows_before[name]
        assert table.loc[name, "driver_runs"] == submissions, name  # never resubmitted
        if status == "pruned":
            assert table.loc[name, "pruned_step"] == step
    assert all(state != "RUNNING" for state, _, _ in trials)
    assert (table["status"] == "pruned").sum() >= len(
        [n for n in decided if before[n][0] == "PRUNED"]
    )
