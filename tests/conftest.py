"""Fixtures shared by the whole test suite."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from parsl_malleable import data
from tests import background_checks

REPO = Path(__file__).resolve().parents[1]


def pytest_configure(config: pytest.Config) -> None:
    """Parsl's HTEX starts ``process_worker_pool.py`` by name: put this interpreter's bin/ on
    PATH, as an activated venv would, so the README's test command needs no PATH set-up."""
    bindir = os.path.dirname(sys.executable)
    if bindir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")


@pytest.fixture(scope="session")
def data_root() -> Path:
    """The data the project carries (``parsl_malleable/data``: compressed traces, workloads)."""
    path = data.data_dir()
    if not (path / "traces").is_dir():
        pytest.fail(f"carried data not found at {path} (parsl_malleable/data/traces)")
    return path


@pytest.fixture(scope="session")
def traces_dir(data_root: Path) -> Path:
    """Real SWF traces, gzipped (``theta_2022.swf.gz``, ...) with their ``.machines`` files."""
    return data_root / "traces"


@pytest.fixture(scope="session")
def bftrainer_dir(data_root: Path) -> Path:
    """The FreeTrain/BFTrainer workloads and the Summit idle trace, gzipped CSVs."""
    return data_root / "bftrainer"


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the type check in the background when the session will run it (see
    ``tests/background_checks.py``)."""
    if any(item.nodeid.startswith("tests/test_types.py") for item in session.items):
        background_checks.mypy()
