"""Validation is done one way: pydantic at the boundaries (parsl_malleable.inputs says how).

The package is scanned for the two hand-written forms this replaced: a stdlib dataclass whose
``__post_init__`` raises, and a click option typed ``float`` or ``int`` without a range (NaN and
negative values pass both). The boundary classes must refuse the inputs Python would convert
silently, naming the field.
"""

from __future__ import annotations

import ast
import dataclasses
import math
from pathlib import Path

import pytest
from pydantic.dataclasses import is_pydantic_dataclass

from parsl_malleable.allocate.curve import ScalingCurve
from parsl_malleable.allocate.spec import NodeWindow, TrainingJob
from parsl_malleable.app import ElasticOptions
from parsl_malleable.controller.core import CoreSettings
from parsl_malleable.controller.model import JobSpec
from parsl_malleable.controller.policy import PolicySettings
from parsl_malleable.errors import ConfigError
from parsl_malleable.replay.workload import Physics, ReplayJob

PACKAGE = Path(__file__).resolve().parents[1] / "parsl_malleable"

# Checked by hand on purpose, with the reason.
HAND_CHECKED = {
    # A pandas DataFrame's columns and dtypes: pydantic does not model frames; the readers that
    # build it count every repair in the trace's ReadReport.
    "traces/schema.py:JobTrace",
}

CURVE = ScalingCurve((1, 2), (1.0, 2.0))
BOUNDARY = {
    ScalingCurve: {"nodes": (1, 2), "throughput": (1.0, 2.0)},
    TrainingJob: {
        "name": "j",
        "min_nodes": 1,
        "max_nodes": 2,
        "curve": CURVE,
        "scale_up_cost": 1.0,
        "scale_down_cost": 1.0,
    },
    NodeWindow: {"nodes": ("n1",), "remaining_s": 10.0},
    ElasticOptions: {"checkpoint_dir": "/tmp/c", "min_nodes": 1, "settle_s": 0.5, "priority": 1.0},
    JobSpec: {"name": "j", "min_nodes": 1, "max_nodes": 2, "priority": 1.0},
    CoreSettings: {"debounce_s": 0.5},
    PolicySettings: {"time_limit_s": 0.5, "max_classes": 4},
    ReplayJob: {
        "name": "j",
        "curve": CURVE,
        "min_nodes": 1,
        "max_nodes": 2,
        "scale_up_s": 1.0,
        "scale_down_s": 1.0,
        "samples": 10.0,
        "submit": 0.0,
    },
    Physics: {"model": "runtime", "startup_s": 7.0, "regroup_s": 1.0, "leave_s": 1.0},
}


def _decorator_names(node: ast.ClassDef) -> set[str]:
    names = set()
    for deco in node.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        names.add(ast.unparse(target))
    return names


def test_no_stdlib_dataclass_checks_its_fields_by_hand() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            if not _decorator_names(node) & {"dataclass", "dataclasses.dataclass"}:
                continue
            checks = [
                item
                for item in node.body
                if isinstance(item, ast.FunctionDef) and item.name == "__post_init__"
            ]
            if any(isinstance(n, ast.Raise | ast.Call) for c in checks for n in ast.walk(c)):
                found.append(f"{path.relative_to(PACKAGE)}:{node.name}")
    assert set(found) <= HAND_CHECKED, sorted(set(found) - HAND_CHECKED)
    assert set(found) >= HAND_CHECKED, "an exception listed here no longer exists"


def test_no_command_line_number_goes_unchecked() -> None:
    bare = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("click.option"):
                names = [ast.unparse(a).strip("'\"") for a in node.args]
                bare += [
                    f"{path.relative_to(PACKAGE)}:{node.lineno}"
                    for kw in node.keywords
                    # a seed may be any integer
                    if kw.arg == "type"
                    and ast.unparse(kw.value) in {"float", "int"}
                    and "--seed" not in names
                ]
    assert not bare, f"click options typed float/int without a range (use FiniteFloat): {bare}"


@pytest.mark.parametrize("cls", list(BOUNDARY), ids=lambda c: c.__name__)
def test_boundary_classes_are_pydantic_and_refuse_silent_conversions(cls: type) -> None:
    assert is_pydantic_dataclass(cls)
    good = BOUNDARY[cls]
    cls(**good)
    numeric = [f.name for f in dataclasses.fields(cls) if isinstance(good.get(f.name), int | float)]
    listed = [
        f.name
        for f in dataclasses.fields(cls)
        if isinstance(good.get(f.name), tuple) and isinstance(good[f.name][0], int | float)
    ]
    assert numeric or listed
    for bad in (math.nan, True, "2"):
        for name in numeric:
            with pytest.raises(ConfigError, match=rf"{cls.__name__}.*{name}={bad!r}"):
                cls(**{**good, name: bad})
        for name in listed:
            value = (bad, *good[name][1:])
            with pytest.raises(ConfigError, match=rf"{cls.__name__}.*{name}\.0={bad!r}"):
                cls(**{**good, name: value})
    first = dataclasses.fields(cls)[0].name
    with pytest.raises(TypeError, match="twice"):
        cls(good.get(first, 1), **{first: good.get(first, 1)})
