"""train_campaign's checks before anything starts: where it may run, what it accepts, where its
state goes (the run itself: test_globus_through_yield.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from parsl_malleable.campaign import globus_driver as gd
from parsl_malleable.campaign.spec import parse_campaign
from parsl_malleable.errors import ConfigError

JOB = {"name": "a", "app": "parsl_malleable.apps.digits:train_elastic", "epochs": 2}


@pytest.fixture(autouse=True)
def _no_endpoint_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in (
        gd.ENV_MODE,
        gd.ENV_SITE,
        gd.ENV_MAX_HARVESTED,
        gd.ENV_ADDRESS,
        gd.PARSL_WORKER_ENV,
    ):
        monkeypatch.delenv(key, raising=False)


def test_a_worker_of_a_tasks_mode_endpoint_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    gd.check_driver_mode()  # plain Python: no endpoint involved
    monkeypatch.setenv(gd.PARSL_WORKER_ENV, "0")  # a task on an endpoint's block
    with pytest.raises(ConfigError, match="mode': 'driver'"):
        gd.train_campaign({"jobs": [JOB]})
    monkeypatch.setenv(gd.ENV_MODE, "driver")
    gd.check_driver_mode()


def test_campaign_text_and_mappings_are_checked() -> None:
    assert gd.campaign_data("jobs: []\n") == {"jobs": []}
    assert gd.campaign_data({"jobs": [JOB]}) == {"jobs": [JOB]}
    with pytest.raises(ConfigError, match=r"campaign text \(line 2\): not valid YAML"):
        gd.campaign_data("jobs:\n  - name: a: b\n")
    # The driver shares the campaign loader's limits: no aliases, no megabytes.
    with pytest.raises(ConfigError, match=r"campaign text \(line 2\): YAML anchors and aliases"):
        gd.campaign_data("jobs:\n  - &a {name: a}\n  - *a\n")
    with pytest.raises(ConfigError, match=r"campaign text: over 1048576 bytes of YAML"):
        gd.campaign_data("jobs: []\n" + "#" * (1 << 20))
    with pytest.raises(ConfigError, match="must be a mapping, got list"):
        gd.campaign_data("- a\n")
    with pytest.raises(ConfigError, match="YAML text or a mapping, got bytes"):
        gd.campaign_data(b"jobs: []")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"jobs\[0\]\.epochs"):
        gd.train_campaign({"site": "emulated", "jobs": [{**JOB, "epochs": 0}]})


def test_the_endpoint_settings_fill_in_what_the_campaign_leaves_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert gd.endpoint_settings({"jobs": []}) == {"jobs": []}
    monkeypatch.setenv(gd.ENV_SITE, "slurm-test")
    monkeypatch.setenv(gd.ENV_MAX_HARVESTED, "3")
    monkeypatch.setenv(gd.ENV_ADDRESS, "10.0.0.7")
    filled = gd.endpoint_settings({"jobs": []})
    assert filled["site"] == "slurm-test"
    assert filled["site_overrides"] == {"max_harvested_nodes": 3, "address": "10.0.0.7"}
    own = gd.endpoint_settings({"site": "emulated", "site_overrides": {"max_harvested_nodes": 2}})
    assert own["site"] == "emulated"
    assert own["site_overrides"] == {"max_harvested_nodes": 2, "address": "10.0.0.7"}
    monkeypatch.setenv(gd.ENV_MAX_HARVESTED, "many")
    with pytest.raises(ConfigError, match="PM_GLOBUS_MAX_HARVESTED_NODES='many'"):
        gd.endpoint_settings({})


def test_the_default_folder_is_the_campaigns_own(tmp_path: Path) -> None:
    one = parse_campaign({"jobs": [JOB]})
    other = parse_campaign({"jobs": [{**JOB, "epochs": 3}]})
    folder = gd.output_folder(one, None, "campaign", tmp_path)
    assert folder.parent == tmp_path / gd.DEFAULT_ROOT
    assert folder.name.startswith("campaign-")
    # The same campaign sent again resumes in its folder; another gets its own.
    assert gd.output_folder(parse_campaign({"jobs": [JOB]}), None, "campaign", tmp_path) == folder
    assert gd.output_folder(other, None, "campaign", tmp_path) != folder
    assert gd.output_folder(one, "runs/x", "campaign", tmp_path) == tmp_path / "runs" / "x"
    assert gd.output_folder(one, "/abs/x", "campaign", tmp_path) == Path("/abs/x")
    with_output = parse_campaign({"jobs": [JOB], "output": "out/x"})
    assert gd.output_folder(with_output, None, "campaign", tmp_path) == tmp_path / "out" / "x"
    with pytest.raises(ConfigError, match="names a folder"):
        gd.output_folder(one, None, "../up", tmp_path)


def test_check_campaign_names_the_job_and_imports_the_app() -> None:
    spec = gd.check_campaign(
        "jobs:\n  - {name: a, app: 'parsl_malleable.apps.digits:train_elastic'}\n"
    )
    assert [job.name for job, _ in spec.expanded()] == ["a"]
    with pytest.raises(ConfigError, match=r"jobs\[0\]\.app: cannot import 'no_such_app'"):
        gd.check_campaign({"jobs": [{**JOB, "app": "no_such_app:train"}]})
