"""Fixtures for the provider tests: the local Slurm cluster (re-used from the scheduler tests),
native jobs that are cancelled afterwards, and providers that are closed afterwards."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from parsl_malleable.provider import BackfillProvider
from tests.schedulers.conftest import SlurmCluster, fake_bin, slurm_cluster  # noqa: F401

REPO = Path(__file__).resolve().parents[2]


def run_slurm(cluster: SlurmCluster, *argv: str) -> str:
    """Run a Slurm client command as a user would; its stdout."""
    env = {**os.environ, **cluster.env, "SLURM_TIME_FORMAT": "%s"}
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30, check=True)
    return out.stdout


def job_states(cluster: SlurmCluster, ids: list[str]) -> dict[str, tuple[str, str]]:
    """``id -> (state, start)`` from squeue (start: expected start while pending)."""
    if not ids:
        return {}
    text = run_slurm(cluster, "squeue", "-h", "-t", "all", "-j", ",".join(ids), "-o", "%i %T %S")
    rows = [line.split() for line in text.splitlines() if line.strip()]
    return {r[0]: (r[1], r[2]) for r in rows}


def wait_for(predicate: Callable[[], bool], timeout_s: float, step_s: float = 0.5) -> bool:
    """Poll ``predicate`` until it holds or ``timeout_s`` passes; whether it held."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step_s)
    return predicate()


def backfill_cycles(cluster: SlurmCluster) -> int:
    """Slurm's count of backfill passes so far (``sdiag``)."""
    backfill = run_slurm(cluster, "sdiag").split("Backfilling stats", 1)[1]
    for line in backfill.splitlines():
        if line.strip().startswith("Total cycles:"):
            return int(line.split(":")[1])
    raise AssertionError(f"sdiag printed no backfill cycle count:\n{backfill[:400]}")


def wait_for_backfill_passes(cluster: SlurmCluster, passes: int = 2, timeout_s: float = 60) -> None:
    """Wait until Slurm's backfill scheduler has run ``passes`` more times (it re-plans the
    pending jobs' expected starts on each pass; it runs only while a job is pending)."""
    start = backfill_cycles(cluster)
    assert wait_for(lambda: backfill_cycles(cluster) >= start + passes, timeout_s), (
        f"Slurm ran no {passes} backfill passes in {timeout_s} s"
    )


class Natives:
    """Native jobs a test submits (with sbatch, like a user); all cancelled after the test."""

    def __init__(self, cluster: SlurmCluster) -> None:
        self.cluster = cluster
        self.ids: list[str] = []

    def submit(self, *args: str) -> str:
        out = run_slurm(
            self.cluster, "sbatch", "--parsable", "--output=/dev/null", "--partition=batch", *args
        )
        job_id = out.strip().split(";")[0]
        self.ids.append(job_id)
        return job_id


def all_nodes_idle(cluster: SlurmCluster) -> bool:
    """True when every node is idle (not completing a job that just left the queue)."""
    states = run_slurm(cluster, "sinfo", "-h", "-N", "-o", "%T").split()
    return bool(states) and all(state == "idle" for state in states)


@pytest.fixture
def natives(slurm_cluster: SlurmCluster) -> Iterator[Natives]:  # noqa: F811
    # A node still completing a previous test's job is held by no job: the planner would
    # rightly count it out, and a wide queued job would not fit the test's picture.
    # Slurm ends a cancelled job within KillWait (5 s) and takes its nodes back just after.
    if not wait_for(lambda: all_nodes_idle(slurm_cluster), 60):
        states = run_slurm(slurm_cluster, "sinfo", "-h", "-N", "-o", "%N %T")
        pytest.fail(f"the cluster is not idle after 60 s (a job left behind?):\n{states}")
    jobs = Natives(slurm_cluster)
    yield jobs
    if jobs.ids:
        env = {**os.environ, **slurm_cluster.env}
        subprocess.run(["scancel", *jobs.ids], env=env, capture_output=True, timeout=30)

        def gone() -> bool:
            out = run_slurm(slurm_cluster, "squeue", "-h", "-o", "%i", "-t", "PD,R,CG")
            return not set(out.split()) & set(jobs.ids)

        wait_for(gone, 30)  # the next test starts from an idle cluster


@pytest.fixture
def providers(
    slurm_cluster: SlurmCluster,  # noqa: F811
    tmp_path: Path,
) -> Iterator[Callable[..., BackfillProvider]]:
    """Make providers on the test profile; each is closed (its blocks cancelled) afterwards,
    and the next test starts when no block is left on the cluster."""
    made: list[BackfillProvider] = []

    def make(profile: str = "slurm-test", **kwargs: object) -> BackfillProvider:
        kwargs.setdefault("env", dict(slurm_cluster.env))
        kwargs.setdefault("script_dir", str(tmp_path / "blocks"))
        provider = BackfillProvider(profile, **kwargs)  # type: ignore[arg-type]
        made.append(provider)
        return provider

    yield make
    for provider in made:
        provider.close()

    def left() -> list[str]:
        out = run_slurm(slurm_cluster, "squeue", "-h", "-o", "%i %j", "-t", "PD,R,CG")
        return [row for row in out.splitlines() if " pm-block" in row]

    # A block left after close() is a leak of the provider's: fail the test that made it,
    # after cleaning up so the next test starts from an idle cluster.
    if not wait_for(lambda: not left(), 60):
        rows = left()
        run_slurm(slurm_cluster, "scancel", *[row.split()[0] for row in rows])
        pytest.fail(f"blocks left on the cluster after close(): {rows}")
