"""The package's import graph: no cycle between modules, no import from a lower layer upwards.

Each module's imports are read with :mod:`ast` (nothing is imported), resolved to modules of the
package, and checked against ``LAYERS``, the table docs/architecture.md shows: a module may import
its own part (``parsl_malleable/<part>``) and parts of strictly lower layers, never a peer in the
same layer nor anything above. Counted: every import that can run, module-level or inside a
function (a lazy import is still a dependency). Not counted: imports under ``if TYPE_CHECKING:``,
which never run and only name types for annotations. ``cli.py`` reaches the subcommands through
``importlib`` strings, which this reading does not see; it is the top layer anyway.
"""

from __future__ import annotations

import ast
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "parsl_malleable"

# Low to high. A part is parsl_malleable/<part> (package or module); "apps" is the example apps,
# kept in apps/ and installed as parsl_malleable.apps (pyproject.toml's package-dir).
LAYERS: list[tuple[str, ...]] = [
    ("errors", "logs", "_lazy"),  # exception types, used by all; log handlers; lazy attributes
    # input checks; the scheduler snapshot; shipped traces; private files; the dead-man switch;
    # authenticated JSON-lines connections (the rank protocol and the agent link run on them)
    ("inputs", "snapshot", "data", "private_files", "watchdog", "transport"),
    ("traces",),  # trace readers, one schema
    ("sim",),  # the backfill simulator and queue planner
    ("windows", "schedulers", "allocate", "elastic"),  # prediction; live state; MILP; ranks
    ("profile", "harvest"),  # scalability profiler; the provider's parts
    ("provider", "controller"),  # BackfillProvider; the controller
    ("app",),  # @malleable_app
    ("campaign", "replay", "apps"),  # YAML campaigns; the simulated-clock replay; examples
    ("cli",),  # the command line
    ("__main__",),  # python -m parsl_malleable
]

# (importing module, imported module) -> why the back-edge stays. Empty: every edge fits.
KNOWN_EXCEPTIONS: dict[tuple[str, str], str] = {}


def module_files(repo: Path) -> dict[str, Path]:
    """Dotted module name -> file, for the package and the example apps."""
    roots = [(repo / PACKAGE, [PACKAGE]), (repo / "apps", [PACKAGE, "apps"])]
    found: dict[str, Path] = {}
    for folder, prefix in roots:
        for path in sorted(folder.rglob("*.py")):
            parts = [*prefix, *path.relative_to(folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node except the bodies of ``if TYPE_CHECKING:`` (their ``else`` does run)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The module that ``import name`` runs last: the longest prefix that is a module."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that ``module`` imports when it runs."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    targets: set[str | None] = set()
    for node in _runtime_nodes(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(_resolve(alias.name, modules) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            # "from pkg import name" runs pkg.name when that is a submodule, else pkg itself
            targets.update(_resolve(f"{source}.{alias.name}", modules) for alias in node.names)
    return {t for t in targets if t and t.startswith(PACKAGE) and t != module}


def import_graph(repo: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports."""
    modules = module_files(repo)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def part(module: str) -> str:
    """``parsl_malleable.windows.predict`` -> ``windows``; the package's own __init__ -> ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected sets of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    members = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        members.append(member)
                        if member == node:
                            break
                    if len(members) > 1:
                        found.append(sorted(members))
    return found


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """Imports from a part to a peer or a higher layer, less the known exceptions."""
    layer = {name: i for i, names in enumerate(LAYERS) for name in names}
    bad = []
    for source, targets in sorted(graph.items()):
        for target in sorted(targets):
            a, b = part(source), part(target)
            if a == b or not b or (source, target) in KNOWN_EXCEPTIONS:
                continue
            if layer[a] <= layer[b]:
                bad.append(f"{source} (layer {layer[a]}) imports {target} (layer {layer[b]})")
    return bad


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph(REPO)


def test_every_part_has_a_layer(graph: dict[str, set[str]]) -> None:
    """A new part must be placed in the table (and in docs/architecture.md) on purpose."""
    declared = [name for names in LAYERS for name in names]
    assert len(declared) == len(set(declared)), "a part is in two layers"
    parts = {part(m) for m in graph} - {""}
    assert parts == set(declared), (
        f"not in LAYERS: {sorted(parts - set(declared))}; "
        f"in LAYERS but gone: {sorted(set(declared) - parts)}"
    )


def test_docs_show_this_table() -> None:
    """docs/architecture.md's layer table is ``LAYERS``, row for row."""
    text = (REPO / "docs" / "architecture.md").read_text()
    section = text.split("## The layer table", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (\d+) \| (.+) \|$", section, flags=re.M)
    documented = [tuple(re.findall(r"`([^`]+)`", parts)) for _, parts in rows]
    assert [int(n) for n, _ in rows] == list(range(len(LAYERS)))
    assert documented == LAYERS


def test_graph_sees_known_edges(graph: dict[str, set[str]]) -> None:
    """The reader resolves absolute, relative and lazy imports (else the checks prove nothing)."""
    assert "parsl_malleable.snapshot" in graph["parsl_malleable.schedulers.slurm"]
    assert (
        "parsl_malleable.elastic.coordinator_server" in graph["parsl_malleable.elastic.coordinator"]
    )
    # the emulated native load imports the simulator inside a function
    assert (
        "parsl_malleable.sim.trace_replay"
        in graph["parsl_malleable.schedulers.emulated.native_load"]
    )
    assert "parsl_malleable.elastic.rank" in graph["parsl_malleable.apps.digits"]
    # app.py imports the controller; the controller names what it needs of a job in a Protocol
    assert "parsl_malleable.controller.live" in graph["parsl_malleable.app"]
    assert "parsl_malleable.app" not in graph["parsl_malleable.controller.live"]


def test_no_import_cycle(graph: dict[str, set[str]]) -> None:
    assert cycles(graph) == []


def test_no_import_against_the_layers(graph: dict[str, set[str]]) -> None:
    assert layer_violations(graph) == []


def test_known_exceptions_still_exist(graph: dict[str, set[str]]) -> None:
    stale = [edge for edge in KNOWN_EXCEPTIONS if edge[1] not in graph.get(edge[0], set())]
    assert stale == [], "remove these from KNOWN_EXCEPTIONS: the imports are gone"


def _copy(tmp_path: Path) -> Path:
    shutil.copytree(REPO / PACKAGE, tmp_path / PACKAGE)
    shutil.copytree(REPO / "apps", tmp_path / "apps")
    return tmp_path


def test_a_planted_back_edge_is_reported(tmp_path: Path) -> None:
    """sim (layer 3) importing windows (layer 4) is named, with both modules."""
    repo = _copy(tmp_path)
    forecast = repo / PACKAGE / "sim" / "queue_forecast.py"
    planted = "\nfrom parsl_malleable.windows import window  # planted\n"
    forecast.write_text(forecast.read_text() + planted)
    assert layer_violations(import_graph(repo)) == [
        "parsl_malleable.sim.queue_forecast (layer 3) imports parsl_malleable.windows.window "
        "(layer 4)"
    ]


def test_a_planted_cycle_is_reported(tmp_path: Path) -> None:
    """A function-level import back from coordinator_server closes a cycle; it is found."""
    repo = _copy(tmp_path)
    server = repo / PACKAGE / "elastic" / "coordinator_server.py"
    server.write_text(
        server.read_text() + "\n\ndef _planted() -> None:\n    from . import coordinator\n"
    )
    assert cycles(import_graph(repo)) == [
        ["parsl_malleable.elastic.coordinator", "parsl_malleable.elastic.coordinator_server"]
    ]


def test_type_checking_imports_are_not_counted(tmp_path: Path) -> None:
    """The same back-edge under ``if TYPE_CHECKING:`` never runs, so it is allowed."""
    repo = _copy(tmp_path)
    plan = repo / PACKAGE / "sim" / "queue_forecast.py"
    plan.write_text(
        plan.read_text()
        + "\nfrom typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
        + "    from parsl_malleable.windows import window\n"
    )
    assert layer_violations(import_graph(repo)) == []
