"""A campaign's apps are checked before a run: arguments against the training function's
annotations (``lr: "fast"`` once passed ``validate`` and failed in a rank with a TypeError that
did not name ``lr``), and a module that fails to import is one line naming file and line (a
``SyntaxError`` was a 42-line traceback through click)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from parsl_malleable.campaign.app_args import ArgTypes
from parsl_malleable.campaign.spec import load_campaign
from parsl_malleable.cli import main
from parsl_malleable.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
APP = "apps.digits:train_elastic"  # lr: float, hidden: tuple[int, ...], batch_size: int


def write(tmp_path: Path, **data: Any) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"site": "emulated", "python_path": [str(REPO)], **data}))
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as err:
        load_campaign(path)
    text = str(err.value)
    assert text.startswith(f"{path}: ")
    # One message lists every problem, each starting with its path in the file.
    parts: list[str] = []
    for piece in text.removeprefix(f"{path}: ").split("; "):
        if piece.startswith(("jobs[", "sweeps[")) or not parts:
            parts.append(piece)
        else:
            parts[-1] += "; " + piece
    return parts


def test_a_job_argument_of_the_wrong_type_is_named_with_the_expected_type(tmp_path: Path) -> None:
    path = write(tmp_path, jobs=[{"name": "a", "app": APP, "args": {"lr": "fast"}}])
    assert problems(path) == [
        "jobs[0].args.lr='fast': train_elastic() takes lr: float; Input should be a valid "
        "number, unable to parse string as a number"
    ]
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 1
    assert "jobs[0].args.lr='fast': train_elastic() takes lr: float" in result.output
    assert "Traceback" not in result.output


def test_lax_numbers_pass_and_quoted_numbers_and_bools_do_not(tmp_path: Path) -> None:
    ok = write(
        tmp_path,
        jobs=[{"name": "a", "app": APP, "args": {"lr": 1, "hidden": [64, 32], "seed": 2}}],
    )
    assert load_campaign(ok).jobs[0].args["lr"] == 1  # an int is a fine float; kept as given
    path = write(
        tmp_path,
        jobs=[
            {"name": "a", "app": APP, "args": {"lr": "0.1", "batch_size": True}},
            {"name": "b", "app": APP, "args": {"hidden": [64, "wide"]}},
        ],
    )
    assert problems(path) == [  # in the file's order (safe_dump sorts the keys)
        "jobs[0].args.batch_size=True: train_elastic() takes batch_size: int; got a bool, "
        "which it would receive as it is (write a plain number)",
        "jobs[0].args.lr='0.1': train_elastic() takes lr: float; got text, which it would "
        "receive as it is (write a plain number)",
        "jobs[1].args.hidden=[64, 'wide']: train_elastic() takes hidden: tuple[int, ...]; "
        "[1]: Input should be a valid integer, unable to parse string as an integer",
    ]


def test_sweep_values_are_named_where_they_are_written(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        sweeps=[
            {"name": "g", "app": APP, "grid": {"lr": [0.1, "x"], "hidden": [[64]]}},
            {"name": "r", "app": APP, "architectures": [{"hidden": [64]}, {"hidden": 5}]},
            {"name": "t", "app": APP, "args": {"lr": "y"}, "grid": {"seed": [1, 2]}},
            {
                "name": "c",
                "app": APP,
                "random": {"trials": 3, "params": {"lr": {"choices": ["slow"]}}},
            },
        ],
    )
    assert problems(path) == [
        "sweeps[0].grid.lr='x' (job g-1): train_elastic() takes lr: float; Input should be a "
        "valid number, unable to parse string as a number",
        "sweeps[1].architectures[1].hidden=5 (job r-1): train_elastic() takes hidden: "
        "tuple[int, ...]; Input should be a valid tuple",
        "sweeps[2].args.lr='y' (job t-0): train_elastic() takes lr: float; Input should be a "
        "valid number, unable to parse string as a number",
        "sweeps[3].random.params.lr='slow' (job c-0): train_elastic() takes lr: float; Input "
        "should be a valid number, unable to parse string as a number",
    ]


def test_unannotated_and_unresolvable_parameters_are_not_checked(tmp_path: Path) -> None:
    module = tmp_path / "loose.py"
    module.write_text(
        textwrap.dedent(
            """
            from __future__ import annotations
            from typing import TYPE_CHECKING, Any
            if TYPE_CHECKING:
                from somewhere import Thing

            def train(ctx, a, b: Any = 0, c: Thing = None, d: int = 0, **rest: float):
                return None
            """
        )
    )
    sys.path.insert(0, str(tmp_path))
    try:
        import loose  # type: ignore[import-not-found]

        types = ArgTypes(loose.train)
        assert types.problem("a", "anything") is None
        assert types.problem("b", object()) is None
        assert types.problem("c", "text") is None  # Thing is known to type checkers only
        assert types.problem("d", "x") is not None
        assert types.problem("other", "fast") == (
            "train() takes other: float; Input should be a valid number, unable to parse "
            "string as a number"
        )
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("loose", None)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import os\ndef train(ctx:\n    pass\n", "2: SyntaxError: '(' was never closed"),
        ("import os\nLIMITS = {}['gpu']\ndef train(ctx): pass\n", "2: KeyError: 'gpu'"),
    ],
    ids=["syntax", "raises"],
)
def test_an_app_module_that_fails_to_import_is_one_line_naming_file_and_line(
    tmp_path: Path, source: str, expected: str
) -> None:
    name = f"broken_{len(source)}"
    (tmp_path / f"{name}.py").write_text(source)
    path = tmp_path / "c.yaml"
    path.write_text(
        yaml.safe_dump({"python_path": ["."], "jobs": [{"name": "a", "app": f"{name}:train"}]})
    )
    # Its own process: the module must be imported fresh, and the output is what a user sees.
    result = subprocess.run(
        [sys.executable, "-m", "parsl_malleable", "validate", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    module = tmp_path / f"{name}.py"
    assert result.stderr == (
        f"Error: {path}: jobs[0].app: cannot import {name!r}: {module}:{expected}\n"
    )


@pytest.mark.parametrize(
    ("source", "call"),
    [
        ("import sys\n\nsys.exit(0)\n", "sys.exit(0)"),
        ("import sys\n\nsys.exit('usage: ...')\n", "sys.exit('usage: ...')"),
        ("import os\n\nos._exit(0)\n", "os._exit(0)"),  # cannot be caught: refused in its stead
        ("from os import _exit\n\n_exit(4)\n", "os._exit(4)"),
    ],
)
def test_an_app_module_that_exits_at_import_fails_validate_naming_it(
    tmp_path: Path, source: str, call: str
) -> None:
    """`validate` once ended silently with the app's status (rc 0 for an exit(0))."""
    (tmp_path / "exits.py").write_text(source + "\n\ndef train(ctx):\n    pass\n")
    path = tmp_path / "c.yaml"
    path.write_text(
        yaml.safe_dump({"python_path": ["."], "jobs": [{"name": "a", "app": "exits:train"}]})
    )
    result = subprocess.run(
        [sys.executable, "-m", "parsl_malleable", "validate", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stderr
    assert result.stderr == (
        f"Error: {path}: jobs[0].app: cannot import 'exits': {tmp_path / 'exits.py'}:3: called "
        f"{call} while imported; an app module must not exit at import (put that code under "
        "`if __name__ == '__main__':`)\n"
    )


def test_os_exit_is_the_real_one_again_after_the_import(tmp_path: Path) -> None:
    import os

    from parsl_malleable.campaign.app_args import resolve_app

    real = os._exit
    (tmp_path / "keeps_exit.py").write_text("from os import _exit\n\ndef train(ctx):\n    pass\n")
    sys.path.insert(0, str(tmp_path))
    try:
        resolve_app("keeps_exit:train")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("keeps_exit", None)
    assert os._exit is real
    # a child that calls the _exit the module kept really exits (the guard passes it on)
    code = (
        f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n"
        "from parsl_malleable.campaign.app_args import resolve_app\n"
        "resolve_app('keeps_exit:train')\nimport keeps_exit\nkeeps_exit._exit(7)\n"
    )
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 7
