"""``parsl-malleable validate`` and ``run --dry-run``: a campaign is checked and its jobs listed
without running anything; ``run --demo`` runs the shipped demo."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from click.testing import CliRunner

from parsl_malleable.campaign.examples import example_path
from parsl_malleable.cli import main

REPO = Path(__file__).resolve().parents[2]
APP = "apps.digits:train_elastic"


def campaign(tmp_path: Path, **changes: object) -> Path:
    data = {
        "site": "emulated",
        "python_path": [str(REPO)],
        "jobs": [{"name": "deep", "app": APP, "epochs": 3, "max_nodes": 2, "priority": 2.0}],
        "sweeps": [
            {
                "name": "hpo",
                "app": APP,
                "epochs": 2,
                "min_nodes": 1,
                "max_nodes": 3,
                "grid": {"lr": [0.05, 0.08], "hidden": [[64], [128]]},
            }
        ],
        **changes,
    }
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_validate_prints_every_expanded_job(tmp_path: Path) -> None:
    out = CliRunner().invoke(main, ["validate", str(campaign(tmp_path))])
    assert out.exit_code == 0, out.output
    for name in ("deep", "hpo-0", "hpo-1", "hpo-2", "hpo-3"):
        assert f"│ {name} " in out.output
    text = " ".join(out.output.split())  # rich wraps to the terminal's width
    assert "5 job(s) on site 'emulated'" in text and "is valid" in text
    assert "│ 1-3 " in out.output and "│ 1-2 " in out.output
    assert "lr=0.08" in text and "hidden=[128]" in text


def test_validate_json_and_run_dry_run_agree(tmp_path: Path) -> None:
    path = campaign(tmp_path)
    checked = CliRunner().invoke(main, ["validate", "--json", str(path)])
    dry = CliRunner().invoke(main, ["run", "--dry-run", "--json", str(path)])
    assert checked.exit_code == dry.exit_code == 0, (checked.output, dry.output)
    jobs = json.loads(checked.output)["jobs"]
    assert jobs == json.loads(dry.output)["jobs"]
    assert [j["name"] for j in jobs] == ["deep", "hpo-0", "hpo-1", "hpo-2", "hpo-3"]
    assert jobs[0]["priority"] == 2.0 and jobs[0]["args"] == {"epochs": 3}
    assert jobs[4]["swept"] == {"lr": 0.08, "hidden": [128]}
    assert (jobs[4]["min_nodes"], jobs[4]["max_nodes"]) == (1, 3)
    assert not (tmp_path / "out").exists()  # nothing ran


def test_a_bad_campaign_exits_1_with_the_reason(tmp_path: Path) -> None:
    cases = {
        "app": ({"jobs": [{"name": "a", "app": "no_such_module:f"}]}, "cannot import"),
        "args": ({"jobs": [{"name": "a", "app": APP, "args": {"lrr": 1}}]}, "jobs[0].args (a)"),
        "site": ({"site": "no-such-site"}, "site:"),
        "size": ({"jobs": [{"name": "a", "app": APP, "min_nodes": 99, "max_nodes": 99}]}, "99"),
        "key": ({"parsl": {"retry": 1}}, "parsl.retry: unknown key"),
    }
    for what, (changes, expected) in cases.items():
        path = campaign(tmp_path, **changes)
        for argv in (["validate", str(path)], ["run", "--dry-run", str(path)]):
            out = CliRunner().invoke(main, argv, terminal_width=400)
            assert out.exit_code == 1, (what, argv, out.output)
            assert expected in out.output, (what, out.output)


def test_demo_and_a_campaign_file_are_exclusive(tmp_path: Path) -> None:
    both = CliRunner().invoke(main, ["run", "--demo", str(campaign(tmp_path))])
    assert both.exit_code == 2 and "not both" in both.output
    neither = CliRunner().invoke(main, ["run"])
    assert neither.exit_code == 2 and "--demo" in neither.output


def test_run_demo_dry_run_lists_the_shipped_demo(tmp_path: Path) -> None:
    out = CliRunner().invoke(main, ["run", "--demo", "--dry-run", "--json"])
    assert out.exit_code == 0, out.output
    shipped = yaml.safe_load(example_path("demo").read_text())
    names = [j["name"] for j in json.loads(out.output)["jobs"]]
    assert len(names) == len(shipped.get("jobs", [])) + sum(
        len(s["grid"]["lr"]) * len(s["grid"]["hidden"]) for s in shipped.get("sweeps", [])
    )
    assert json.loads(out.output)["campaign"] == str(example_path("demo"))


def test_the_demo_writes_into_out_demo_of_the_working_folder(tmp_path: Path) -> None:
    from parsl_malleable.campaign.command import _output_for

    shipped = example_path("demo")
    configured = yaml.safe_load(shipped.read_text()).get("output")
    assert _output_for(shipped, configured, None, demo=True) == Path.cwd() / "out" / "demo"
    assert _output_for(shipped, configured, tmp_path, demo=True) == tmp_path  # -o still wins
