"""One wheel of the checkout, installed in a fresh venv, shared by every test that uses it.

``wheel_venv`` (a session fixture) builds the wheel from a copy of the checkout (no build
isolation: setuptools is already here), installs it into a venv made with
``--system-site-packages`` (torch, Parsl, ... come from this Python, nothing is downloaded) and
hands back a :class:`WheelVenv`: what a user has after ``pip install parsl-malleable``. Commands
run through it see the venv's ``bin/`` first on ``PATH`` and neither ``PYTHONPATH`` nor
``$PM_PROVIDER_PROFILES``, from folders outside the repository.

Test files use it with ``from tests.wheel_venv import wheel_venv_fixture  # noqa: F401`` and a
``wheel_venv`` argument. The build is
cached in this module, so several test files share one build per session (~15 s).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Not copied into the build folder: VCS data, build outputs, caches, run outputs.
SKIP = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", "out", "runinfo", "*.egg-info", "__pycache__",
    ".pytest_cache", ".ruff_cache", ".hypothesis", "*.parquet",
)  # fmt: skip
# Variables that would let the venv see the checkout or another profile folder.
HIDDEN = ("PYTHONPATH", "PM_PROVIDER_PROFILES")


@dataclass(frozen=True)
class WheelVenv:
    """A venv with the wheel installed, and the environment to run it in."""

    root: Path  # the tmp folder holding src/, dist/, venv/
    wheel: Path
    venv: Path
    env: dict[str, str]

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def bin(self) -> Path:
        return self.venv / "bin"

    def empty_folder(self, name: str) -> Path:
        """A new empty folder outside the repository, to run commands from."""
        folder = self.root / "elsewhere" / name
        folder.mkdir(parents=True)
        return folder

    def run(
        self,
        argv: Sequence[str | os.PathLike[str]],
        cwd: Path,
        timeout: float = 300,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in the venv's environment from ``cwd``; output captured as text.

        ``env`` is set over the venv's environment (a temporary ``HOME``, say)."""
        return subprocess.run(
            [str(a) for a in argv], capture_output=True, text=True, cwd=cwd,
            env={**self.env, **(env or {})}, timeout=timeout,
        )  # fmt: skip


def build_wheel_venv(root: Path) -> WheelVenv:
    """Build the checkout's wheel under ``root`` and install it into ``root/venv``."""
    source = root / "src"
    shutil.copytree(REPO, source, ignore=SKIP)
    env = {k: v for k, v in os.environ.items() if k not in HIDDEN}
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", root / "dist", source],
        check=True, cwd=root, env=env,
    )  # fmt: skip
    (wheel,) = (root / "dist").glob("parsl_malleable-*.whl")
    venv = root / "venv"
    # System site-packages give it torch, parsl, ... (no download); pip comes from there too.
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv], check=True
    )
    subprocess.run(
        [venv / "bin" / "python", "-m", "pip", "--disable-pip-version-check", "-q", "install",
         "--no-deps", "--no-index", "--force-reinstall", wheel],
        check=True, cwd=root, env=env,
    )  # fmt: skip
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    return WheelVenv(root=root, wheel=wheel, venv=venv, env=env)


_BUILT: dict[str, WheelVenv] = {}


@pytest.fixture(scope="session", name="wheel_venv")
def wheel_venv_fixture(tmp_path_factory: pytest.TempPathFactory) -> WheelVenv:
    """The checkout's wheel installed in a fresh venv (built once per session)."""
    if "venv" not in _BUILT:
        _BUILT["venv"] = build_wheel_venv(tmp_path_factory.mktemp("wheel"))
    return _BUILT["venv"]
