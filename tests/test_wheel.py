"""What a normal (non-editable) ``pip install`` gives a user: site profiles, example apps, data.

The wheel maps ``parsl_malleable.site_profiles`` to ``providers/`` and ``parsl_malleable.apps`` to
``apps/`` (pyproject.toml, ``[tool.setuptools]``); ``parsl_malleable/data`` is package data. The
slow test builds the wheel from a copy of the checkout, installs it into a fresh venv and uses it
from a folder outside the repository.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
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

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
PROFILES = sorted(p.stem for p in (REPO / "providers").glob("*.yaml"))
APPS = sorted(p.stem for p in (REPO / "apps").glob("*.py") if p.stem != "__init__")
# Not copied into the build folder: VCS data, build outputs, caches, run outputs.
SKIP = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", "out", "runinfo", "*.egg-info", "__pycache__",
    ".pytest_cache", ".ruff_cache", ".hypothesis", "*.parquet",
)  # fmt: skip


def test_package_list_covers_every_package_in_the_tree() -> None:
    """``packages`` is a list (package-dir rules out find): a new subpackage must be added."""
    on_disk = {
        ".".join(init.parent.relative_to(REPO).parts)
        for init in (REPO / "parsl_malleable").rglob("__init__.py")
    }
    mapped = PYPROJECT["package-dir"]
    assert mapped == {
        "parsl_malleable.apps": "apps",
        "parsl_malleable.globus_endpoint": "configs/globus",
        "parsl_malleable.site_profiles": "providers",
    }
    assert set(PYPROJECT["packages"]) == on_disk | set(mapped)
    assert PYPROJECT["package-data"]["parsl_malleable.site_profiles"] == ["*.yaml"]
    assert PROFILES and APPS == ["cnn", "digits", "lm", "precision"]


def test_env_folders_come_first_and_the_error_lists_every_folder(tmp_path, monkeypatch) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "perlmutter.yaml").write_text("name: my-perlmutter\n")
    monkeypatch.setenv(PROFILE_PATH_ENV, f"{tmp_path / 'empty'}{os.pathsep}{mine}")
    assert find_profile("perlmutter") == mine / "perlmutter.yaml"
    assert load_profile("perlmutter").name == "my-perlmutter"
    assert find_profile("polaris") == REPO_PROFILES / "polaris.yaml"  # the shipped ones next
    assert profile_folders() == [tmp_path / "empty", mine, REPO_PROFILES]
    with pytest.raises(ConfigError) as err:
        find_profile("nosuchsite")
    message = str(err.value)
    for folder in (tmp_path / "empty", mine, REPO_PROFILES):
        assert str(folder) in message
    assert PROFILE_PATH_ENV in message


def test_error_without_env_still_names_the_variable(monkeypatch) -> None:
    monkeypatch.delenv(PROFILE_PATH_ENV, raising=False)
    with pytest.raises(ConfigError, match=rf"no nosuchsite\.yaml in {REPO_PROFILES}.*\$"
                       rf"{PROFILE_PATH_ENV}"):  # fmt: skip
        find_profile("nosuchsite")


# Run by the venv's Python, from a folder outside the repository.
CHECK = r"""
import importlib, json, subprocess, sys
from pathlib import Path

venv, profiles, apps = Path(sys.argv[1]).resolve(), sys.argv[2].split(","), sys.argv[3].split(",")
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
def test_wheel_installs_profiles_apps_and_data(tmp_path: Path) -> None:
    source = tmp_path / "src"
    shutil.copytree(REPO, source, ignore=SKIP)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", PROFILE_PATH_ENV)}
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", tmp_path / "dist", source],
        check=True, cwd=tmp_path, env=env,
    )  # fmt: skip
    (wheel,) = (tmp_path / "dist").glob("parsl_malleable-*.whl")

    venv = tmp_path / "venv"
    # System site-packages give it torch, parsl, ... (no download); pip comes from there too.
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv], check=True
    )
    python = venv / "bin" / "python"
    subprocess.run(
        [python, "-m", "pip", "--disable-pip-version-check", "-q", "install", "--no-deps",
         "--no-index", "--force-reinstall", wheel],
        check=True, cwd=tmp_path, env=env,
    )  # fmt: skip

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.run(
        [python, "-c", CHECK, venv, ",".join(PROFILES), ",".join(APPS)],
        capture_output=True, text=True, cwd=outside, env=env, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert Path(result["root"]).is_relative_to(venv)
    assert not Path(result["root"]).is_relative_to(REPO)
    assert sorted(result["profiles"]) == PROFILES
    assert result["profiles"]["perlmutter"] == "slurm"
    assert result["provider"] == load_profile("perlmutter").name
    assert result["apps"]["digits"] == ["train_ddp", "train_elastic", "train_reference"]
    assert result["apps"]["cnn"] == result["apps"]["lm"] == ["train_elastic"]
    assert (result["jobs"], result["nodes"]) == (3_170, 120)
    assert "3170" in result["cli"].replace(",", "")
