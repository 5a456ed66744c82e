"""YAML with limits: campaign files, site profiles and the Globus driver's campaign text share
one loader that refuses anchors and aliases (a "billion laughs" once made ``validate`` use
1.5 GB and answer nothing in 150 s), files over 1 MiB and deep nesting, naming file and line."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import parsl_malleable.campaign.validate_command  # noqa: F401 (imported before the timing)
from parsl_malleable.campaign import globus_driver
from parsl_malleable.campaign.spec import load_campaign
from parsl_malleable.cli import main
from parsl_malleable.errors import ConfigError
from parsl_malleable.harvest.site_profile import PROFILE_PATH_ENV, load_profile
from parsl_malleable.inputs import MAX_YAML_BYTES, load_yaml_file

REPO = Path(__file__).resolve().parents[2]
REFUSED = (
    "YAML anchors and aliases (&name, *name) are not allowed here (nested ones can expand a "
    "few lines to gigabytes); write the values out in full"
)


def bomb(levels: int = 9) -> str:
    """A campaign whose one job argument is a billion laughs (9**9 strings once expanded)."""
    lines = ["site: emulated", f"python_path: [{REPO}]", "jobs:", "  - name: a"]
    lines += ["    app: apps.digits:train_elastic", "    args:"]
    lines.append('      l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]')
    for level in range(1, levels):
        refs = ",".join([f"*l{level - 1}"] * 9)
        lines.append(f"      l{level}: &l{level} [{refs}]")
    return "\n".join(lines) + "\n"


def test_the_alias_bomb_is_refused_within_a_second_naming_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(bomb())
    started = time.perf_counter()
    result = CliRunner().invoke(main, ["validate", str(path)])
    took = time.perf_counter() - started
    assert result.exit_code == 1, result.output
    assert result.output == f"Error: {path}:7: {REFUSED}\n"  # the first anchor's line
    assert took < 1.0, f"validate took {took:.2f} s"
    # The campaign loader (what `run` uses) says the same.
    started = time.perf_counter()
    with pytest.raises(ConfigError) as err:
        load_campaign(path)
    assert time.perf_counter() - started < 1.0
    assert str(err.value) == f"{path}:7: {REFUSED}"


def test_one_alias_is_refused_too_and_plain_yaml_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("jobs:\n  - &job {name: a, app: 'm:f'}\n  - *job\n")
    with pytest.raises(ConfigError) as err:
        load_yaml_file(path, "campaign")
    assert str(err.value) == f"{path}:2: {REFUSED}"
    path.write_text("jobs:\n  - {name: a, app: 'm:f', args: {note: 'a & b *c'}}\n")
    assert load_yaml_file(path, "campaign") == {
        "jobs": [{"name": "a", "app": "m:f", "args": {"note": "a & b *c"}}]
    }


def test_a_file_over_the_size_limit_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("jobs: []\n" + "#" * MAX_YAML_BYTES)
    with pytest.raises(ConfigError) as err:
        load_campaign(path)
    assert str(err.value) == (
        f"campaign {path}: over 1048576 bytes; a campaign file is a few kB (this is not the file "
        "you meant, or it was generated wrongly)"
    )


def test_deep_nesting_is_refused_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text("site: emulated\njobs: " + "[" * 100_000 + "\n")
    with pytest.raises(ConfigError) as err:
        load_campaign(path)
    assert str(err.value) == f"{path}:2: nested more than 64 levels deep"


def test_site_profiles_and_the_sites_command_use_the_same_loader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "sites"
    folder.mkdir()
    profile = folder / "laughs.yaml"
    profile.write_text("name: laughs\nscheduler: slurm\nextra: &x [1, 2]\nmore: *x\n")
    with pytest.raises(ConfigError) as err:
        load_profile(profile)
    assert str(err.value) == f"{profile}:3: {REFUSED}"
    monkeypatch.setenv(PROFILE_PATH_ENV, str(folder))
    listed = CliRunner().invoke(main, ["sites", "--json"])
    assert listed.exit_code == 0, listed.output
    (row,) = [p for p in json.loads(listed.output)["profiles"] if p["name"] == "laughs"]
    assert row["scheduler"] == f"(unreadable: {profile}:3: {REFUSED})"


def test_the_globus_driver_refuses_the_bomb_in_campaign_text() -> None:
    started = time.perf_counter()
    with pytest.raises(ConfigError) as err:
        globus_driver.campaign_data(bomb())
    assert time.perf_counter() - started < 1.0
    assert str(err.value) == f"campaign text (line 7): {REFUSED}"


def test_a_fifo_in_place_of_the_file_is_refused_without_hanging(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    os.mkfifo(path)
    with pytest.raises(ConfigError) as err:
        load_yaml_file(path, "campaign")
    assert str(err.value) == f"campaign {path}: not a regular file"


def validate_line(path: Path, *command: str) -> str:
    """What ``validate`` (or another command) says about ``path``: the one line of a refusal,
    exit status 1, no traceback."""
    out = CliRunner().invoke(main, [*(command or ("validate",)), str(path)])
    assert out.exit_code == 1 and isinstance(out.exception, SystemExit), out.output
    assert "Traceback" not in out.output and out.output.count("\n") == 1, out.output
    return out.output.removeprefix("Error: ").removesuffix("\n")


def test_a_fifo_as_the_campaign_reads_not_a_regular_file_not_no_such_file(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    os.mkfifo(path)  # nothing writes to it: a reader that opened it blocking would hang
    expected = f"campaign {path}: not a regular file (a FIFO); give the campaign's YAML file"
    assert validate_line(path) == expected
    assert validate_line(path, "run", "--dry-run") == expected
    assert validate_line(path, "run") == expected
    with pytest.raises(ConfigError, match="no such file"):
        load_campaign(tmp_path / "gone.yaml")


def test_a_binary_file_is_refused_in_one_line_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes(b"site: emulated\n\x7fELF\x02\x01\x01\x00\xd0\x90\xff\n")
    assert validate_line(path) == (
        f"{path}:2: not UTF-8 text (byte 0xff at offset 25: invalid start byte); a YAML file is "
        "UTF-8 text: is this the file you meant? (re-save it as UTF-8)"
    )
    path.write_bytes(b"site: emulated\njobs: []\n\x00\x01\n")  # UTF-8, but control characters
    assert validate_line(path, "run", "--dry-run") == (
        f"{path}:3: not YAML text: character U+0000 at offset 24 is not allowed (special "
        "characters are not allowed); is this the file you meant?"
    )


def test_a_latin_1_file_is_refused_in_one_line_naming_the_byte(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes(
        "site: emulated\njobs:\n  - {name: a, app: 'm:f', args: {city: 'Zürich'}}\n".encode(
            "latin-1"
        )
    )
    assert validate_line(path) == (
        f"{path}:3: not UTF-8 text (byte 0xfc at offset 62: invalid start byte); a YAML file is "
        "UTF-8 text: is this the file you meant? (re-save it as UTF-8)"
    )
    with pytest.raises(ConfigError, match=r"campaign text \(line 1\): not YAML text"):
        globus_driver.campaign_data("site: \x00")


def test_a_key_given_twice_is_refused_with_the_key_and_its_lines(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "site: emulated\njobs:\n  - name: a\n    app: 'm:f'\n    epochs: 1\n    epochs: 5\n"
    )
    assert validate_line(path) == (
        f"{path}:6: key 'epochs' is given twice in one mapping (lines 5 and 6); YAML would keep "
        "only the last: keep one"
    )
    path.write_text("jobs: [{name: a, app: 'm:f', name: b}]\n")
    with pytest.raises(
        ConfigError, match=r"key 'name' is given twice in one mapping \(lines 1 and 1\)"
    ):
        load_yaml_file(path, "campaign")
    # the same key in two mappings, and YAML's merge key, are fine
    path.write_text("a: {x: 1}\nb: {x: 2}\nc:\n  <<: {x: 3}\n  y: 4\n")
    assert load_yaml_file(path, "campaign") == {"a": {"x": 1}, "b": {"x": 2}, "c": {"x": 3, "y": 4}}
