"""docs/notebooks/login-node.ipynb, run as a pip user would run it (a Jupyter kernel, nbclient).

The notebook runs on the emulated site (6 virtual nodes on this machine), so no cluster is
needed: two malleable apps train on harvested blocks, the notebook samples the controller's
state, plots it and shuts down, then runs a two-job campaign with ``run_campaign``. About two
minutes on 2 cores. It is run from the wheel
(tests/wheel_venv.py): ``parsl-malleable init --notebook`` copies the shipped notebook into an
empty folder outside the repository and the venv's Python executes it there, so it can only use
what a ``pip install`` gives.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from tests.wheel_venv import WheelVenv, wheel_venv_fixture  # noqa: F401 (the fixture)

NOTEBOOK = Path(__file__).resolve().parents[1] / "docs" / "notebooks" / "login-node.ipynb"
# Run by the venv's Python in the folder holding the notebook; the kernel ("python3", whose
# kernelspec starts `python` from PATH) is the venv's too. Writes the executed notebook even
# when a cell fails, for a look afterwards.
EXECUTE = """
import sys
import nbformat
from nbclient import NotebookClient

source, executed = sys.argv[1], sys.argv[2]
nb = nbformat.read(source, as_version=4)
client = NotebookClient(
    nb, timeout=240, kernel_name="python3", resources={"metadata": {"path": "."}}
)
try:
    client.execute()
finally:
    nbformat.write(nb, executed)
"""


def _text(nb: nbformat.NotebookNode) -> str:
    """Every stream and plain-text output of the executed notebook, in order."""
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                parts.append(out["text"])
            elif "data" in out and "text/plain" in out["data"]:
                parts.append(out["data"]["text/plain"])
    return "\n".join(parts)


def test_notebook_is_stored_without_outputs() -> None:
    """The notebook is kept in git with its outputs stripped."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code
    assert all(not c.outputs and c.execution_count is None for c in code)


@pytest.mark.slow
def test_login_node_notebook_runs_from_the_wheel(wheel_venv: WheelVenv) -> None:
    """Executed in a fresh kernel from a pip install: both jobs reach >= 0.9 accuracy, a figure,
    no block left, and the package came from the venv."""
    here = wheel_venv.empty_folder("notebook")
    copied = wheel_venv.run(["parsl-malleable", "init", "--notebook"], cwd=here, timeout=60)
    assert copied.returncode == 0, copied.stderr
    assert (here / NOTEBOOK.name).read_text() == NOTEBOOK.read_text()
    scratch = here / "tmp"  # the notebook's work folder (mkdtemp) goes here, not in /tmp
    scratch.mkdir()
    proc = wheel_venv.run(
        [wheel_venv.python, "-c", EXECUTE, NOTEBOOK.name, "executed.ipynb"],
        cwd=here,
        timeout=600,
        env={"TMPDIR": str(scratch)},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    nb = nbformat.read(here / "executed.ipynb", as_version=4)
    text = _text(nb)
    (package,) = re.findall(r"^parsl-malleable: (.+)$", text, flags=re.M)
    assert Path(package).is_relative_to(wheel_venv.venv), package
    accuracies = {
        name: float(value)
        for name, value in re.findall(r"^(\w+): test accuracy ([0-9.]+)", text, flags=re.M)
    }
    assert set(accuracies) == {"wide", "deep"}, text
    assert all(a >= 0.9 for a in accuracies.values()), accuracies
    assert re.search(r"both jobs done after \d+ s; [1-9]\d* decisions", text), text
    assert "blocks left: 0" in text
    # The last section: the same kind of jobs as a campaign spec, through run_campaign.
    assert re.search(r"^campaign: finished in \S+/sweep$", text, flags=re.M), text
    swept = re.findall(r"^sweep job (lr-\d): done, accuracy ([0-9.]+)$", text, flags=re.M)
    assert [job for job, _ in swept] == ["lr-0", "lr-1"], text
    assert all(float(a) >= 0.8 for _, a in swept), swept
    figures = [
        out
        for cell in nb.cells
        for out in cell.get("outputs", [])
        if "image/png" in out.get("data", {})
    ]
    assert len(figures) == 1
