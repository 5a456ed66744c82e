"""``init --help`` points to what a pip install has (it named docs/campaigns.md, which the wheel
does not ship), and no other ``--help`` names a page of docs/ either."""

from __future__ import annotations

import re
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
