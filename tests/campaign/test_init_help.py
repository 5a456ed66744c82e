"""``init --help`` points to what a pip install has (it named docs/campaigns.md, which the wheel
does not ship), and no other ``--help`` names a page of docs/ either."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from parsl_malleable.cli import SUBCOMMANDS, main

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_no_help_names_a_docs_page_the_package_does_not_install(name: str) -> None:
    out = CliRunner().invoke(main, [name, "--help"], terminal_width=200)
    assert out.exit_code == 0, out.output
    # docs/*.md stay in the repository (pyproject ships only docs/notebooks/*.ipynb).
    assert not re.search(r"docs/[\w./-]*\.md", out.output), out.output


def test_init_help_points_to_validate_which_names_the_allowed_keys(tmp_path: Path) -> None:
    help_text = CliRunner().invoke(main, ["init", "--help"], terminal_width=200).output
    said = " ".join(help_text.split())
    assert "`parsl-malleable validate FILE` checks it" in said
    assert "the package does not install it" in said  # the documentation, by name only
    # What the help promises, from the installed command: the example, then a typo in it.
    runner = CliRunner()
    with runner.isolated_filesystem(temp_dir=tmp_path):
        assert runner.invoke(main, ["init"]).exit_code == 0
        text = Path("demo.yaml").read_text().replace("    epochs: 15", "    epoch: 15", 1)
        Path("demo.yaml").write_text(text)
        checked = runner.invoke(main, ["validate", "demo.yaml"])
    assert checked.exit_code != 0
    assert re.search(r"\.epoch: unknown key \(allowed: [^)]*\bepochs\b", checked.output), (
        checked.output
    )


# ----------------------------------------------- never written through a link (issue 49)


def test_init_refuses_a_link_named_like_the_example_and_writes_nothing_there(
    tmp_path: Path,
) -> None:
    """A dangling link named ``demo.yaml`` used to be followed: init created the file it
    pointed at. It is refused in one line, with or without --force."""
    target = tmp_path / "elsewhere" / "victim"
    target.parent.mkdir()
    (tmp_path / "demo.yaml").symlink_to(target)
    for extra in ([], ["--force"]):
        out = CliRunner().invoke(main, ["init", str(tmp_path), *extra])
        assert out.exit_code == 1, out.output
        assert f"{tmp_path / 'demo.yaml'} is a symbolic link" in out.output
        assert len(out.output.strip().splitlines()) == 1 and "Traceback" not in out.output
        assert not target.exists()
    target.write_text("keep")
    target.chmod(0o600)
    out = CliRunner().invoke(main, ["init", str(tmp_path), "--force"])
    assert out.exit_code == 1 and target.read_text() == "keep"
    assert (tmp_path / "demo.yaml").is_symlink()


def test_init_force_replaces_a_file_with_a_new_private_one(tmp_path: Path) -> None:
    old = tmp_path / "demo.yaml"
    old.write_text("mine")
    old.chmod(0o644)
    inode = old.stat().st_ino
    kept = CliRunner().invoke(main, ["init", str(tmp_path)])
    assert kept.exit_code == 1 and "exists; left as it is" in kept.output
    assert old.read_text() == "mine"
    out = CliRunner().invoke(main, ["init", str(tmp_path), "--force"])
    assert out.exit_code == 0, out.output
    new = tmp_path / "demo.yaml"
    assert new.read_text().startswith("#") and new.stat().st_ino != inode  # renamed over it
    assert new.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["demo.yaml"]  # no temporary file left


def test_init_force_leaves_a_fifo_as_it_is(tmp_path: Path) -> None:
    fifo = tmp_path / "demo.yaml"
    os.mkfifo(fifo)
    out = CliRunner().invoke(main, ["init", str(tmp_path), "--force"])
    assert out.exit_code == 1 and "is not a regular file" in out.output
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
