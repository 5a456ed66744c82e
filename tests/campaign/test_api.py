"""``run_campaign(spec, output)``: a campaign from Python with the spec of its YAML file.

The fast tests check that a mapping, a ``Campaign`` and a file are validated alike (the YAML
loader's messages, nothing written on a bad spec); the slow one runs a campaign given as a
mapping on the emulated site in a fresh interpreter, as a notebook would, and calls it again.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

import parsl_malleable.campaign as campaign_package
from parsl_malleable.campaign.api import campaign_from, run_campaign
from parsl_malleable.campaign.spec import Campaign, JobEntry, load_campaign
from parsl_malleable.errors import ConfigError
from tests.campaign import runs

DIGITS = "parsl_malleable.apps.digits:train_elastic"


def _spec(**changes: Any) -> dict[str, Any]:
    return {
        "site": "emulated",
        "time_limit_s": 120,
        "jobs": [{"name": "a", "app": DIGITS, "epochs": 2, "args": {"lr": 0.05}}],
        "sweeps": [{"name": "s", "app": DIGITS, "epochs": 1, "grid": {"lr": [0.01, 0.02]}}],
        **changes,
    }


def test_a_mapping_a_model_and_a_file_give_the_same_campaign(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_spec()))
    from_file, source = campaign_from(path, source="python:x")
    assert source == str(path)
    from_data, source = campaign_from(_spec(), source="python:x")
    assert source == "python:x"
    from_model, _ = campaign_from(from_data, source="python:x")
    assert from_file == from_data == from_model == load_campaign(path)
    assert [job.name for job, _ in from_data.expanded()] == ["a", "s-0", "s-1"]
    on_site, _ = campaign_from(path, source="python:x", site="local-slurm")
    assert (on_site.site, on_site.site_overrides) == ("local-slurm", {})


def test_a_bad_mapping_gets_the_yaml_loaders_message(tmp_path: Path) -> None:
    bad = _spec(jobs=[{"name": "a", "app": DIGITS, "epoch": 2, "max_nodes": 0}])
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    with pytest.raises(ConfigError) as from_file:
        load_campaign(path)
    with pytest.raises(ConfigError) as from_data:
        run_campaign(bad, tmp_path / "out")
    message = str(from_file.value).removeprefix(f"{path}: ")
    assert "jobs[0].epoch: unknown key" in message and "jobs[0].max_nodes" in message
    assert str(from_data.value) == f"python:campaign: {message}"
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_a_model_built_without_validation_is_validated_again(tmp_path: Path) -> None:
    job = JobEntry.model_construct(name="a", app=DIGITS, max_nodes=0)
    with pytest.raises(ConfigError, match=r"jobs\[0\]\.max_nodes: Input should be greater"):
        run_campaign(Campaign.model_construct(jobs=[job]), tmp_path / "out")
    twice = Campaign(jobs=[JobEntry(name="a", app=DIGITS)] * 2)  # valid field by field
    with pytest.raises(ConfigError, match="job name 'a' is used twice"):
        run_campaign(twice, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("limit", [math.nan, math.inf, 0, -5, "60"])
def test_a_bad_time_limit_is_refused(tmp_path: Path, limit: Any) -> None:
    with pytest.raises(ConfigError, match="run_campaign: time_limit_s must be"):
        run_campaign(_spec(), tmp_path / "out", time_limit_s=limit)


def test_what_is_no_campaign_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"a campaign is a mapping .* got list"):
        run_campaign([_spec()], tmp_path / "out")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="no such file"):
        run_campaign(tmp_path / "missing.yaml", tmp_path / "out")


def test_the_package_exports_it_lazily() -> None:
    assert campaign_package.run_campaign is run_campaign
    assert campaign_package.Campaign is Campaign
    assert {"Campaign", "run_campaign"} <= set(dir(campaign_package))


KEEPS_BACKEND = """
import sys
from pathlib import Path
import matplotlib
matplotlib.use("module://matplotlib_inline.backend_inline")  # what a Jupyter kernel runs with
from parsl_malleable.campaign.api import _write
from parsl_malleable.campaign.store import CampaignStore
store = CampaignStore(Path(sys.argv[1]))
store.sync_jobs([("a", {"app": "m:f"}, {})])
store.close()
frame, files = _write(Path(sys.argv[1]))
print(matplotlib.get_backend(), len(frame), len(files))
"""


def test_writing_the_results_leaves_a_notebooks_plot_backend_alone(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", KEEPS_BACKEND, str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    backend, rows, files = done.stdout.split()
    assert backend == "module://matplotlib_inline.backend_inline"  # not Agg, as plots.py sets
    assert (rows, int(files) >= 4) == ("1", True)
    assert (tmp_path / "out" / "results.csv").is_file()


# ------------------------------------------------------------------------------------- live

APP = '''"""A tiny training function: six commits of a linear model."""

import torch


def train(ctx, steps: int = 6):
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    state = ctx.state(model, optimizer)

    def loop(state):
        while state.step < steps:
            optimizer.zero_grad()
            model(torch.ones(4, 2)).pow(2).mean().backward()
            ctx.allreduce_gradients(model)
            optimizer.step()
            state.commit()
        return {"steps": state.step}

    return ctx.run(loop, state)
'''

# What a notebook cell does; the frame and its attrs come back as JSON on the last line.
CALL = """
import json, sys
from parsl_malleable.campaign import run_campaign
spec, output, limit = json.loads(sys.argv[1]), sys.argv[2], float(sys.argv[3])
frame = run_campaign(spec, output, time_limit_s=limit)
print(json.dumps({"rows": json.loads(frame.to_json(orient="records")), "attrs": frame.attrs}))
"""


def _call(spec: dict[str, Any], output: Path, limit: float) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", CALL, json.dumps(spec), str(output), str(limit)],
        env=runs.env(),
        capture_output=True,
        text=True,
        timeout=480,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_mapping_trains_and_comes_back_as_the_results_table(tmp_path: Path) -> None:
    (tmp_path / "tiny_app.py").write_text(APP)  # the user's module (see test_job_log.py)
    job = {"app": "tiny_app:train", "max_nodes": 1, "checkpoint_every": 2}
    spec = {
        "site": "emulated",
        "python_path": [str(tmp_path)],
        "jobs": [{"name": "one", **job}, {"name": "two", **job, "args": {"steps": 4}}],
    }
    output = tmp_path / "out"
    first = _call(spec, output, 300)
    assert first["attrs"]["outcome"] == "finished", first
    rows = {row["job"]: row for row in first["rows"]}
    assert {name: (r["status"], r["result.steps"]) for name, r in rows.items()} == {
        "one": ("done", 6),
        "two": ("done", 4),
    }
    # The table returned is the one written, as `run` writes it.
    written = pd.read_csv(output / "results.csv")
    assert list(written["job"]) == ["one", "two"]
    assert list(written["result.steps"]) == [6, 4]
    for name in ("results.parquet", "gantt.png", "nodes.png"):
        assert str(output / name) in first["attrs"]["files"]
        assert (output / name).is_file()
    # Called again with another time limit: the same campaign (the limit is the call's), so it
    # resumes its folder and finds nothing to do.
    again = _call(spec, output, 200)
    assert again["attrs"]["outcome"] == "nothing to do", again
    assert again["attrs"]["run"] == 2
    assert [r["status"] for r in again["rows"]] == ["done", "done"]
