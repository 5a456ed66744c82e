"""PBS as a live OpenPBS 23.06.06 server printed it (tests/data/pbs/live/, see its README).

A job array with two subjobs running and one queued, read without and with ``qstat -t``; a job
in R before the server set its ``stime``; jobs in E; every finished state and exit status the
adapter maps (docs/schedulers.md has the table and its sources); and which queues may run
jobs on a vnode (its ``queue``, the queues' ``hasnodes``, ``partition`` and
``default_chunk``). Documents marked "derived" are the live ones with one field changed, the
change being what the server was seen to print (the README says so) but not captured.
"""

from __future__ import annotations

import copy
import json
import shlex
from datetime import datetime
from typing import Any

from parsl_malleable.schedulers.pbs import PBSScheduler, build_pbs_snapshot
from parsl_malleable.schedulers.pbs_parse import (
    PBSQueue,
    PBSServer,
    as_amount,
    map_pbs_job_state,
    parse_pbs_vnodes,
    parse_qstat,
    parse_qstat_queues,
    parse_qstat_server,
    queue_signature_of_qstat,
    resource_satisfies,
    serve_queues,
)
from parsl_malleable.schedulers.records import JobState
from parsl_malleable.snapshot import NodeState
from parsl_malleable.windows.validate import check_snapshot

from .conftest import PBS_DATA

LIVE = PBS_DATA / "live"
# The moment of the capture (the documents' timestamp), 2026-12-01 22:23:45 local time.
CAPTURED = 1796163825.0


def live(name: str) -> str:
    return (LIVE / name).read_text()


def live_doc(name: str) -> dict[str, Any]:
    return json.loads(live(name))


def local(*args: int) -> float:
    return datetime(*args).timestamp()


def live_snapshot(qstat: str, *, nodes: str | None = None, now: float = CAPTURED):
    vnodes = parse_pbs_vnodes(nodes or live("pbsnodes-array-running.json"))
    served = serve_queues(vnodes, {}, also=("workq",))
    return build_pbs_snapshot(now, served, parse_qstat(qstat), ours_prefix="pm-block")


# ------------------------------------------------------------------ job arrays


def test_an_array_read_without_t_holds_no_node_and_breaks_no_poll() -> None:
    # qstat -f: the parent 27[] is in B with stime and no exec_vnode; its subjobs are absent.
    (parent,) = parse_qstat(live("qstat-f-array-running.json"))
    assert parent.job_id == "27[].pbshost" and parent.array_parent
    assert parent.raw_state == "B" and parent.nodes == ()
    snap = live_snapshot(live("qstat-f-array-running.json"))
    assert snap.running == [] and snap.pending == []  # the parent itself holds and queues nothing
    check_snapshot(snap)


def test_array_subjobs_hold_their_vnodes_and_queue_one_by_one() -> None:
    jobs = {j.job_id: j for j in parse_qstat(live("qstat-f-t-array-running.json"))}
    assert list(jobs) == ["27[].pbshost", "27[1].pbshost", "27[2].pbshost", "27[3].pbshost"]
    assert jobs["27[].pbshost"].array_parent and jobs["27[].pbshost"].nodes == ()
    for sub in ("27[1].pbshost", "27[2].pbshost"):
        assert jobs[sub].state is JobState.RUNNING and jobs[sub].nodes == ("pbshost",)
        assert jobs[sub].start == local(2026, 12, 1, 22, 23, 37)
        assert jobs[sub].array_id == "27[].pbshost" and not jobs[sub].array_parent
    queued = jobs["27[3].pbshost"]
    # A queued subjob prints its array's stime: it has not started, and has no start.
    assert queued.state is JobState.PENDING and queued.start is None and queued.num_nodes == 1

    snap = live_snapshot(live("qstat-f-t-array-running.json"))
    # Both subjobs share the one vnode (ncpus=1 each); a whole-node plan sees it held until
    # the later of them ends, by one of them.
    assert [j.nodes for j in snap.running] == [("pbshost",)]
    assert snap.running[0].job_id in ("27[1].pbshost", "27[2].pbshost")
    assert [(p.job_id, p.num_nodes) for p in snap.pending] == [("27[3].pbshost", 1)]
    assert snap.nodes[0].state is NodeState.ALLOCATED
    check_snapshot(snap)  # no vnode held by two jobs


def test_the_adapter_reads_subjobs_with_t(fake_bin, tmp_path) -> None:
    log = tmp_path / "calls.log"
    nodes = shlex.quote(str(LIVE / "pbsnodes-array-running.json"))
    jobs = shlex.quote(str(LIVE / "qstat-f-t-array-running.json"))
    fake_bin("pbsnodes", f'echo "pbsnodes $*" >> {log}; cat {nodes}')
    env = fake_bin(
        "qstat",
        f'echo "qstat $*" >> {log}\n'
        'case " $* " in *" -Q "*|*" -B "*) echo "{}"; exit;; esac\n'
        f'case " $* " in *" -t "*) cat {jobs};; *) exit 1;; esac',
    )
    snap = PBSScheduler(
        queue="workq", reservations=False, env=env, clock=lambda: CAPTURED
    ).snapshot()
    assert "qstat -f -t -F json" in log.read_text().splitlines()
    assert snap.running and snap.running[0].nodes == ("pbshost",)


# ------------------------------------------------------------------ starting and exiting jobs


def _starting() -> dict[str, Any]:
    """Derived: subjob 27[1] as the server printed a job just sent to its MoM (state R,
    substate 41, no stime yet; seen about once in 11 starts)."""
    doc = live_doc("qstat-f-t-array-running.json")
    job = doc["Jobs"]["27[1].pbshost"]
    del job["stime"]
    job["substate"] = 41
    return doc


def test_a_job_in_r_without_stime_is_starting_not_an_error() -> None:
    doc = _starting()
    jobs = {j.job_id: j for j in parse_qstat(json.dumps(doc))}
    starting = jobs["27[1].pbshost"]
    assert starting.state is JobState.RUNNING and starting.start is None and starting.starting
    snap = live_snapshot(json.dumps(doc))
    check_snapshot(snap)
    # Alone on its vnode it holds it from now (it is starting); the qstat of a poll's status
    # reads it as running, with no start yet.
    del doc["Jobs"]["27[2].pbshost"]
    snap = live_snapshot(json.dumps(doc))
    assert [(j.job_id, j.start) for j in snap.running] == [("27[1].pbshost", CAPTURED)]


def test_a_starting_job_fails_neither_snapshot_nor_status(fake_bin, tmp_path) -> None:
    jobs = tmp_path / "jobs.json"
    jobs.write_text(json.dumps(_starting()))
    nodes = shlex.quote(str(LIVE / "pbsnodes-array-running.json"))
    fake_bin("pbsnodes", f"cat {nodes}")
    env = fake_bin(
        "qstat",
        f'case " $* " in *" -Q "*|*" -B "*) echo "{{}}"; exit;; esac\ncat {shlex.quote(str(jobs))}',
    )
    pbs = PBSScheduler(queue="workq", reservations=False, env=env, clock=lambda: CAPTURED)
    assert pbs.snapshot().running
    status = pbs.status(["27[1].pbshost"])["27[1].pbshost"]
    assert status.state is JobState.RUNNING and status.raw_state == "R"


def test_a_job_in_e_still_holds_its_vnode_and_ends_now() -> None:
    # Derived: 27[2] exiting (E stays on its vnode for up to about 40 s), 27[1] gone.
    doc = live_doc("qstat-f-t-array-running.json")
    del doc["Jobs"]["27[1].pbshost"]
    doc["Jobs"]["27[2].pbshost"]["job_state"] = "E"
    doc["Jobs"]["27[2].pbshost"]["substate"] = 50
    (exiting,) = [j for j in parse_qstat(json.dumps(doc)) if j.job_id == "27[2].pbshost"]
    assert exiting.state is JobState.COMPLETING
    snap = live_snapshot(json.dumps(doc))
    (held,) = snap.running
    assert held.job_id == "27[2].pbshost" and held.nodes == ("pbshost",)
    assert held.start + held.time_limit == CAPTURED  # planned free now, not at its walltime
    check_snapshot(snap)


def test_a_vnode_shown_free_that_a_job_holds_is_allocated() -> None:
    # The job started between the pbsnodes and the qstat of one snapshot.
    nodes = live_doc("pbsnodes-array-running.json")
    nodes["nodes"]["pbshost"]["state"] = "free"
    del nodes["nodes"]["pbshost"]["jobs"]
    snap = live_snapshot(live("qstat-f-t-array-running.json"), nodes=json.dumps(nodes))
    assert snap.nodes[0].state is NodeState.ALLOCATED
    check_snapshot(snap)


def test_select_printed_as_a_json_integer() -> None:
    # PBS's JSON makes a number of every value that reads as one: select=1 is 1.
    doc = live_doc("qstat-f-t-array-running.json")
    resources = doc["Jobs"]["27[3].pbshost"]["Resource_List"]
    del resources["nodect"]
    resources["select"] = 1
    jobs = {j.job_id: j for j in parse_qstat(json.dumps(doc))}
    assert jobs["27[3].pbshost"].num_nodes == 1


# ------------------------------------------------------------------ states and exit statuses


# The table of docs/schedulers.md ("PBS job states and exit statuses"), row by row:
# (job_state, substate, Exit_status, JobState).
STATES: list[tuple[str, int | None, Any, JobState]] = [
    ("Q", 10, None, JobState.PENDING),
    ("W", 30, None, JobState.PENDING),
    ("T", 0, None, JobState.PENDING),
    ("H", 20, None, JobState.HELD),
    ("R", 41, None, JobState.RUNNING),  # sent to its MoM, no stime yet
    ("R", 42, None, JobState.RUNNING),
    ("B", 70, None, JobState.RUNNING),  # an array has begun
    ("S", 45, None, JobState.SUSPENDED),
    ("U", 43, None, JobState.SUSPENDED),
    ("E", 50, None, JobState.COMPLETING),
    ("M", 94, None, JobState.UNKNOWN),
    ("F", 92, 0, JobState.COMPLETED),
    ("X", 92, 0, JobState.COMPLETED),
    ("F", 91, 271, JobState.CANCELLED),  # qdel of a running job: TERM ended its shell
    ("F", 91, 265, JobState.CANCELLED),  # ... that outlived TERM: KILL after kill_delay
    ("F", 91, 0, JobState.CANCELLED),  # ... whose script caught TERM and exited 0
    ("F", 91, None, JobState.CANCELLED),  # qdel of a queued job
    ("X", 91, None, JobState.CANCELLED),  # a subjob deleted before it ran
    ("X", None, None, JobState.CANCELLED),  # the same where no substate is printed
    ("F", None, None, JobState.CANCELLED),
    ("F", 93, None, JobState.NODE_FAIL),  # ended by the server: its node went down
    ("F", 93, -29, JobState.TIMEOUT),  # JOB_EXEC_KILL_WALLTIME
    ("F", 93, -27, JobState.OUT_OF_MEMORY),  # JOB_EXEC_KILL_MEM
    ("F", 93, -26, JobState.OUT_OF_MEMORY),  # JOB_EXEC_KILL_VMEM
    ("F", 93, -28, JobState.FAILED),  # JOB_EXEC_KILL_CPUT
    ("F", 93, -1, JobState.FAILED),  # JOB_EXEC_FAIL1: could not start
    ("F", 93, 1, JobState.FAILED),
    ("F", 93, 143, JobState.FAILED),  # the script's own status (its command got TERM)
    ("F", 93, 266, JobState.FAILED),  # USR1 killed the shell (a qsig -s USR1)
    ("F", None, 271, JobState.CANCELLED),  # TERM, no substate printed: a qdel
    ("F", 93, "garbage", JobState.FAILED),
]


def test_every_state_and_exit_status_of_the_table() -> None:
    wrong = [
        (row, got)
        for row in STATES
        if (got := map_pbs_job_state(row[0], row[2], row[1])) is not row[3]
    ]
    assert wrong == []


def test_a_finished_subjob_read_from_qstat() -> None:
    doc = live_doc("qstat-f-t-array-running.json")
    job = copy.deepcopy(doc["Jobs"]["27[3].pbshost"])
    job.update(job_state="X", substate=91)  # deleted before it ran
    doc["Jobs"] = {"27[3].pbshost": job}
    (sub,) = parse_qstat(json.dumps(doc))
    assert sub.state is JobState.CANCELLED and sub.substate == 91


# ------------------------------------------------------------------ queues and vnodes


def _queues(**queues: dict[str, Any]) -> str:
    return json.dumps({"pbs_server": "pbshost", "Queue": queues})


def test_a_vnode_bound_to_another_queue_serves_only_that_queue() -> None:
    # Derived: the live node with queue=otherq, as on the server when blocks never started.
    nodes = live_doc("pbsnodes-array-running.json")
    nodes["nodes"]["pbshost"]["queue"] = "otherq"
    nodes["nodes"]["pbshost"]["state"] = "free"
    del nodes["nodes"]["pbshost"]["jobs"]
    nodes["nodes"]["spare"] = {"state": "free", "resources_available": {"ncpus": 2}}
    queues = parse_qstat_queues(
        _queues(
            workq={"queue_type": "Execution", "enabled": "True", "started": "True"},
            otherq={"queue_type": "Execution", "hasnodes": "True", "enabled": "True"},
        )
    )
    served = {
        n.name: n.partitions for n in serve_queues(parse_pbs_vnodes(json.dumps(nodes)), queues)
    }
    # pbshost runs otherq only; otherq runs only there (it has bound vnodes).
    assert served == {"pbshost": ("otherq",), "spare": ("workq",)}


def test_default_chunk_partition_and_routing_decide_the_other_vnodes() -> None:
    doc = {
        "nodes": {
            "a1": {"state": "free", "resources_available": {"Qlist": "workq,harvest", "ncpus": 32,
                                                            "mem": "191gb", "gpu": "True"}},
            "a2": {"state": "free", "resources_available": {"Qlist": "workq", "ncpus": 32,
                                                            "mem": "64gb"}},
            "p1": {"state": "free", "partition": "p2", "resources_available": {"ncpus": 8}},
        }
    }  # fmt: skip
    queues = parse_qstat_queues(
        _queues(
            workq={"queue_type": "Execution", "default_chunk": {"Qlist": "workq"}},
            harvest={"queue_type": "Execution", "default_chunk": {"Qlist": "harvest"}},
            big={"queue_type": "Execution", "default_chunk": {"mem": "100gb"}},
            gpus={"queue_type": "Execution", "default_chunk": {"gpu": "True"}},
            parted={"queue_type": "Execution", "partition": "p2"},
            prod={"queue_type": "Route", "route_destinations": "harvest,big"},
        )
    )
    server = parse_qstat_server(
        json.dumps({"Server": {"pbshost": {"default_queue": "workq",
                                           "default_chunk": {"ncpus": 1}}}})
    )  # fmt: skip
    assert server == PBSServer("workq", {"ncpus": 1})
    served = {
        n.name: n.partitions
        for n in serve_queues(parse_pbs_vnodes(json.dumps(doc)), queues, server)
    }
    assert served == {
        "a1": ("workq", "harvest", "big", "gpus", "prod"),
        "a2": ("workq",),
        "p1": ("parted",),  # only its partition's queues; its resources lack Qlist anyway
    }


def test_resource_matching() -> None:
    assert as_amount("191gb") == 191 * 2**30 and as_amount("2kw") == 2 * 1024 * 8
    assert as_amount(4) == 4.0 and as_amount("workq") is None and as_amount("4k") is None
    assert resource_satisfies("191gb", "100gb") and not resource_satisfies("64gb", "100gb")
    assert resource_satisfies(32, 1) and not resource_satisfies(None, 1)
    assert resource_satisfies("workq,harvest", "harvest") and not resource_satisfies("a", "b")
    assert resource_satisfies("True", "true") and resource_satisfies(None, "False")
    assert not resource_satisfies(None, "True") and not resource_satisfies(None, "x")


def test_no_vnode_serves_a_stopped_block_queue(fake_bin) -> None:
    nodes = json.dumps({"nodes": {"n1": {"state": "free"}}})
    fake_bin("pbsnodes", f"echo {shlex.quote(nodes)}")
    queues = _queues(
        backfill={"queue_type": "Execution", "enabled": "True", "started": "False"},
        workq={"queue_type": "Execution", "enabled": "True", "started": "True"},
    )
    env = fake_bin(
        "qstat",
        f'case " $* " in *" -Q "*) echo {shlex.quote(queues)};; *) echo "{{}}";; esac',
    )
    snap = PBSScheduler(queue="backfill", reservations=False, env=env).snapshot()
    assert snap.nodes[0].partitions == ("workq",)  # backfill's jobs would never start


def test_queue_records() -> None:
    queues = parse_qstat_queues(
        _queues(
            prod={"queue_type": "Route", "route_destinations": "a, b@other", "enabled": "False"}
        )
    )
    assert queues["prod"] == PBSQueue(
        "prod", execution=False, enabled=False, route_destinations=("a", "b@other")
    )
    assert parse_qstat_queues("{}") == {} and parse_qstat_server("{}") == PBSServer()


def test_a_queued_array_counts_once_per_subjob_and_a_vnode_without_cpus_is_no_node() -> None:
    # 23.06 prints no array_id for queued subjobs: their array is known from their ids.
    doc = live("qstat-f-t-array-queued.json")
    vnodes = parse_pbs_vnodes(live("pbsnodes-all-busy.json"))
    served = serve_queues(vnodes, {}, also=("workq",))
    assert [n.name for n in served] == [f"vn{i}" for i in range(1, 7)]  # not pbshost (0 cpus)
    now = float(json.loads(doc)["timestamp"])
    snap = build_pbs_snapshot(now, served, parse_qstat(doc), ours_prefix="pm-block")
    assert [j.job_id for j in snap.running] == ["60.pbshost"]
    assert [p.job_id for p in snap.pending] == [f"61[{i}].pbshost" for i in (1, 2, 3)]
    # Each subjob keeps its array's place in the scheduler's calendar.
    parent = live_doc("qstat-f-t-array-queued.json")["Jobs"]["61[].pbshost"]
    planned = parent["estimated"]["start_time"]
    assert {p.expected_start for p in snap.pending} == {local_time(planned)}


def local_time(printed: str) -> float:
    return datetime.strptime(printed, "%a %b %d %H:%M:%S %Y").timestamp()


# Plain `qstat -t` on the live server (text form: names cut to 16 characters, then a `*`).
QSTAT_TEXT = """\
Job id            Name             User              Time Use S Queue
----------------  ---------------- ----------------  -------- - -----
218.pbshost       pm-block-bench-* root              00:00:00 R backfill
220.pbshost       native-1         pbsnative         00:00:00 R workq
225[].pbshost     STDIN            pbsnative                0 B workq
225[1].pbshost    STDIN            pbsnative         00:00:00 R workq
225[2].pbshost    STDIN            pbsnative                0 Q workq
226.pbshost       pm-block         root                     0 Q backfill
227.pbshost       held             pbsnative                0 H workq
1234567.polaris-* native-2         pbsnative         00:00:00 R workq
"""


def test_the_watch_reads_natives_from_plain_qstat_and_leaves_out_our_blocks() -> None:
    signature = queue_signature_of_qstat(QSTAT_TEXT, "pm-block")
    # Ids by sequence number (qstat cuts a long one); an array by its subjobs, as a snapshot.
    assert signature == {
        ("220", "R"),
        ("225[1]", "R"),
        ("225[2]", "PD"),
        ("1234567", "R"),
    }
    # A prefix longer than the name column: the cut name is what is left of it.
    assert ("218", "R") not in queue_signature_of_qstat(QSTAT_TEXT, "pm-block-bench-xyz")
    assert ("218", "R") in queue_signature_of_qstat(QSTAT_TEXT, "pm-other")
