"""docs/notebooks/login-node.ipynb, executed as a user would run it (a Jupyter kernel, nbclient).

The notebook runs on the emulated site (6 virtual nodes on this machine), so no cluster is
needed: two malleable apps train on harvested blocks, the notebook samples the controller's
state, plots it and shuts down. About a minute on 2 cores.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

NOTEBOOK = Path(__file__).resolve().parents[1] / "docs" / "notebooks" / "login-node.ipynb"


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
def test_login_node_notebook_runs(tmp_path: Path) -> None:
    """Executed in a fresh kernel: both jobs reach >= 0.9 accuracy, a figure, no block left."""
    from nbclient import NotebookClient

    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(
        nb,
        timeout=240,  # per cell
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )
    try:
        client.execute()
    finally:
        nbformat.write(nb, tmp_path / "executed.ipynb")  # for a look after a failure
    text = _text(nb)
    accuracies = {
        name: float(value)
        for name, value in re.findall(r"^(\w+): test accuracy ([0-9.]+)", text, flags=re.M)
    }
    assert set(accuracies) == {"wide", "deep"}, text
    assert all(a >= 0.9 for a in accuracies.values()), accuracies
    assert re.search(r"both jobs done after \d+ s; [1-9]\d* decisions", text), text
    assert "blocks left: 0" in text
    figures = [
        out
        for cell in nb.cells
        for out in cell.get("outputs", [])
        if "image/png" in out.get("data", {})
    ]
    assert len(figures) == 1
