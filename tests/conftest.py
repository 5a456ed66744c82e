"""Fixtures shared by the whole test suite."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def shared_dir() -> Path:
    """The shared data folder: $PARSL_MALLEABLE_SHARED, else ``../shared`` beside the checkout."""
    env = os.environ.get("PARSL_MALLEABLE_SHARED")
    return Path(env) if env else REPO.parent / "shared"


@pytest.fixture(scope="session")
def shared() -> Path:
    path = shared_dir()
    if not (path / "traces").is_dir():
        pytest.fail(f"shared data not found at {path}; set PARSL_MALLEABLE_SHARED")
    return path


@pytest.fixture(scope="session")
def traces_dir(shared: Path) -> Path:
    return shared / "traces"


@pytest.fixture(scope="session")
def bftrainer_dir(shared: Path) -> Path:
    return shared / "bftrainer"
