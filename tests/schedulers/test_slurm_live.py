"""The Slurm adapter against the real local cluster (scripts/slurm-cluster, 6 nodes)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from parsl_malleable.errors import SchedulerCommandError
from parsl_malleable.schedulers.records import JobState
from parsl_malleable.schedulers.slurm import SlurmScheduler
from parsl_malleable.snapshot import NodeState, Snapshot

from .conftest import SlurmCluster, sbatch

pytestmark = pytest.mark.slurm
T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout_s: float = 30.0) -> T:
    """Poll ``probe`` until it returns something truthy; fail naming ``what`` otherwise."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.3)


@pytest.fixture
def sched(slurm_cluster: SlurmCluster) -> SlurmScheduler:
    return SlurmScheduler(env=slurm_cluster.env)


def idle_snapshot(sched: SlurmScheduler) -> Snapshot:
    def probe() -> Snapshot | None:
        snap = sched.snapshot()
        return snap if all(n.state is NodeState.IDLE for n in snap.nodes) else None

    return wait_for("an idle cluster", probe)


def running(sched: SlurmScheduler, job_ids: list[str]) -> None:
    wait_for(
        f"jobs {job_ids} running",
        lambda: all(s.state is JobState.RUNNING for s in sched.status(job_ids).values()),
    )


def test_idle_cluster_snapshot(sched, slurm_cluster) -> None:
    snap = idle_snapshot(sched)
    assert [n.name for n in snap.nodes] == list(slurm_cluster.nodes)
    assert snap.idle_nodes() == list(slurm_cluster.nodes)
    # sinfo does not promise an order of a node's partitions.
    assert {n.name: sorted(n.partitions) for n in snap.nodes} == {
        name: ["batch", "harvest", "scavenger"] for name in slurm_cluster.nodes
    }
    assert snap.running == [] and snap.pending == []
    assert snap.default_time_limit == 3600.0
    assert abs(snap.now - time.time()) < 600  # Unix seconds, not a trace clock
    # The runner counts the commands it really ran.
    before = Counter(sched.queries)
    sched.snapshot()
    assert sched.queries - before == Counter({"sinfo": 1, "squeue": 1, "scontrol": 1})
    lean = SlurmScheduler(env=slurm_cluster.env, reservations=False)
    lean.snapshot()
    assert lean.queries == Counter({"sinfo": 1, "squeue": 1})


def test_busy_cluster_snapshot(sched, slurm_cluster, slurm_jobs) -> None:
    idle_snapshot(sched)
    short = sbatch(slurm_cluster, "-N", "2", "-t", "2", "--wrap", "sleep 60")
    long = sbatch(slurm_cluster, "-N", "2", "-t", "5", "--wrap", "sleep 60")
    slurm_jobs += [short, long]
    running(sched, [short, long])
    big = sbatch(slurm_cluster, "-N", "6", "-t", "3", "-J", "big", "--wrap", "sleep 60")
    slurm_jobs.append(big)

    def planned() -> Snapshot | None:
        snap = sched.snapshot()
        pend = [p for p in snap.pending if p.job_id == big]
        return snap if pend and pend[0].expected_start is not None else None

    snap = wait_for("the backfill scheduler to plan the big job", planned)
    jobs = {j.job_id: j for j in snap.running}
    assert set(jobs) == {short, long}
    assert (jobs[short].time_limit, jobs[long].time_limit) == (120.0, 300.0)
    busy = {n for j in jobs.values() for n in j.nodes}
    assert len(busy) == 4
    states = {n.name: n.state for n in snap.nodes}
    assert {n for n, s in states.items() if s is NodeState.ALLOCATED} == busy
    assert set(snap.idle_nodes()) == set(slurm_cluster.nodes) - busy  # idle or "planned"
    (pending,) = snap.pending
    assert (pending.num_nodes, pending.time_limit, pending.ours) == (6, 180.0, False)
    # It needs every node: it starts when the longer job's time limit runs out.
    last_end = jobs[long].start + jobs[long].time_limit
    assert last_end <= pending.expected_start <= last_end + 60


def test_test_start_matches_real_submission_on_idle_nodes(sched, slurm_jobs) -> None:
    idle_snapshot(sched)
    start, nodes = sched.start_estimate(2, 120)
    job = sched.submit(["sleep", "60"], nodes=2, walltime_s=120, output="/dev/null")
    slurm_jobs.append(job)
    running(sched, [job])
    status = sched.status([job])[job]
    assert status.nodes == nodes
    assert abs(status.start - start) <= 5
    assert status.end_limit == status.start + 120


def test_test_start_matches_real_submission_behind_a_job(sched, slurm_cluster, slurm_jobs) -> None:
    idle_snapshot(sched)
    everything = str(len(slurm_cluster.nodes))
    wall = sbatch(slurm_cluster, "-N", everything, "-t", "2", "--wrap", "sleep 60")
    slurm_jobs.append(wall)
    running(sched, [wall])
    wall_end = sched.status([wall])[wall].end_limit
    start, nodes = sched.start_estimate(3, 60)
    assert start == wall_end
    assert len(nodes) == 3
    job = sched.submit(["sleep", "10"], nodes=3, walltime_s=60, output="/dev/null")
    slurm_jobs.append(job)
    expected = wait_for("an expected start", lambda: sched.status([job])[job].start)
    assert abs(expected - start) <= 60  # Slurm plans on a 60 s grid (bf_resolution)


def test_submit_status_signal_cancel_round_trip(sched, slurm_jobs, tmp_path: Path) -> None:
    idle_snapshot(sched)
    marker = tmp_path / "got usr1"
    script = tmp_path / "block.sh"
    script.write_text(
        "#!/bin/sh\ntrap 'echo usr1 > \"$1\"; exit 0' USR1\nwhile true; do sleep 1; done\n"
    )
    script.chmod(0o755)
    job = sched.submit(
        [str(script), str(marker)],
        nodes=1,
        walltime_s=150,
        name="roundtrip",
        signal_margin_s=30,
        output="/dev/null",
    )
    slurm_jobs.append(job)
    running(sched, [job])
    snap = sched.snapshot()
    (mine,) = [j for j in snap.running if j.job_id == job]
    assert mine.ours and mine.time_limit == 120.0  # 150 s rounds down to 2 minutes
    sched.signal_batch([job], "USR1")
    wait_for("the USR1 trap", marker.exists)
    assert marker.read_text() == "usr1\n"
    final = wait_for(
        "the job to finish", lambda: (s := sched.status([job])[job]).state.finished and s
    )
    assert final.state is JobState.COMPLETED

    other = sched.submit(str(script), nodes=1, walltime_s=60, output="/dev/null")
    slurm_jobs.append(other)
    running(sched, [other])
    sched.cancel([other])
    wait_for("CANCELLED", lambda: sched.status([other])[other].state is JobState.CANCELLED)
    sched.cancel([other])  # cancelling a finished job again is fine
    assert sched.status(["987654321"])["987654321"].state is JobState.UNKNOWN


def test_oversized_request_is_rejected(sched, slurm_cluster) -> None:
    with pytest.raises(SchedulerCommandError, match=r"sbatch .*exit status 1") as info:
        sched.submit(["true"], nodes=len(slurm_cluster.nodes) + 1, walltime_s=60)
    assert info.value.argv[0] == "sbatch"
    with pytest.raises(SchedulerCommandError, match="sbatch"):
        sched.test_start(len(slurm_cluster.nodes) + 1, 60)
