"""A campaign's ``searches:``: every mistake is a load-time error naming its place (and the
allowed values), ``validate`` shows what a search expands to, and today's sweeps are unchanged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from parsl_malleable.campaign.spec import load_campaign
from parsl_malleable.cli import main
from parsl_malleable.controller.model import JOB_MAX_NODES
from parsl_malleable.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
APP = "apps.digits:train_elastic"
METRIC = {"name": "test_accuracy", "direction": "max"}


def search(**changes: Any) -> dict[str, Any]:
    return {
        "name": "asha",
        "app": APP,
        "epochs": 3,
        "args": {"batch_size": 32},
        "space": {
            "lr": {"type": "float", "low": 0.001, "high": 0.5, "log": True},
            "hidden": {"type": "categorical", "choices": [[32], [64]]},
        },
        "trials": 6,
        "parallel": 2,
        "sampler": {"type": "tpe", "seed": 0},
        "pruner": {"type": "asha", "min_resource": 1, "reduction_factor": 3},
        "resource": "epoch",
        **changes,
    }


def write(tmp_path: Path, **data: Any) -> Path:
    path = tmp_path / "c.yaml"
    data = {"python_path": [str(REPO)], "metric": METRIC, "searches": [search()], **data}
    path.write_text(yaml.safe_dump(data))
    return path


def error_of(tmp_path: Path, **data: Any) -> str:
    with pytest.raises(ConfigError) as caught:
        load_campaign(write(tmp_path, **data))
    return str(caught.value)


def test_a_search_loads_and_its_trials_are_jobs_with_fixed_args_and_params(tmp_path: Path) -> None:
    campaign = load_campaign(write(tmp_path))
    (entry,) = campaign.searches
    assert campaign.expanded() == []  # trials are asked while the run goes
    job = entry.trial_job(7, {"lr": 0.01, "hidden": [64]})
    # the template's fields; max_nodes the app's default, no cap of the job's own
    assert job.name == "asha-007" and job.max_nodes == entry.max_nodes == JOB_MAX_NODES
    assert job.call_args() == {"batch_size": 32, "lr": 0.01, "hidden": [64], "epochs": 3}
    assert entry.space["hidden"].encoded and not entry.space["lr"].encoded


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            {"sampler": {"type": "cmaes"}},
            "searches[0].sampler.type: Input should be 'grid', 'random' or 'tpe'",
        ),
        ({"pruner": {"type": "patient"}}, "'asha', 'hyperband', 'median' or 'none'"),
        (
            {"pruner": {"type": "median", "reduction_factor": 3}},
            "pruner median takes n_startup_trials, n_warmup_steps, interval_steps; got "
            "reduction_factor",
        ),
        ({"space": {}}, "searches[0].space: empty: name at least one app argument"),
        (
            {"space": ["lr"]},
            "searches[0].space: a mapping of app arguments to distributions is needed",
        ),
        (
            {"space": {"lr": {"type": "uniform", "low": 0.1, "high": 1}}},
            "lr: type must be one of float, int, categorical; got 'uniform'",
        ),
        (
            {"space": {"lr": {"low": 0.1, "high": 1}}},
            "lr: type must be one of float, int, categorical; none given",
        ),
        (
            {"space": {"lr": {"type": "float", "low": 0.5, "high": 0.5}}},
            "searches[0].space.lr: needs low < high; got low=0.5, high=0.5",
        ),
        (
            {"space": {"lr": {"type": "float", "low": 0, "high": 1, "log": True}}},
            "searches[0].space.lr: log needs low > 0",
        ),
        (
            {"space": {"lr": {"type": "float", "low": 0.1, "high": 1, "log": True, "step": 0.1}}},
            "log and step do not go together",
        ),
        (
            {"space": {"hidden": {"type": "categorical", "choices": []}}},
            "searches[0].space.hidden: categorical needs choices",
        ),
        (
            {"space": {"hidden": {"type": "categorical", "choices": 64}}},
            "searches[0].space.hidden.choices: Input should be a valid list",
        ),
        (
            {"space": {"lr": {"type": "float", "low": 0.1, "high": 1, "sigma": 2}}},
            "searches[0].space.lr.sigma: unknown key (allowed: type, low, high, log, step, "
            "choices)",
        ),
        (
            {"space": {"depth": {"type": "int", "low": 1, "high": 3}}},
            "searches[0].args/space: train_elastic(ctx, ...): got an unexpected keyword "
            "argument 'depth'",
        ),
        (
            {"space": {"lr": {"type": "categorical", "choices": [0.1, "fast"]}}},
            "searches[0].space.lr='fast': train_elastic() takes lr: float",
        ),
        (
            {"space": {"batch_size": {"type": "float", "low": 8, "high": 64}}},
            "batch_size: both fixed (args, epochs, samples) and searched (space)",
        ),
        (
            {"sampler": {"type": "grid"}},
            "sampler grid needs categorical or int spaces; lr is a float range",
        ),
        ({"trials": 0}, "searches[0].trials: Input should be greater than or equal to 1"),
        (
            {"sampler": {"type": "random", "n_startup_trials": 3}},
            "n_startup_trials is an option of tpe, not of random",
        ),
    ],
)
def test_search_mistakes_are_load_time_errors(tmp_path: Path, change: dict, expected: str) -> None:
    assert expected in error_of(tmp_path, searches=[search(**change)])


def test_a_grid_needs_no_more_trials_than_points_and_a_search_needs_the_metric(
    tmp_path: Path,
) -> None:
    grid = search(
        space={
            "lr": {"type": "categorical", "choices": [0.1, 0.2]},
            "seed": {"type": "int", "low": 0, "high": 2},
        },
        sampler={"type": "grid"},
        trials=7,
    )
    assert "trials (7) is more than the grid's 6 point(s)" in error_of(tmp_path, searches=[grid])
    (tmp_path / "m").mkdir()
    path = write(tmp_path / "m")
    data = yaml.safe_load(path.read_text())
    del data["metric"]
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="searches need the campaign's metric"):
        load_campaign(path)


def test_trial_names_may_not_clash_with_jobs_or_another_search(tmp_path: Path) -> None:
    jobs = [{"name": "asha-001", "app": APP, "epochs": 1}]
    assert "job 'asha-001' would be one of them" in error_of(tmp_path, jobs=jobs)
    twice = error_of(tmp_path, searches=[search(), search()])
    assert "search name 'asha' is used twice" in twice


def test_validate_shows_each_searchs_space_and_budget(tmp_path: Path) -> None:
    path = write(
        tmp_path, sweeps=[{"name": "hpo", "app": APP, "epochs": 1, "grid": {"lr": [0.05, 0.1]}}]
    )
    out = CliRunner().invoke(main, ["validate", str(path)], terminal_width=200)
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())
    assert "hpo-0" in text and "hpo-1" in text  # the grid sweep expands as before
    assert "search asha: 6 trials (asha-000 .. asha-005), 2 at once, nodes 1+" in text
    assert "lr: float 0.001..0.5 log" in text and "hidden: one of [32], [64]" in text
    assert "asha (min_resource=1, reduction_factor=3) on epoch" in text and "tpe (seed 0)" in text
    data = json.loads(CliRunner().invoke(main, ["validate", "--json", str(path)]).output)
    (row,) = data["searches"]
    assert row["trials"] == 6 and row["parallel"] == 2 and row["resource"] == "epoch"
    assert row["space"]["hidden"] == {"type": "categorical", "choices": [[32], [64]]}
    assert [j["name"] for j in data["jobs"]] == ["hpo-0", "hpo-1"]


def test_parallel_defaults_to_the_sites_node_count(tmp_path: Path) -> None:
    path = write(tmp_path, searches=[search(parallel=None)])
    data = json.loads(CliRunner().invoke(main, ["validate", "--json", str(path)]).output)
    from parsl_malleable.campaign.runner import site_profile
    from parsl_malleable.campaign.spec import site_capacity

    expected = site_capacity(site_profile(load_campaign(path)))[0]
    assert data["searches"][0]["parallel"] == expected > 1


def test_hyperband_with_min_resource_above_max_resource_is_refused_in_one_line(
    tmp_path: Path,
) -> None:
    # Optuna takes it and never prunes: every rung lies past the last step.
    pruner = {"type": "hyperband", "min_resource": 9, "max_resource": 3, "reduction_factor": 3}
    path = write(tmp_path, searches=[search(pruner=pruner)])
    out = CliRunner().invoke(main, ["validate", str(path)])
    assert isinstance(out.exception, SystemExit)  # click's exit, not an error raised
    assert out.exit_code == 1, out.output
    assert out.output == (
        f"Error: {path}: searches[0].pruner: min_resource (9) is more than max_resource (3): no "
        "trial would ever reach a rung, so none would be pruned\n"
    )
    assert "Traceback" not in out.output
    # equal ends, or auto, stay allowed
    load_campaign(write(tmp_path, searches=[search(pruner={**pruner, "min_resource": 3})]))
    load_campaign(write(tmp_path, searches=[search(pruner={**pruner, "max_resource": "auto"})]))
