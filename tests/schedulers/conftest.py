"""Fixtures for the scheduler adapter tests: the local Slurm cluster and stand-in commands."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CLUSTER_SCRIPT = REPO / "scripts" / "slurm-cluster"
DATA = Path(__file__).resolve().parent / "data"
PBS_DATA = REPO / "tests" / "data" / "pbs"


@dataclass(frozen=True)
class SlurmCluster:
    """How to reach the test cluster: its conf, node names and the env for commands."""

    conf: Path
    nodes: tuple[str, ...]
    env: dict[str, str]


def _cluster_env() -> dict[str, str]:
    out = subprocess.run(
        [str(CLUSTER_SCRIPT), "env"], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    key, _, value = out.strip().removeprefix("export ").partition("=")
    return {key: value}


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """Start the cluster unless it runs already; FAIL (never skip) when it cannot start.

    A cluster this fixture started is stopped at the end of the session (set
    PM_SLURM_KEEP=1 to keep it for the next run); one that was already running is left alone.
    """
    status = subprocess.run([str(CLUSTER_SCRIPT), "status"], capture_output=True, text=True)
    started_here = status.returncode != 0
    if started_here:
        start = subprocess.run(
            [str(CLUSTER_SCRIPT), "start"], capture_output=True, text=True, timeout=180
        )
        if start.returncode != 0:
            pytest.fail(
                f"scripts/slurm-cluster start failed ({start.returncode}):\n"
                f"{start.stdout}\n{start.stderr}"
            )
    env = _cluster_env()
    nodes_n = int(os.environ.get("PM_SLURM_NODES", "6"))
    yield SlurmCluster(Path(env["SLURM_CONF"]), tuple(f"n{i}" for i in range(1, nodes_n + 1)), env)
    if started_here and os.environ.get("PM_SLURM_KEEP") != "1":
        subprocess.run([str(CLUSTER_SCRIPT), "stop"], capture_output=True, timeout=60)


@pytest.fixture
def slurm_jobs(slurm_cluster: SlurmCluster) -> Iterator[list[str]]:
    """A list a test appends its job ids to; they are cancelled, and gone, after the test."""
    jobs: list[str] = []
    yield jobs
    if not jobs:
        return
    env = {**os.environ, **slurm_cluster.env}
    subprocess.run(["scancel", *jobs], env=env, capture_output=True, timeout=30)
    # Wait until the nodes are free again so the next test starts from an idle cluster.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        out = subprocess.run(
            ["squeue", "--noheader", "-o", "%i", "--states=PENDING,RUNNING,COMPLETING"],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.split()
        if not set(out) & set(jobs):
            return
        time.sleep(0.3)


def sbatch(cluster: SlurmCluster, *args: str) -> str:
    """Submit a native job with sbatch (as a user would) and return its id."""
    out = subprocess.run(
        ["sbatch", "--parsable", "--output=/dev/null", *args],
        env={**os.environ, **cluster.env},
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return out.stdout.strip().split(";")[0]


@pytest.fixture
def fake_bin(tmp_path: Path) -> Callable[[str, str], dict[str, str]]:
    """Write a stand-in command (a shell script body) and return env with it first on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()

    def make(name: str, body: str) -> dict[str, str]:
        path = bin_dir / name
        path.write_text("#!/bin/sh\n" + body + "\n")
        path.chmod(0o755)
        return {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}

    return make
