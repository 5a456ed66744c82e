"""The getting-started pages, followed literally from a pip install.

Each page's shell commands are run as a user would type them, with what ``pip install`` gives
(the wheel in a fresh venv, tests/wheel_venv.py), from an empty folder outside the repository.

The convention a page follows, so that this file can run it:

- Every fenced block opened with ```` ```bash ```` is run, in the page's order, each block by a
  fresh ``bash`` with ``set -euo pipefail``, all blocks of a page in the same (at first empty)
  folder: a later block sees the files an earlier one wrote, not its shell variables (a block
  that needs one sets it). Other fences (``python``, ``yaml``, ``text``, ``console``) are not run.
- A block must exit 0, unless an HTML comment on the line just before its fence says otherwise
  (the comment does not show when the page is rendered):

  - ``<!-- test: skip (why) -->``: not run; the reason is required (it needs a real site, an
    interactive front end, an install the test already did, or minutes another test spends).
  - ``<!-- test: exit 3 -->``: the block is expected to exit 3 (for instance a campaign stopped
    by its ``--time-limit``, which says so with 3).

- Keep what runs short: campaigns with ``--time-limit`` of 30-60 s, replays with their smallest
  options; the whole file runs in a few minutes on 2 cores.

Another page's test can reuse this: ``page_blocks(path)`` reads a page's blocks and
``run_page(path, venv, folder)`` runs them and fails with the block's line and output; its
``env`` is set over the venv's environment (a temporary ``HOME`` for a page that writes there).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.wheel_venv import WheelVenv, wheel_venv_fixture  # noqa: F401 (the fixture)

REPO = Path(__file__).resolve().parents[1]
PAGES = REPO / "docs" / "getting-started"
FENCE = re.compile(r"^(\s*)```(\w*)\s*$")  # indented too: a block inside a list item
DIRECTIVE = re.compile(r"^\s*<!--\s*test:\s*(.*?)\s*-->\s*$")
SKIP = re.compile(r"skip\s+\((.+)\)")
EXIT = re.compile(r"exit\s+(\d+)")
BLOCK_TIMEOUT_S = 300


@dataclass(frozen=True)
class Block:
    """One fenced ``bash`` block of a page."""

    page: Path
    line: int  # of the opening fence, 1-based
    code: str
    skip: str | None  # the reason, when the page says not to run it
    exit_code: int = 0

    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def _directive(text: str, page: Path, line: int) -> tuple[str | None, int]:
    """(skip reason, expected exit) of a ``<!-- test: ... -->`` comment; anything else is an
    error, so that a typo does not silently run (or skip) a block."""
    if skip := SKIP.fullmatch(text):
        return skip.group(1), 0
    if code := EXIT.fullmatch(text):
        return None, int(code.group(1))
    raise ValueError(f"{page}:{line}: unknown test directive {text!r} (skip (why) or exit N)")


def page_blocks(page: Path) -> list[Block]:
    """The ``bash`` blocks of ``page`` in order, with what their directives say."""
    blocks: list[Block] = []
    lines = page.read_text().splitlines()
    index = 0
    while index < len(lines):
        fence = FENCE.match(lines[index])
        if not fence:
            index += 1
            continue
        end = next((j for j in range(index + 1, len(lines)) if lines[j].strip() == "```"), None)
        if end is None:
            raise ValueError(f"{page}:{index + 1}: fence never closed")
        if fence.group(2) == "bash":
            above = lines[index - 1] if index else ""
            skip, exit_code = None, 0
            if directive := DIRECTIVE.match(above):
                skip, exit_code = _directive(directive.group(1), page, index)
            indent = len(fence.group(1))
            code = "\n".join(line[indent:] for line in lines[index + 1 : end])
            blocks.append(Block(page, index + 1, code, skip, exit_code))
        index = end + 1
    return blocks


@dataclass(frozen=True)
class Ran:
    """A block that ran, and what it printed."""

    block: Block
    stdout: str


def run_page(
    page: Path, venv: WheelVenv, folder: Path, env: Mapping[str, str] | None = None
) -> list[Ran]:
    """Run ``page``'s blocks in ``folder`` (``env`` set over the venv's environment); fail on
    the first block that exits otherwise than expected. Returns the blocks that ran."""
    ran = []
    for block in page_blocks(page):
        if block.skip:
            continue
        script = f"set -euo pipefail\n{block.code}\n"
        proc = venv.run(["bash", "-c", script], cwd=folder, timeout=BLOCK_TIMEOUT_S, env=env)
        if proc.returncode != block.exit_code:
            pytest.fail(
                f"{block.where()}: exit {proc.returncode}, expected {block.exit_code}\n"
                f"{block.code}\n--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n"
                f"{proc.stderr[-3000:]}"
            )
        ran.append(Ran(block, proc.stdout))
    return ran


MINE = [
    "campaign-runner.md",
    "globus-endpoint-admin.md",
    "globus-remote-user.md",
    "jupyter-login-node.md",
    "site-admin-replay.md",
]


@pytest.mark.parametrize("name", MINE)
def test_page_blocks_are_runnable_or_say_why_not(name: str) -> None:
    """Every bash block either runs or gives its reason; no path that exists only in a clone."""
    blocks = page_blocks(PAGES / name)
    assert any(b.skip is None for b in blocks), name
    assert all(b.skip is None or b.skip.strip() for b in blocks)
    for block in blocks:
        assert "configs/" not in block.code and "providers/" not in block.code, block.where()


def test_directives_are_read_and_typos_refused(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "text\n```bash\necho one\n```\n<!-- test: skip (needs a real site) -->\n```bash\n"
        "sbatch x\n```\n```python\nprint()\n```\n<!-- test: exit 3 -->\n```bash\nexit 3\n```\n"
        "1. a list item\n\n   ```bash\n   echo two\n     indented\n   ```\n"
    )
    blocks = page_blocks(page)
    assert [(b.line, b.code, b.skip, b.exit_code) for b in blocks] == [
        (2, "echo one", None, 0),
        (6, "sbatch x", "needs a real site", 0),
        (13, "exit 3", None, 3),
        (18, "echo two\n  indented", None, 0),
    ]
    page.write_text("<!-- test: skipp -->\n```bash\necho\n```\n")
    with pytest.raises(ValueError, match="unknown test directive"):
        page_blocks(page)


@pytest.mark.slow
def test_campaign_runner_page(wheel_venv: WheelVenv) -> None:
    """Copy the demo, run it for a while, look at its status: as the page says.

    How far 40 s of wall clock gets the training depends on the machine's load (a cold numba
    compile comes first), so what is checked is what the page promises: the run stopped at its
    limit (exit 3), wrote its table, and ``status`` lists every job of it. Training from the
    wheel to the end is ``test_wheel.py``'s.
    """
    here = wheel_venv.empty_folder("campaign-runner")
    ran = run_page(PAGES / "campaign-runner.md", wheel_venv, here)
    assert any("parsl-malleable init" in r.block.code for r in ran)
    assert (here / "demo.yaml").is_file()
    jobs = (here / "out" / "demo" / "results.csv").read_text().splitlines()[1:]
    names = [row.split(",", 1)[0] for row in jobs]
    assert len(names) == 5, jobs  # the demo's deep job and its 4-point sweep
    (status,) = [r.stdout for r in ran if "parsl-malleable status" in r.block.code]
    assert "last time limit" in status, status
    assert all(name in status for name in names), status


@pytest.mark.slow
def test_jupyter_login_node_page(wheel_venv: WheelVenv) -> None:
    here = wheel_venv.empty_folder("jupyter-login-node")
    run_page(PAGES / "jupyter-login-node.md", wheel_venv, here)
    assert (here / "login-node.ipynb").is_file()


@pytest.mark.slow
def test_site_admin_replay_page(wheel_venv: WheelVenv) -> None:
    here = wheel_venv.empty_folder("site-admin-replay")
    ran = run_page(PAGES / "site-admin-replay.md", wheel_venv, here)
    commands = " ".join(r.block.code for r in ran)
    for command in ("trace", "sim", "windows", "allocate", "replay"):
        assert f"parsl-malleable {command}" in commands, command
    assert (here / "replay-out" / "summary.csv").is_file()


@pytest.mark.slow
def test_globus_endpoint_admin_page(wheel_venv: WheelVenv) -> None:
    """Copy the endpoint files out of the wheel, ``configure`` and render both modes: in a
    temporary home and endpoint folder (the real ones are not touched)."""
    here = wheel_venv.empty_folder("globus-endpoint-admin")
    home, user_dir = here.parent / "globus-admin-home", here.parent / "globus-admin-gc"
    home.mkdir()
    env = {"HOME": str(home), "GLOBUS_COMPUTE_USER_DIR": str(user_dir)}
    ran = run_page(PAGES / "globus-endpoint-admin.md", wheel_venv, here, env)
    assert not any("globus-compute-endpoint start" in r.block.code for r in ran)  # the cloud's
    installed = next(wheel_venv.venv.glob("lib/python*/site-packages/parsl_malleable"))
    shipped = installed / "globus_endpoint"
    endpoint = user_dir / "harvest"
    for name in ("config.yaml", "user_config_template.yaml.j2", "user_config_schema.json"):
        assert (here / "endpoint-files" / name).read_text() == (shipped / name).read_text()
    for name in ("user_config_template.yaml.j2", "user_config_schema.json"):
        assert (endpoint / name).read_text() == (shipped / name).read_text()  # installed as is
    # ``configure`` rewrites config.yaml: the shipped settings, the contact email, and the
    # example identity mapping (the one the page says to fill in as root).
    config = yaml.safe_load((endpoint / "config.yaml").read_text())
    shipped_config = yaml.safe_load((shipped / "config.yaml").read_text())
    assert config == {
        **shipped_config,
        "email": "admin@example.org",
        "identity_mapping_config_path": str(endpoint / "example_identity_mapping_config.json"),
    }
    assert (endpoint / "example_identity_mapping_config.json").is_file()
    # user_environment.yaml points at the installed start-up hook.
    user_env = yaml.safe_load((endpoint / "user_environment.yaml").read_text())
    assert user_env == {"PYTHONPATH": str(shipped / "python")}
    assert (shipped / "python" / "sitecustomize.py").is_file()
    # The two renders, each a YAML mapping from its top-level ``engine:`` on (``configure``
    # printed its summary before them): the drivers' engine, then the tasks' engine.
    (printed,) = [r.stdout for r in ran if "render-user-config" in r.block.code]
    parts = re.split(r"(?m)^(?=engine:)", printed)
    driver, tasks = (yaml.safe_load(part) for part in parts if part.startswith("engine:"))
    provider = driver["engine"]["provider"]
    assert provider["type"] == "LocalProvider"
    assert provider["worker_init"] == "export PM_GLOBUS_MODE=driver PM_GLOBUS_SITE=example-slurm"
    assert driver["engine"]["max_workers_per_node"] == 4
    provider = tasks["engine"]["provider"]
    assert provider == {
        "type": "BackfillProvider",
        "profile": "example-slurm",
        "max_harvested_nodes": 4,
    }
    assert not any(home.iterdir())  # all of it went to GLOBUS_COMPUTE_USER_DIR


@pytest.mark.slow
def test_globus_remote_user_page(wheel_venv: WheelVenv) -> None:
    """Write the campaign and check it as the endpoint will (sending it needs the cloud)."""
    here = wheel_venv.empty_folder("globus-remote-user")
    ran = run_page(PAGES / "globus-remote-user.md", wheel_venv, here)
    assert ran[-1].stdout == "ok: ['digits']\n"
    campaign = yaml.safe_load((here / "digits.yaml").read_text())
    assert [job["app"] for job in campaign["jobs"]] == ["parsl_malleable.apps.digits:train_elastic"]


# ------------------------------------------------------------------------ install lines

APP_NAME = re.compile(r"\bapp:\s*(parsl_malleable\.apps\.\w+):")


def _imports(code: str) -> set[str]:
    """Top-level names of the modules ``code`` imports (absolute imports only)."""
    import ast

    names: set[str] = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _app_imports(module: str) -> set[str]:
    """What an example app's module (``parsl_malleable.apps.digits``, in ``apps/``) imports,
    its sibling modules' imports included."""
    import ast

    path = REPO / "apps" / f"{module.rsplit('.', 1)[1]}.py"
    names = _imports(path.read_text())
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            names |= _imports((REPO / "apps" / f"{node.module}.py").read_text())
    return names


def _installed_by(requirements: list[str]) -> set[str]:
    """The distributions (normalised names) that ``pip install REQUIREMENTS`` names: the
    project's own with its dependencies and the extras asked for (recursively), the others as
    they are."""
    import tomllib

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    out: set[str] = set()
    todo = [Requirement(r) for r in requirements]
    seen: set[str] = set()
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        out.add(name)
        if name != canonicalize_name(project["name"]):
            continue
        for extra in [None, *sorted(req.extras)]:
            if str(extra) in seen:
                continue
            seen.add(str(extra))
            deps = (
                project["dependencies"]
                if extra is None
                else project["optional-dependencies"][extra]
            )
            todo += [Requirement(d) for d in deps]
    return out


def test_globus_remote_user_install_line_brings_what_the_page_imports() -> None:
    """The page's install line once brought no torch: its check (which imports the campaign's
    app, as the endpoint does) failed with "No module named 'torch'". Every module the page's
    Python and its example app import must come from a distribution the line installs."""
    import importlib.metadata
    import shlex
    import sys
    import textwrap

    from packaging.utils import canonicalize_name

    page = PAGES / "globus-remote-user.md"
    text = page.read_text()
    (install,) = [b.code for b in page_blocks(page) if "pip install" in b.code]
    words = shlex.split(install)
    installed = _installed_by(words[words.index("install") + 1 :])
    python_blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    needed = set().union(*(_imports(textwrap.dedent(code)) for code in python_blocks))
    for module in APP_NAME.findall(text):
        needed |= _app_imports(module)
    needed -= {*sys.stdlib_module_names, "parsl_malleable"}
    assert {"torch", "globus_compute_sdk"} <= needed  # what this test is about
    providers = importlib.metadata.packages_distributions()
    missing = {
        module: providers.get(module)
        for module in sorted(needed)
        if not {canonicalize_name(d) for d in providers.get(module, [module])} & installed
    }
    assert not missing, f"{page.name}: `{install}` installs nothing providing {missing}"
