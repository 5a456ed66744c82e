"""``parsl-malleable validate`` and ``run --dry-run``: a campaign is checked and its jobs listed
without running anything; ``run --demo`` runs the shipped demo."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
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


# ------------------------------------------- code that another user could have changed (issue 49)

EVIL = "import pathlib\npathlib.Path({marker!r}).write_text('imported')\n\ndef train(ctx): pass\n"


def _validate(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "parsl_malleable", "validate", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=path.parent,
    )


def _evil_campaign(tmp_path: Path, *, code_mode: int, file_mode: int) -> tuple[Path, Path]:
    """A campaign whose app is a module in ``tmp_path/code`` (that folder and the module file
    with the modes given) that writes a marker file when imported; the campaign and marker."""
    code = tmp_path / "code"
    code.mkdir()
    module = f"pm_app_{uuid.uuid4().hex[:8]}"
    marker = tmp_path / "imported"
    (code / f"{module}.py").write_text(EVIL.format(marker=str(marker)))
    (code / f"{module}.py").chmod(file_mode)
    code.chmod(code_mode)
    data = {
        "site": "emulated",
        "python_path": [str(code)],
        "jobs": [{"name": "j", "app": f"{module}:train"}],
    }
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data))
    return path, marker


def _one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_a_campaign_file_others_can_change_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path, marker = _evil_campaign(tmp_path, code_mode=0o755, file_mode=0o644)
    path.chmod(0o666)
    line = _one_line_error(_validate(path))
    assert f"refusing the campaign file {path}: it has mode 0666" in line
    assert "chmod g-w,o-w" in line
    assert not marker.exists()


def test_a_campaign_file_in_a_folder_others_can_write_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    path, marker = _evil_campaign(shared, code_mode=0o755, file_mode=0o644)
    line = _one_line_error(_validate(path))
    assert f"refusing the campaign file {path}: the folder {shared} above it" in line
    assert not marker.exists()


def test_a_python_path_folder_others_can_write_is_refused_and_nothing_imported(
    tmp_path: Path,
) -> None:
    path, marker = _evil_campaign(tmp_path, code_mode=0o777, file_mode=0o644)
    line = _one_line_error(_validate(path))
    assert f"refusing the python_path folder {tmp_path / 'code'}: it has mode 0777" in line
    assert not marker.exists()


def test_an_app_module_others_can_change_is_refused_before_it_is_imported(tmp_path: Path) -> None:
    path, marker = _evil_campaign(tmp_path, code_mode=0o755, file_mode=0o646)
    line = _one_line_error(_validate(path))
    assert "refusing the module pm_app_" in line and "has mode 0646" in line
    assert not marker.exists()
    dry = subprocess.run(
        [sys.executable, "-m", "parsl_malleable", "run", str(path), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "refusing the module pm_app_" in _one_line_error(dry)
    assert not marker.exists()


def test_a_link_of_the_users_own_to_a_safe_campaign_is_accepted(tmp_path: Path) -> None:
    target = campaign(tmp_path)
    link = tmp_path / "link.yaml"
    link.symlink_to(target)
    done = _validate(link)
    assert done.returncode == 0, done.stderr
    assert "is valid" in done.stdout


def test_a_module_the_app_imports_is_checked_before_it_runs(tmp_path: Path) -> None:
    """The app's own module is safe; a helper it imports was left writable by others: the
    helper is refused before it runs (its marker is never written)."""
    path, marker = _evil_campaign(tmp_path, code_mode=0o755, file_mode=0o644)
    code = tmp_path / "code"
    (app,) = code.glob("pm_app_*.py")
    helper = f"pm_helper_{uuid.uuid4().hex[:8]}"
    (code / f"{helper}.py").write_text(EVIL.format(marker=str(tmp_path / "helper-ran")))
    (code / f"{helper}.py").chmod(0o666)
    app.write_text(f"import {helper}\n\ndef train(ctx): pass\n")
    line = _one_line_error(_validate(path))
    assert f"refusing the module {helper} at {code / helper}.py: it has mode 0666" in line
    assert not (tmp_path / "helper-ran").exists()
    assert not marker.exists()


def test_a_site_profile_others_can_change_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """A site profile's ``worker_init`` runs on the blocks as the user: a profile file others
    can change is refused by ``validate``, ``run`` (``--site`` too) before it is read."""
    from parsl_malleable.harvest.site_profile import find_profile

    profile = tmp_path / "site.yaml"
    profile.write_text(find_profile("emulated").read_text())
    profile.chmod(0o666)
    path = campaign(tmp_path, site=str(profile))
    line = _one_line_error(_validate(path))
    assert f"refusing the site profile {profile}: it has mode 0666" in line
    run = [sys.executable, "-m", "parsl_malleable", "run", str(campaign(tmp_path))]
    ran = subprocess.run(
        [*run, "--site", str(profile), "-o", str(tmp_path / "out"), "--quiet"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert f"refusing the site profile {profile}" in _one_line_error(ran)
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_the_interpreters_own_installation_is_trusted_whoever_owns_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A site's shared Python (torch and all) often belongs to its software team's account, not
    root; the driver already runs from it, so it is trusted, while the same file elsewhere is
    refused."""
    from parsl_malleable.campaign import trusted_files

    for name in ("prefix", "elsewhere"):
        folder = tmp_path / name
        folder.mkdir()
        module = folder / "shared_module.py"
        module.write_text("X = 1\n")
        os.chown(module, 65534, 65534)
    prefix = os.path.join(os.path.realpath(tmp_path / "prefix"), "")
    monkeypatch.setattr(trusted_files, "_installation_roots", lambda: (prefix,))
    assert trusted_files.trusted_problem(tmp_path / "prefix" / "shared_module.py") is None
    problem = trusted_files.trusted_problem(tmp_path / "elsewhere" / "shared_module.py")
    assert problem is not None and "belongs to uid 65534" in problem
