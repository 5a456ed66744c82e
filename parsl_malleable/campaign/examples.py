"""The example campaigns shipped with the package, so that a pip user has something to run.

``configs/demo.yaml`` (the README's main job), ``configs/examples.yaml`` (the three example
apps side by side) and ``configs/asha.yaml`` (a search with early stopping: Optuna trials pruned
by successive halving) are installed in the wheel as the data package
``parsl_malleable.campaign_examples`` (pyproject.toml's package-dir maps it to ``configs/``). In a
checkout or an editable install they are read from ``configs/`` itself. ``parsl-malleable init``
copies one into a folder; ``parsl-malleable run --demo`` runs the demo in place. The login-node
notebook travels the same way: ``parsl_malleable.notebooks`` in a wheel, ``docs/notebooks/`` in a
checkout (``parsl-malleable init --notebook``).
"""

from __future__ import annotations

from pathlib import Path

from parsl_malleable.errors import ConfigError

# In a wheel: parsl_malleable/campaign_examples; in a checkout or editable install: configs/.
SHIPPED_EXAMPLES = Path(__file__).resolve().parents[1] / "campaign_examples"
REPO_EXAMPLES = Path(__file__).resolve().parents[2] / "configs"
DEFAULT_EXAMPLE = "demo"
SHIPPED_NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
REPO_NOTEBOOKS = Path(__file__).resolve().parents[2] / "docs" / "notebooks"
NOTEBOOK = "login-node.ipynb"


def examples_folder() -> Path:
    """The folder holding the example campaigns (``<name>.yaml``) of this installation."""
    if SHIPPED_EXAMPLES.is_dir():
        return SHIPPED_EXAMPLES
    if REPO_EXAMPLES.is_dir():
        return REPO_EXAMPLES
    raise ConfigError(
        f"no example campaigns: neither {SHIPPED_EXAMPLES} (an installed wheel) nor "
        f"{REPO_EXAMPLES} (a checkout) exists; reinstall parsl-malleable"
    )


def example_names() -> list[str]:
    """The names of the example campaigns, sorted (``asha``, ``demo``, ``examples``)."""
    return sorted(p.stem for p in examples_folder().glob("*.yaml"))


def example_path(name: str) -> Path:
    """The file of example campaign ``name`` (``asha``, ``demo`` or ``examples``).

    Raises :class:`~parsl_malleable.errors.ConfigError` naming the examples there are, for an
    unknown name.
    """
    path = examples_folder() / f"{name}.yaml"
    if not name or Path(name).name != name or not path.is_file():
        raise ConfigError(
            f"no example campaign {name!r}; the examples are: {', '.join(example_names())}"
        )
    return path


def notebook_path() -> Path:
    """The login-node notebook (``login-node.ipynb``) of this installation."""
    for folder in (SHIPPED_NOTEBOOKS, REPO_NOTEBOOKS):
        if (folder / NOTEBOOK).is_file():
            return folder / NOTEBOOK
    raise ConfigError(
        f"no {NOTEBOOK} in {SHIPPED_NOTEBOOKS} (an installed wheel) nor in {REPO_NOTEBOOKS} "
        "(a checkout); reinstall parsl-malleable"
    )
