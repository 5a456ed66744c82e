"""The planner on PBS snapshots whose queued jobs name the vnodes they may use: a block on the
only vnodes a queued job can take is in its way, a block on a vnode it cannot take is not, and
an idle vnode's window ends when the job that waits for it starts (real planner, no mocks).

Documents: ``tests/data/pbs/allowed/`` (vn1..vn3 run a native job for 5 minutes; our block
71 holds the gpu vnodes vn4 and vn5 for an hour; our block 72 holds vn6, bound to queue
``backfill``, for 30 minutes; job 73 of workq asks for a gpu).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from parsl_malleable.harvest.yielding import blocks_in_the_way, first_native_use
from parsl_malleable.schedulers.pbs import PBSScheduler
from parsl_malleable.schedulers.pbs_parse import (
    parse_pbs_vnodes,
    parse_qstat,
    parse_qstat_queues,
    parse_qstat_server,
)
from parsl_malleable.snapshot import Snapshot
from parsl_malleable.windows.predict import WindowPredictor

DATA = Path(__file__).resolve().parents[1] / "data" / "pbs" / "allowed"


def load(name: str) -> dict[str, Any]:
    return json.loads((DATA / name).read_text())


def snapshot(
    keep: set[str], qstat: dict[str, Any] | None = None, nodes: dict[str, Any] | None = None
) -> Snapshot:
    """The adapter's snapshot of the documents, a minute after the jobs started, with only
    the queued jobs in ``keep`` (ids before the dot)."""
    sched = PBSScheduler(queue="workq")
    sched.queues = parse_qstat_queues((DATA / "qstat_Q.json").read_text())
    sched.server = parse_qstat_server((DATA / "qstat_B.json").read_text())
    jobs = parse_qstat(json.dumps(qstat or load("qstat.json")))
    vnodes = parse_pbs_vnodes(json.dumps(nodes or load("pbsnodes.json")))
    started = next(j.start for j in jobs if j.job_id == "70.pbshost")
    assert started is not None
    snap = sched.build_snapshot(started + 60, vnodes, jobs, [])
    snap.pending = [p for p in snap.pending if p.job_id.split(".")[0] in keep]
    return snap


def deadlines(snap: Snapshot) -> dict[str, float]:
    return {j.job_id: j.start + (j.time_limit or 0.0) for j in snap.running if j.ours}


def unrestricted(snap: Snapshot) -> Snapshot:
    pending = [dataclasses.replace(p, allowed_nodes=None) for p in snap.pending]
    return dataclasses.replace(snap, pending=pending)


def test_a_block_on_the_only_vnodes_a_queued_job_may_use_is_in_its_way() -> None:
    snap = snapshot({"73"})  # 1:ncpus=1:ngpus=1: vn4 or vn5
    assert snap.pending[0].allowed_nodes == frozenset({"vn4", "vn5"})
    ends = deadlines(snap)
    assert set(ends) == {"71.pbshost", "72.pbshost"}
    # the gpu job would start now on the block's vnodes; block 72's vn6 is no use to it
    first = first_native_use(snap, ends)
    assert first["71.pbshost"] == snap.now
    assert first["72.pbshost"] > ends["72.pbshost"]  # never, within the plan's horizon
    assert blocks_in_the_way(snap, ends) == {"71.pbshost": snap.now}
    # without its vnodes the plan put the job on vn6 (block 72 ends first, so its vnode comes
    # first among the freed ones) and made the wrong block yield
    assert blocks_in_the_way(unrestricted(snap), ends) == {"72.pbshost": snap.now}


def test_a_block_on_a_vnode_of_another_queue_is_in_the_way_of_that_queue_s_job_only() -> None:
    snap = snapshot({"77"})  # backfill's job: vn6 only
    ends = deadlines(snap)
    assert blocks_in_the_way(snap, ends) == {"72.pbshost": snap.now}
    snap = snapshot({"74[1]", "74[2]"})  # the array's subjobs: any workq vnode, not vn6
    assert set(blocks_in_the_way(snap, ends)) == {"71.pbshost"}


def test_an_idle_vnode_s_window_ends_when_the_job_that_waits_for_it_starts() -> None:
    # vn5 and vn6 free, block 71 on vn4 only, block 72 gone; job 73 asks for two gpu vnodes
    nodes = load("pbsnodes.json")
    for name in ("vn5", "vn6"):
        nodes["nodes"][name]["state"] = "free"
        del nodes["nodes"][name]["jobs"]
    qstat = load("qstat.json")
    del qstat["Jobs"]["72.pbshost"]
    qstat["Jobs"]["71.pbshost"]["exec_vnode"] = "(vn4:ncpus=1)"
    gpu = qstat["Jobs"]["73.pbshost"]
    gpu["schedselect"] = "2:ncpus=1:ngpus=1"
    gpu["Resource_List"].update(nodect=2, select="2:ncpus=1:ngpus=1")
    snap = snapshot({"73"}, qstat, nodes)
    assert snap.idle_nodes() == ["vn5", "vn6"]
    block = next(j for j in snap.running if j.job_id == "71.pbshost")
    assert block.time_limit is not None
    predictor = WindowPredictor(model=None, samples=0, horizon=1e6)
    windows = predictor.node_windows(snap)
    ends = {n: snap.now + float(w) for n, w in zip(windows.names, windows.naive, strict=True)}
    # the job starts when the block leaves vn4: vn5 is free until then, vn6 (backfill's) for good
    assert ends == {"vn5": block.start + block.time_limit, "vn6": snap.now + 1e6}
    # planned without its vnodes, it took vn5 and vn6 now: no hole at all
    loose = predictor.node_windows(unrestricted(snap))
    assert list(loose.names) == []
