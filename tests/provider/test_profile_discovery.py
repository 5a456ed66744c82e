"""Where a profile name is looked up ($PM_PROVIDER_PROFILES, the user's folder, the shipped
profiles), what an unknown name says, and ``parsl-malleable sites``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from parsl_malleable.errors import ConfigError
from parsl_malleable.harvest.site_profile import (
    PROFILE_PATH_ENV,
    REPO_PROFILES,
    find_profile,
    found_profiles,
    load_profile,
    profile_folders,
    user_profile_folder,
)
from parsl_malleable.harvest.sites_command import sites


@pytest.fixture
def folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """An env folder with its own perlmutter and a user folder with its own polaris and a
    profile of its own; both searched before the shipped ones."""
    env_dir, config = tmp_path / "env", tmp_path / "config"
    user = config / "parsl-malleable" / "sites"
    env_dir.mkdir()
    user.mkdir(parents=True)
    (env_dir / "perlmutter.yaml").write_text("name: env-perlmutter\n")
    (user / "perlmutter.yaml").write_text("name: user-perlmutter\n")
    (user / "polaris.yaml").write_text("name: user-polaris\nscheduler: pbs\nqueue: q\n")
    (user / "mysite.yml").write_text("name: mysite\nscheduler: pbs\nqueue: q\n")
    monkeypatch.setenv(PROFILE_PATH_ENV, str(env_dir))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    return env_dir, user


def test_env_then_user_then_shipped(folders: tuple[Path, Path]) -> None:
    env_dir, user = folders
    assert profile_folders() == [env_dir, user, REPO_PROFILES]
    assert load_profile("perlmutter").name == "env-perlmutter"
    assert load_profile("polaris").name == "user-polaris"
    assert load_profile("mysite").name == "mysite"
    assert find_profile("frontier") == REPO_PROFILES / "frontier.yaml"


def test_user_folder_defaults_to_dot_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    assert user_profile_folder() == Path.home() / ".config" / "parsl-malleable" / "sites"
    # The XDG specification: a relative XDG_CONFIG_HOME is to be ignored.
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/config")
    assert user_profile_folder() == Path.home() / ".config" / "parsl-malleable" / "sites"


def test_shadowed_profiles_are_marked(folders: tuple[Path, Path]) -> None:
    env_dir, user = folders
    found = {(f.name, f.folder): f for f in found_profiles()}
    assert found[("perlmutter", env_dir)].shadowed_by is None
    assert found[("perlmutter", user)].shadowed_by == env_dir / "perlmutter.yaml"
    assert found[("perlmutter", REPO_PROFILES)].shadowed_by == env_dir / "perlmutter.yaml"
    assert found[("polaris", REPO_PROFILES)].shadowed_by == user / "polaris.yaml"
    assert found[("frontier", REPO_PROFILES)].shadowed_by is None
    folders_in_order = [f.folder for f in found_profiles()]
    assert folders_in_order == sorted(folders_in_order, key=profile_folders().index)


def test_a_typo_suggests_the_nearest_names_and_lists_the_rest(
    folders: tuple[Path, Path],
) -> None:
    with pytest.raises(ConfigError) as err:
        find_profile("perlmuter")
    message = str(err.value)
    assert "did you mean perlmutter?" in message
    for folder in profile_folders():
        assert str(folder) in message
    assert "mysite" in message and "frontier" in message  # every profile found
    with pytest.raises(ConfigError) as err:
        find_profile("zzzzzz")
    assert "did you mean" not in str(err.value)


def test_sites_lists_every_profile_in_search_order(folders: tuple[Path, Path]) -> None:
    env_dir, _user = folders
    result = CliRunner().invoke(sites, [])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    rows = [ln for ln in lines if ln.startswith("perlmutter ")]
    assert len(rows) == 3
    assert str(env_dir / "perlmutter.yaml") in rows[0] and "shadowed" not in rows[0]
    assert "shadowed by" in rows[1] and "shadowed by" in rows[2]
    (mysite,) = [ln for ln in lines if ln.startswith("mysite ")]
    assert mysite.split()[1] == "pbs"


def test_sites_json(folders: tuple[Path, Path]) -> None:
    env_dir, user = folders
    result = CliRunner().invoke(sites, ["--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["folders"] == [str(f) for f in (env_dir, user, REPO_PROFILES)]
    by_file = {p["file"]: p for p in data["profiles"]}
    assert by_file[str(user / "polaris.yaml")]["scheduler"] == "pbs"
    assert by_file[str(REPO_PROFILES / "polaris.yaml")]["shadowed_by"] == str(user / "polaris.yaml")
    assert by_file[str(REPO_PROFILES / "perlmutter.yaml")]["scheduler"] == "slurm"


def test_sites_through_the_installed_command(folders: tuple[Path, Path]) -> None:
    exe = shutil.which("parsl-malleable", path=os.path.dirname(sys.executable))
    assert exe, "the parsl-malleable entry point is not installed next to this Python"
    out = subprocess.run(
        [exe, "sites", "--json"], capture_output=True, text=True, timeout=60, check=True
    )
    names = [p["name"] for p in json.loads(out.stdout)["profiles"]]
    assert names[0] == "perlmutter" and "mysite" in names and "slurm-test" in names
