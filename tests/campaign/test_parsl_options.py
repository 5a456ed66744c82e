"""The campaign's ``parsl:`` section: Parsl ``Config`` options, checked like the rest of the file
and applied where the runner builds its Config."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from parsl_malleable.campaign.runner import check_parsl_options, parsl_config
from parsl_malleable.campaign.spec import parse_campaign
from parsl_malleable.errors import ConfigError

JOBS = {"jobs": [{"name": "a", "app": "m:f"}]}


def test_parsl_options_reach_the_config(tmp_path: Path) -> None:
    campaign = parse_campaign(
        {
            **JOBS,
            "parsl": {
                "retries": 2,
                "run_dir": str(tmp_path / "rd"),
                "app_cache": False,
                "strategy_period": 3,
                "max_idletime": 7,
            },
        }
    )
    config = parsl_config(campaign.parsl, [], run_dir=tmp_path / "default", workflow_name="c")
    assert config.retries == 2
    assert config.run_dir == str(tmp_path / "rd")
    assert config.memoizer.memoize is False
    assert config.strategy_period == 3 and config.max_idletime == 7
    assert config.monitoring is None


def test_without_a_parsl_section_the_runner_defaults_stay(tmp_path: Path) -> None:
    campaign = parse_campaign(JOBS)
    config = parsl_config(campaign.parsl, [], run_dir=tmp_path / "runinfo", workflow_name="c")
    assert config.run_dir == str(tmp_path / "runinfo")
    assert config.retries == 0 and config.strategy_period == 1 and config.strategy == "simple"


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        ({"retry": 2}, "parsl.retry: unknown key (allowed: run_dir, retries, app_cache"),
        ({"monitoring": {"interval": 5}}, "parsl.monitoring.interval: unknown key (allowed: "),
        ({"retries": -1}, "parsl.retries: Input should be greater than or equal to 0"),
        ({"strategy": "fast"}, "parsl.strategy: Input should be 'simple', 'htex_auto_scale'"),
    ],
)
def test_a_bad_parsl_option_is_a_config_error_naming_it(section: dict, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_campaign({**JOBS, "parsl": section}, source="c.yaml")
    assert expected in str(caught.value)
    if "unknown key" in expected and "monitoring" in expected:
        assert "resource_monitoring_interval" in str(caught.value)  # the allowed keys


def test_monitoring_true_or_a_mapping_makes_a_monitoring_hub(tmp_path: Path) -> None:
    on = parse_campaign({**JOBS, "parsl": {"monitoring": True}})
    off = parse_campaign({**JOBS, "parsl": {"monitoring": False}})
    assert on.parsl.monitoring is not None and off.parsl.monitoring is None
    given = parse_campaign(
        {**JOBS, "parsl": {"monitoring": {"resource_monitoring_interval": 5}}}
    ).parsl
    assert given.monitoring is not None
    if importlib.util.find_spec("sqlalchemy") is None:
        # Parsl's monitoring extra is not installed here: refused before anything starts.
        with pytest.raises(ConfigError, match=r"parsl\[monitoring\]"):
            check_parsl_options(given)
        return
    check_parsl_options(given)
    config = parsl_config(given, [], run_dir=tmp_path, workflow_name="demo")
    assert config.monitoring.resource_monitoring_interval == 5
    assert config.monitoring.workflow_name == "demo"


@pytest.mark.slow
def test_a_run_writes_its_logs_into_the_campaigns_parsl_run_dir(tmp_path: Path) -> None:
    """One short emulated run with ``parsl.run_dir``: Parsl's log and ours (the controller's
    decisions) are in runinfo's NNN folder there, and in campaign.log."""
    import yaml

    from tests.campaign import runs

    run_dir = tmp_path / "parsl-runs"
    campaign = tmp_path / "tiny.yaml"
    campaign.write_text(
        yaml.safe_dump(
            {
                "site": "emulated",
                "python_path": [str(runs.REPO)],
                "time_limit_s": 240,
                "parsl": {"run_dir": str(run_dir), "retries": 0},
                "jobs": [
                    {
                        "name": "a",
                        "app": "apps.digits:train_elastic",
                        "epochs": 1,
                        "max_nodes": 1,
                        "total_steps": 45,
                    }
                ],
            }
        )
    )
    output = tmp_path / "out"
    done = runs.run(campaign, output, timeout_s=400)
    assert done.returncode == 0, done.stderr[-4000:]
    folders = sorted(p for p in run_dir.iterdir() if p.is_dir())
    assert [p.name for p in folders] == ["000"], folders
    ours = (folders[0] / "parsl_malleable.log").read_text()
    assert "parsl_malleable.controller.core" in ours and "decision 1 " in ours, ours[-2000:]
    assert (folders[0] / "parsl.log").is_file()  # Parsl's own, beside it
    assert "decision 1 " in (output / "campaign.log").read_text()
    assert not (output / "runinfo").exists()  # the campaign's run_dir replaced the default
    said = "".join(done.stderr.split())
    assert f"Parsl run directory {folders[0]}".replace(" ", "") in said
