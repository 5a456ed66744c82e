"""What a normal (non-editable) ``pip install`` gives a user: site profiles, example apps and
campaigns, data, and commands that run from any folder.

The wheel maps ``parsl_malleable.site_profiles`` to ``providers/``, ``parsl_malleable.apps`` to
``apps/``, ``parsl_malleable.campaign_examples`` to ``configs/`` and ``parsl_malleable.notebooks``
to ``docs/notebooks/`` (pyproject.toml, ``[tool.setuptools]``); ``parsl_malleable/data`` is
package data. The slow tests share one wheel installed in a fresh venv (tests/wheel_venv.py) and
use it from empty folders outside the repository; tests/test_notebook.py runs the notebook and
tests/test_getting_started.py the getting-started pages from the same install.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import tomllib
from pathlib import Path

import pytest

from parsl_malleable.errors import ConfigError
from parsl_malleable.harvest.site_profile import (
    PROFILE_PATH_ENV,
    REPO_PROFILES,
    find_profile,
    load_profile,
    profile_folders,
)
from tests.wheel_venv import WheelVenv, wheel_venv_fixture  # noqa: F401 (the fixture)

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
PROFILES = sorted(p.stem for p in (REPO / "providers").glob("*.yaml"))
APPS = sorted(p.stem for p in (REPO / "apps").glob("*.py") if p.stem != "__init__")
EXAMPLES = sorted(p.stem for p in (REPO / "configs").glob("*.yaml"))


def test_package_list_covers_every_package_in_the_tree() -> None:
    """``packages`` is a list (package-dir rules out find): a new subpackage must be added."""
    on_disk = {
        ".".join(init.parent.relative_to(REPO).parts)
        for init in (REPO / "parsl_malleable").rglob("__init__.py")
    }
    mapped = PYPROJECT["package-dir"]
    assert mapped == {
        "parsl_malleable.apps": "apps",
        "parsl_malleable.campaign_examples": "configs",
        "parsl_malleable.globus_endpoint": "configs/globus",
        "parsl_malleable.notebooks": "docs/notebooks",
        "parsl_malleable.site_profiles": "providers",
    }
    assert set(PYPROJECT["packages"]) == on_disk | set(mapped)
    data = PYPROJECT["package-data"]
    assert data["parsl_malleable.site_profiles"] == ["*.yaml"]
    # Top-level files only: configs/globus/ is its own package (globus_endpoint).
    assert data["parsl_malleable.campaign_examples"] == ["*.yaml"]
    assert data["parsl_malleable.notebooks"] == ["*.ipynb"]
    assert PROFILES and APPS == ["cnn", "digits", "lm", "precision"]
    assert EXAMPLES == ["asha", "demo", "examples"]


def test_env_folders_come_first_and_the_error_lists_every_folder(tmp_path, monkeypatch) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "perlmutter.yaml").write_text("name: my-perlmutter\n")
    monkeypatch.setenv(PROFILE_PATH_ENV, f"{tmp_path / 'empty'}{os.pathsep}{mine}")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    user = tmp_path / "config" / "parsl-malleable" / "sites"  # the user's folder, then shipped
    assert find_profile("perlmutter") == mine / "perlmutter.yaml"
    assert load_profile("perlmutter").name == "my-perlmutter"
    assert find_profile("polaris") == REPO_PROFILES / "polaris.yaml"  # the shipped ones last
    assert profile_folders() == [tmp_path / "empty", mine, user, REPO_PROFILES]
    with pytest.raises(ConfigError) as err:
        find_profile("nosuchsite")
    message = str(err.value)
    for folder in (tmp_path / "empty", mine, user, REPO_PROFILES):
        assert str(folder) in message
    assert PROFILE_PATH_ENV in message


def test_error_without_env_still_names_the_variable(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(PROFILE_PATH_ENV, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    user = re.escape(str(tmp_path / "parsl-malleable" / "sites"))
    with pytest.raises(ConfigError, match=rf"no nosuchsite\.yaml in {user}, {REPO_PROFILES}.*\$"
                       rf"{PROFILE_PATH_ENV}"):  # fmt: skip
        find_profile("nosuchsite")


# Run by the venv's Python, from a folder outside the repository.
CHECK = r"""
import importlib, json, subprocess, sys
from pathlib import Path

venv, profiles, apps, examples = (
    Path(sys.argv[1]).resolve(), sys.argv[2].split(","), sys.argv[3].split(","),
    sys.argv[4].split(","),
)
import parsl_malleable
root = Path(parsl_malleable.__file__).resolve().parent
assert root.is_relative_to(venv), f"parsl_malleable imported from {root}, not the venv {venv}"

from parsl_malleable.harvest.site_profile import find_profile, load_profile
loaded = {}
for name in profiles:
    path = find_profile(name)
    assert path.resolve().parent == root / "site_profiles", path
    loaded[name] = load_profile(name).scheduler

from parsl_malleable.provider import BackfillProvider
provider = BackfillProvider("perlmutter", autostart=False)   # the README's first line

modules = {}
for name in apps:
    module = importlib.import_module(f"parsl_malleable.apps.{name}")
    assert Path(module.__file__).resolve().is_relative_to(root / "apps"), module.__file__
    modules[name] = sorted(k for k in vars(module) if k.startswith("train"))

from parsl_malleable.globus_endpoint import folder, hook_folder
endpoint = sorted(p.name for p in folder().iterdir() if p.is_file() and p.suffix != ".py")
assert endpoint == ["config.yaml", "user_config_schema.json", "user_config_template.yaml.j2",
                    "user_environment.yaml"], endpoint
assert (hook_folder() / "sitecustomize.py").is_file() and folder().is_relative_to(root)

from parsl_malleable.campaign.examples import example_names, example_path, notebook_path
assert example_names() == examples, example_names()
for name in examples:
    assert example_path(name).parent == root / "campaign_examples", example_path(name)
assert notebook_path().parent == root / "notebooks", notebook_path()
shipped = sorted(p.name for p in (root / "campaign_examples").rglob("*"))
assert shipped == [f"{name}.yaml" for name in examples], shipped  # not configs/globus/

from parsl_malleable import data
from parsl_malleable.traces import read_trace
trace_path = data.path("hpc2n.swf")
assert trace_path.resolve().is_relative_to(root / "data"), trace_path
trace = read_trace(trace_path)
cli = subprocess.run(
    [str(Path(sys.executable).parent / "parsl-malleable"), "trace", str(trace_path)],
    capture_output=True, text=True, check=True,
)
print(json.dumps({
    "root": str(root), "profiles": loaded, "provider": provider.profile.name, "apps": modules,
    "jobs": len(trace.jobs), "nodes": trace.machine.nodes, "cli": cli.stdout,
}))
"""


@pytest.mark.slow
def test_wheel_installs_profiles_apps_and_data(wheel_venv: WheelVenv) -> None:
    outside = wheel_venv.empty_folder("check")
    proc = wheel_venv.run(
        [wheel_venv.python, "-c", CHECK, wheel_venv.venv, ",".join(PROFILES), ",".join(APPS),
         ",".join(EXAMPLES)],
        cwd=outside,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert Path(result["root"]).is_relative_to(wheel_venv.venv)
    assert not Path(result["root"]).is_relative_to(REPO)
    assert sorted(result["profiles"]) == PROFILES
    assert result["profiles"]["perlmutter"] == "slurm"
    assert result["provider"] == load_profile("perlmutter").name
    assert result["apps"]["digits"] == ["train_ddp", "train_elastic", "train_reference"]
    assert result["apps"]["cnn"] == result["apps"]["lm"] == ["train_elastic"]
    assert (result["jobs"], result["nodes"]) == (3_170, 120)
    assert "3170" in result["cli"].replace(",", "")


def _trained_steps(folder: Path) -> dict[str, int]:
    """Per job, the last step checkpointed in a campaign's output folder."""
    steps: dict[str, int] = {}
    for ckpt in (folder / "checkpoints").glob("*/ckpt-*.pt"):
        step = int(re.fullmatch(r"ckpt-(\d+)\.pt", ckpt.name).group(1))
        steps[ckpt.parent.name] = max(step, steps.get(ckpt.parent.name, 0))
    return steps


@pytest.mark.slow
def test_wheel_runs_the_demo_from_an_empty_folder(wheel_venv: WheelVenv) -> None:
    """``parsl-malleable run --demo``, the shipped campaign, trains from a folder with nothing
    in it: its apps come from the installed package, its output goes under the folder."""
    here = wheel_venv.empty_folder("demo")
    # 60 s: the emulated site starts blocks within seconds and the demo checkpoints every 50
    # steps (~5 s of training), so there are checkpoints well before the limit on 2 cores.
    proc = wheel_venv.run(
        ["parsl-malleable", "run", "--demo", "--time-limit", "60", "--quiet"], cwd=here
    )
    # 3: the time limit came first (jobs can resume); 0: the demo finished within it.
    assert proc.returncode in (0, 3), proc.stderr[-4000:]
    out = here / "out" / "demo"
    assert (out / "results.csv").is_file(), sorted(p.name for p in here.rglob("*"))
    steps = _trained_steps(out)
    assert steps and max(steps.values()) >= 50, steps
    with sqlite3.connect(out / "state.sqlite") as db:
        jobs = dict(db.execute("SELECT name, node_seconds FROM jobs"))
    assert set(steps) <= set(jobs) and len(jobs) == 5, jobs  # the demo's 4 sweep points + deep
    assert all(jobs[name] > 0 for name in steps), jobs
    assert sorted(p.name for p in here.iterdir()) == ["out"]  # nothing written elsewhere


@pytest.mark.slow
def test_wheel_init_writes_a_campaign_and_refuses_to_overwrite(wheel_venv: WheelVenv) -> None:
    here = wheel_venv.empty_folder("init")
    first = wheel_venv.run(["parsl-malleable", "init"], cwd=here, timeout=60)
    assert first.returncode == 0, first.stderr
    assert "parsl-malleable run demo.yaml" in first.stdout
    shipped = (REPO / "configs" / "demo.yaml").read_text()
    assert (here / "demo.yaml").read_text() == shipped
    (here / "demo.yaml").write_text("# mine\n")
    again = wheel_venv.run(["parsl-malleable", "init"], cwd=here, timeout=60)
    assert again.returncode == 1 and "--force" in again.stderr, again.stderr
    assert (here / "demo.yaml").read_text() == "# mine\n"
    notebook = wheel_venv.run(["parsl-malleable", "init", "--notebook", "nb"], cwd=here, timeout=60)
    assert notebook.returncode == 0, notebook.stderr
    notebook_text = (REPO / "docs" / "notebooks" / "login-node.ipynb").read_text()
    assert (here / "nb" / "login-node.ipynb").read_text() == notebook_text


@pytest.mark.slow
def test_wheel_sites_lists_the_shipped_profiles(wheel_venv: WheelVenv) -> None:
    proc = wheel_venv.run(["parsl-malleable", "sites"], cwd=wheel_venv.empty_folder("sites"))
    assert proc.returncode == 0, proc.stderr[-4000:]
    for name in ("perlmutter", "emulated"):
        assert re.search(rf"\b{name}\b", proc.stdout), proc.stdout
    assert str(wheel_venv.venv) in proc.stdout.replace("\n", "")  # the wheel's own folder
