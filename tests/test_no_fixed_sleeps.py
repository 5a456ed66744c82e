"""Tests wait on events, never on the clock: no fixed sleep outside a loop that polls.

A fixed sleep before an action ("give bash 0.5 s to set its trap") passes on an idle machine
and fails on a loaded one, and one before a check passes more easily the slower the machine.
Read with :mod:`ast` over every test module: a ``sleep(...)`` call (``time.sleep``,
``asyncio.sleep``, or a bare imported ``sleep``) is allowed only inside a ``while``/``for``
loop (a helper polling for a condition, or a workload pacing its own steps), in a function
listed in :data:`WORKLOADS` (it *is* the long-running program a test kills or waits for), or
in source text run by a child process (a string, which this reading does not see). Waiting on
a condition that can never hold (``wait_for(lambda: False, 5)``) is a sleep too.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parent

# (file relative to tests/, function) -> why its sleep is the workload, not a wait.
WORKLOADS: dict[tuple[str, str], str] = {
    ("provider/fake_pbs.py", "mom"): "the stand-in MoM's own pace (run request, exiting state)",
}


def _sleep_calls(tree: ast.AST) -> Iterator[tuple[ast.Call, list[ast.AST]]]:
    """Every sleep call with the chain of nodes enclosing it."""

    def walk(node: ast.AST, chain: list[ast.AST]) -> Iterator[tuple[ast.Call, list[ast.AST]]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Call) and _is_sleep(child):
                yield child, chain
            yield from walk(child, [*chain, child])

    yield from walk(tree, [tree])


def _is_sleep(call: ast.Call) -> bool:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr == "sleep"
    return isinstance(func, ast.Name) and func.id == "sleep"


def _never_true_wait(call: ast.Call) -> bool:
    """``wait_for(lambda: False, ...)``: a sleep spelled as a wait."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    if not name.startswith("wait") or not call.args:
        return False
    first = call.args[0]
    return (
        isinstance(first, ast.Lambda)
        and isinstance(first.body, ast.Constant)
        and first.body.value is False
    )


def violations() -> list[str]:
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        rel = path.relative_to(TESTS).as_posix()
        if rel == "test_no_fixed_sleeps.py":
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        for call, chain in _sleep_calls(tree):
            if any(isinstance(n, ast.While | ast.For | ast.AsyncFor) for n in chain):
                continue
            functions = [n.name for n in chain if isinstance(n, ast.FunctionDef)]
            if functions and (rel, functions[-1]) in WORKLOADS:
                continue
            found.append(f"{rel}:{call.lineno}: sleep outside a polling loop")
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _never_true_wait(node):
                found.append(f"{rel}:{node.lineno}: waits on a condition that never holds")
    return found


def test_no_test_waits_on_the_clock() -> None:
    assert violations() == []


def test_the_reader_finds_what_it_forbids(tmp_path: Path) -> None:
    tree = ast.parse(
        "import time\n"
        "def f():\n    time.sleep(0.5)\n"
        "def g():\n    while not ready():\n        time.sleep(0.1)\n"
    )
    outside = [c.lineno for c, chain in _sleep_calls(tree) if not any(
        isinstance(n, ast.While) for n in chain
    )]  # fmt: skip
    assert outside == [3]
    assert _never_true_wait(ast.parse("wait_for(lambda: False, 5)").body[0].value)  # type: ignore[attr-defined]


def test_every_listed_workload_still_exists() -> None:
    """A stale entry (its file or function renamed) would excuse whatever sleep comes next."""
    missing = []
    for rel, function in WORKLOADS:
        path = TESTS / rel
        names = (
            {
                n.name
                for n in ast.walk(ast.parse(path.read_text()))
                if isinstance(n, ast.FunctionDef)
            }
            if path.is_file()
            else set()
        )
        if function not in names:
            missing.append(f"{rel}:{function}")
    assert missing == []
