"""The PBS adapter against a live OpenPBS 23.06 server (``scripts/pbs-server start``).

What the captured documents of ``test_pbs_live.py`` show, read here from the running server:
the snapshot of idle vnodes (the MoM's natural vnode, without cpus, is no node), running and
queued job arrays (an array counts once per subjob, never once more for itself), a vnode bound
to another queue, the status of many jobs that end together (``qstat -f -x -F json ID1 ID2``
prints only the first: each must still get its own state), and the walltime.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from parsl_malleable.harvest.sites import snapshot_signature
from parsl_malleable.schedulers.pbs import PBSScheduler
from parsl_malleable.schedulers.records import JobState
from parsl_malleable.snapshot import NodeState
from tests.pbs_server import PBSServer, wait_until

pytestmark = pytest.mark.pbs


def scheduler(pbs: PBSServer, **options: object) -> PBSScheduler:
    return PBSScheduler(queue="backfill", ours_prefix="pm-block", env=pbs.env, **options)


def submit(
    sched: PBSScheduler, tmp_path: Path, argv: list[str], name: str, walltime_s: float
) -> str:
    """A one-vnode job running ``argv``, its output in ``tmp_path`` (not qsub's folder)."""
    return sched.submit(
        argv, nodes=1, walltime_s=walltime_s, name=name, output=str(tmp_path / f"{name}.out")
    )


def running(pbs: PBSServer, ids: list[str]) -> bool:
    jobs = pbs.jobs()
    return all(jobs.get(i, {}).get("job_state") == "R" for i in ids)


def test_an_idle_server_is_its_compute_vnodes_each_serving_both_queues(pbs: PBSServer) -> None:
    snap = scheduler(pbs).snapshot()
    names = [n.name for n in snap.nodes]
    assert names == pbs.compute_vnodes() and len(names) >= 4, names
    assert "pbshost" in pbs.vnodes()  # the natural vnode, 0 cpus: listed, but no node
    assert all(n.state is NodeState.IDLE for n in snap.nodes), snap.nodes
    assert all(set(n.partitions) == {"workq", "backfill"} for n in snap.nodes), snap.nodes
    assert snap.running == [] and snap.pending == []
    assert snap.default_partition == "workq"


def test_running_and_queued_arrays_count_once_per_subjob(pbs: PBSServer) -> None:
    vnodes = pbs.compute_vnodes()
    started = pbs.qsub_native("-J", "1-3", "-l", "select=1:ncpus=1", "--", "/bin/sleep", "600")
    wide = pbs.qsub_native(
        "-l", f"select={len(vnodes) - 3}:ncpus=1", "-l", "place=scatter", "-l",
        "walltime=00:10:00", "--", "/bin/sleep", "600",
    )  # fmt: skip
    subjobs = [started.replace("[]", f"[{i}]") for i in (1, 2, 3)]
    assert wait_until(lambda: running(pbs, [*subjobs, wide]), 60), pbs.jobs()
    queued = pbs.qsub_native("-J", "1-3", "-l", "select=1:ncpus=1", "--", "/bin/sleep", "600")
    assert wait_until(lambda: queued in pbs.jobs(), 30)

    snap = scheduler(pbs).snapshot()
    holders = {job.job_id: job.nodes for job in snap.running}
    assert set(holders) == {*subjobs, wide}, holders  # the begun array itself holds nothing
    assert sorted(n for nodes in holders.values() for n in nodes) == vnodes
    assert all(len(holders[s]) == 1 for s in subjobs)
    assert all(n.state is NodeState.ALLOCATED for n in snap.nodes)
    pending = [p.job_id for p in snap.pending]
    assert pending == [queued.replace("[]", f"[{i}]") for i in (1, 2, 3)], pending
    assert all(p.num_nodes == 1 and p.partition == "workq" for p in snap.pending)
    assert all(p.user == "pbsnative" and not p.ours for p in snap.pending)
    # The provider's watch between polls reads the same queue from plain qstat -t: equal, or it
    # would take every second for a change and poll (arrays, cut names and ids included).
    watch = scheduler(pbs).queue_signature()
    assert watch == snapshot_signature(snap), (sorted(watch), sorted(snapshot_signature(snap)))
    ended = subjobs[0]
    pbs.run("qdel", "-W", "force", ended)
    assert wait_until(lambda: scheduler(pbs).queue_signature() != watch, 30)
    assert (ended.split(".")[0], "R") not in scheduler(pbs).queue_signature()


def test_a_vnode_bound_to_another_queue_serves_only_that_queue(pbs: PBSServer) -> None:
    bound = pbs.compute_vnodes()[-1]
    pbs.run("qmgr", "-c", f"set node {bound} queue = workq")
    try:
        snap = scheduler(pbs).snapshot()
    finally:
        pbs.run("qmgr", "-c", f"unset node {bound} queue")
    serves = {n.name: set(n.partitions) for n in snap.nodes}
    assert serves.pop(bound) == {"workq"}
    # workq now has a bound vnode: its jobs run there only, and the others serve backfill.
    assert all(s == {"backfill"} for s in serves.values()), serves


def test_the_status_of_many_jobs_ending_together_keeps_each_ones_state(
    pbs: PBSServer, tmp_path: Path
) -> None:
    sched = scheduler(pbs)
    blocks = [
        submit(sched, tmp_path, ["/bin/sleep", "600"], f"pm-block-s{i}", 300) for i in range(5)
    ]
    done = submit(sched, tmp_path, ["/bin/true"], "pm-block-done", 60)
    assert wait_until(lambda: running(pbs, blocks), 60), pbs.jobs()
    sched.cancel(blocks)  # five blocks end in one command, as in one poll

    def all_finished() -> bool:
        states = {i: a["job_state"] for i, a in pbs.jobs(history=True).items()}
        return all(states.get(i) == "F" for i in [*blocks, done])

    assert wait_until(all_finished, 60), pbs.jobs(history=True)
    statuses = sched.status([*blocks, done])
    assert {i: statuses[i].state for i in blocks} == dict.fromkeys(blocks, JobState.CANCELLED)
    assert statuses[done].state is JobState.COMPLETED
    assert all(statuses[i].nodes for i in blocks), statuses  # where each ran, its own
    assert sched.status(["999999.pbshost"])["999999.pbshost"].state is JobState.UNKNOWN


def test_pbs_ends_a_job_at_its_walltime_and_the_status_says_timeout(
    pbs: PBSServer, tmp_path: Path
) -> None:
    sched = scheduler(pbs)
    job = submit(sched, tmp_path, ["/bin/sleep", "600"], "pm-block-wall", 3)

    def ended() -> bool:
        return sched.status([job])[job].state.finished

    # The MoM checks walltimes on its own period (tens of seconds on this server).
    assert wait_until(ended, 150), pbs.jobs(history=True).get(job)
    assert sched.status([job])[job].state is JobState.TIMEOUT
