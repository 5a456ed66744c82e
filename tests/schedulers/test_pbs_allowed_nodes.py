"""Queued PBS jobs name the vnodes they may use (``PendingJob.allowed_nodes``): those of their
queue (binding) that take one of their ``select`` chunks (``resources_available``).

Documents: ``tests/data/pbs/allowed/`` (modelled on the live captures: one MoM ``pbshost``
whose natural vnode has 0 cpus, vnodes vn1..vn6; vn4 and vn5 have 4 cpus, 16gb and gpus; vn6 is
bound to queue ``backfill``) and the live captures themselves.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from parsl_malleable.schedulers.pbs import AllowedVnodes, PBSScheduler, build_pbs_snapshot
from parsl_malleable.schedulers.pbs_parse import (
    PBSQueue,
    parse_pbs_vnodes,
    parse_qstat,
    parse_qstat_queues,
    parse_qstat_server,
    select_chunks,
    serve_queues,
)
from parsl_malleable.schedulers.records import JobState, OutputParseError
from parsl_malleable.snapshot import Snapshot

from .conftest import PBS_DATA

DATA = PBS_DATA / "allowed"
LIVE = PBS_DATA / "live"
WORKQ = frozenset({"vn1", "vn2", "vn3", "vn4", "vn5"})  # every vnode but vn6 (backfill's)
GPUS = frozenset({"vn4", "vn5"})


def qstat_doc() -> dict[str, Any]:
    return json.loads((DATA / "qstat.json").read_text())


def scheduler(queues: bool = True) -> PBSScheduler:
    """An adapter that has read the queue and server documents (``queues``) or not (then it
    knows only its blocks' queue); no command runs."""
    sched = PBSScheduler(queue="workq")
    if queues:
        sched.queues = parse_qstat_queues((DATA / "qstat_Q.json").read_text())
        sched.server = parse_qstat_server((DATA / "qstat_B.json").read_text())
    return sched


def snapshot(doc: dict[str, Any] | None = None, *, queues: bool = True) -> Snapshot:
    jobs = parse_qstat(json.dumps(doc if doc is not None else qstat_doc()))
    vnodes = parse_pbs_vnodes((DATA / "pbsnodes.json").read_text())
    return scheduler(queues).build_snapshot(1_796_400_000.0, vnodes, jobs, [])


def allowed(snap: Snapshot) -> dict[str, frozenset[str] | None]:
    return {p.job_id.split(".")[0]: p.allowed_nodes for p in snap.pending}


def test_queued_jobs_get_the_vnodes_of_their_queue_that_take_a_chunk() -> None:
    snap = snapshot()
    # the natural vnode (0 cpus) is no node of the snapshot at all
    assert [n.name for n in snap.nodes] == ["vn1", "vn2", "vn3", "vn4", "vn5", "vn6"]
    assert allowed(snap) == {
        "73": GPUS,  # 1:ncpus=1:ngpus=1: the gpu vnodes only
        "74[1]": WORKQ,  # 1:ncpus=1 in workq: not vn6, bound to backfill
        "74[2]": WORKQ,
        "75": WORKQ,  # 2:ncpus=1:mem=2gb+1:ncpus=4:ngpus=1: either kind of chunk
        "76": GPUS,  # mem=8gb (mpiprocs asks nothing of a vnode)
        "77": frozenset({"vn6"}),  # backfill's job: its bound vnode only
    }
    # one set object per distinct set: the planner maps each to node ids once
    assert snap.pending[1].allowed_nodes is snap.pending[3].allowed_nodes


def test_a_job_every_vnode_serves_keeps_none() -> None:
    # live capture: six 1-cpu vnodes, no binding, an array of 1:ncpus=1 queued behind a job
    vnodes = parse_pbs_vnodes((LIVE / "pbsnodes-all-busy.json").read_text())
    jobs = parse_qstat((LIVE / "qstat-f-t-array-queued.json").read_text())
    snap = PBSScheduler(queue="workq").build_snapshot(1_796_315_200.0, vnodes, jobs, [])
    assert [p.job_id for p in snap.pending] == [f"61[{i}].pbshost" for i in (1, 2, 3)]
    assert all(p.allowed_nodes is None for p in snap.pending)
    # and so in the documents here when the job asks nothing only some vnodes have
    doc = qstat_doc()
    doc["Jobs"]["77.pbshost"]["queue"] = "workq"
    assert allowed(snapshot(doc))["77"] == WORKQ  # vn6 still out: it is backfill's
    doc["Jobs"] = {"77.pbshost": doc["Jobs"]["77.pbshost"]}
    sched = scheduler()
    sched.queues = {"workq": PBSQueue("workq")}  # no queue bound to vn6 any more
    vnodes = [v for v in parse_pbs_vnodes((DATA / "pbsnodes.json").read_text()) if v.name != "vn6"]
    snap = sched.build_snapshot(0.0, vnodes, parse_qstat(json.dumps(doc)), [])
    assert allowed(snap) == {"77": None}


@pytest.mark.parametrize(
    ("select", "expected"),
    [
        ("1:ncpus=1:ngpus=2", frozenset({"vn5"})),
        ("1:ncpus=2", GPUS),
        ("1:mem=16gb", GPUS),
        ("1:host=vn2", frozenset({"vn2"})),  # a string resource must be equal
        ("1:arch=linux", None),  # every vnode of workq takes it: only the binding restricts
        ("2:ncpus=1:mpiprocs=2:ompthreads=4", None),  # MPI settings ask nothing of a vnode
        ("1:ncpus=1:nosuchres=3", None),  # no vnode defines it: the scheduler ignores it
        ("1:mem=64gb", None),  # nothing of workq takes it by our reading: workq's vnodes
        ("1", None),  # a count alone asks nothing
        (2, None),  # as PBS's JSON prints "2"
    ],
)
def test_chunk_resources_decide_the_vnodes(select: object, expected: frozenset | None) -> None:
    doc = qstat_doc()
    doc["Jobs"]["73.pbshost"]["schedselect"] = select
    assert allowed(snapshot(doc))["73"] == (WORKQ if expected is None else expected)


def test_without_schedselect_the_select_is_read() -> None:
    doc = qstat_doc()
    job = doc["Jobs"]["73.pbshost"]
    del job["schedselect"]
    job["Resource_List"]["select"] = "1:ngpus=2"
    assert allowed(snapshot(doc))["73"] == frozenset({"vn5"})
    del job["Resource_List"]["select"]  # nodect alone: no chunk to match
    assert allowed(snapshot(doc))["73"] == WORKQ


def test_a_subjob_without_a_select_takes_its_array_s() -> None:
    doc = qstat_doc()
    doc["Jobs"]["74[].pbshost"]["schedselect"] = "1:ncpus=1:ngpus=1"
    sub = doc["Jobs"]["74[1].pbshost"]
    del sub["schedselect"]
    del sub["Resource_List"]["select"]
    got = allowed(snapshot(doc))
    assert got["74[1]"] == GPUS
    assert got["74[2]"] == WORKQ  # its own select


def test_a_queue_the_queue_list_does_not_name_gets_the_binding_rule() -> None:
    doc = qstat_doc()
    doc["Jobs"]["73.pbshost"]["queue"] = "express"  # unbound: the unbound vnodes
    doc["Jobs"]["73.pbshost"]["schedselect"] = "1:ncpus=1"
    got = allowed(snapshot(doc, queues=False))
    assert got["73"] == WORKQ
    assert got["77"] == frozenset({"vn6"})  # bound by the vnode's own queue attribute
    assert got["76"] == GPUS


def test_without_the_vnodes_only_the_partitions_restrict() -> None:
    # build_pbs_snapshot called on bare Nodes (no resources known): as before, chunks unread
    doc = qstat_doc()
    vnodes = parse_pbs_vnodes((DATA / "pbsnodes.json").read_text())
    nodes = [v.node for v in vnodes if v.has_cpus]  # vn6 lists backfill, others nothing
    snap = build_pbs_snapshot(0.0, nodes, parse_qstat(json.dumps(doc)))
    got = allowed(snap)
    assert got["77"] == frozenset({"vn6"})
    assert got["73"] is None and got["74[1]"] is None


@pytest.mark.parametrize(
    "select",
    ["1:ncpus", "", "1:ncpus=1+", "two:ncpus=1", ":ncpus=1", "1:=4", "1:ncpus=", "1:n cpus=1"],
)
def test_a_malformed_select_names_the_job_and_field(select: str) -> None:
    doc = qstat_doc()
    doc["Jobs"]["73.pbshost"]["schedselect"] = select
    with pytest.raises(OutputParseError, match=r"qstat job 73\.pbshost: schedselect"):
        parse_qstat(json.dumps(doc))
    del doc["Jobs"]["73.pbshost"]["schedselect"]
    doc["Jobs"]["73.pbshost"]["Resource_List"]["select"] = select
    with pytest.raises(OutputParseError, match=r"qstat job 73\.pbshost: Resource_List\.select"):
        parse_qstat(json.dumps(doc))


def test_a_running_job_s_select_is_not_read() -> None:
    # a status query (qstat -f -x) must not fail on a select only the planner would read
    doc = copy.deepcopy(qstat_doc())
    doc["Jobs"]["70.pbshost"]["schedselect"] = "3:ncpus"
    job = next(j for j in parse_qstat(json.dumps(doc)) if j.job_id == "70.pbshost")
    assert job.state is JobState.RUNNING and job.chunks == ()


def test_select_chunks() -> None:
    assert select_chunks("2:ncpus=1:mem=2gb+1:ncpus=4:ngpus=1", "f") == (
        (("mem", "2gb"), ("ncpus", "1")),
        (("ncpus", "4"), ("ngpus", "1")),
    )
    assert select_chunks(1, "f") == ((),)
    assert select_chunks("ncpus=2", "f") == ((("ncpus", "2"),),)  # no count: one chunk


def test_answers_are_memoised_per_queue_and_chunks() -> None:
    vnodes = parse_pbs_vnodes((DATA / "pbsnodes.json").read_text())
    sched = scheduler()
    nodes = serve_queues(vnodes, sched.queues, sched.server)
    allow = AllowedVnodes(nodes, {v.name: v for v in vnodes})
    gpu = ((("ngpus", "1"),),)
    first = allow("workq", gpu)
    assert first == GPUS and allow("workq", gpu) is first
    assert allow("backfill", gpu) == frozenset({"vn6"})  # none of backfill's: its vnodes
