"""Repository-level checks: the README's commands are the ones CI runs, and the CLI loads."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from parsl_malleable.cli import SUBCOMMANDS, main

REPO = Path(__file__).resolve().parents[1]


def _readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    return re.findall(r"```(?:bash|sh)\n(.*?)\n```", text, flags=re.S)


def test_readme_opens_with_setup_and_test_commands() -> None:
    commands = _readme_commands()
    assert len(commands) >= 2
    assert "pip install" in commands[0] and "parsl-malleable" in commands[0]
    assert "pytest" in commands[1]


def test_ci_runs_the_readme_test_command() -> None:
    test_command = _readme_commands()[1].strip().splitlines()[-1]
    ci_lines = [ln.strip() for ln in (REPO / ".ci" / "run").read_text().splitlines()]
    assert test_command in ci_lines


def test_cli_help_lists_every_subcommand() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0, result.output
    for name in SUBCOMMANDS:
        assert name in result.output


def test_every_subcommand_imports() -> None:
    for name in SUBCOMMANDS:
        command = main.get_command(None, name)  # type: ignore[arg-type]
        assert command is not None and command.name == name


def test_console_script_help_does_not_import_torch() -> None:
    code = (
        "import sys; from parsl_malleable.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "assert 'torch' not in sys.modules, 'torch imported by --help'"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
