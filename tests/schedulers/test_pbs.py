"""PBS parsers on hand-built documents (tests/data/pbs/) and the adapter through stand-ins.

The documents follow the PBS Professional reference guide's attributes: pbsnodes -a -F json
(free, job-exclusive, job-busy, offline, down, resv-exclusive, state-unknown,down and a free
node running a shared job), qstat -f -F json (running, queued with and without
estimated.start_time, held, one of our blocks) and qstat -f -x -F json (finished jobs).
"""

from __future__ import annotations

import json
import shlex
from datetime import datetime

import pytest

from parsl_malleable.errors import SchedulerCommandError
from parsl_malleable.schedulers.pbs import PBSScheduler, build_pbs_snapshot, format_walltime
from parsl_malleable.schedulers.pbs_parse import (
    chunks_node_count,
    map_pbs_node_state,
    parse_pbs_rstat,
    parse_pbs_time,
    parse_pbsnodes,
    parse_qstat,
    parse_qsub,
    parse_walltime,
    vnodes_of,
)
from parsl_malleable.schedulers.records import JobState, OutputParseError
from parsl_malleable.snapshot import NodeState

from .conftest import PBS_DATA


def doc(name: str) -> str:
    return (PBS_DATA / name).read_text()


def local(*args: int) -> float:
    return datetime(*args).timestamp()


def test_nodes_states() -> None:
    states = {n.name: n.state for n in parse_pbsnodes(doc("pbsnodes.json"))}
    assert states == {
        "node01": NodeState.IDLE,
        "node02": NodeState.IDLE,
        "node03": NodeState.ALLOCATED,
        "node04": NodeState.ALLOCATED,
        "node05": NodeState.ALLOCATED,
        "node06": NodeState.DRAINED,
        "node07": NodeState.DOWN,
        "node08": NodeState.RESERVED,
        "node09": NodeState.DOWN,
        "node10": NodeState.ALLOCATED,
        "node11": NodeState.ALLOCATED,  # "free" but runs a shared job
    }
    # Which queues may use a vnode takes the queues' settings (serve_queues): pbsnodes alone
    # names only the queue a vnode is bound to, and none of these is bound.
    assert {n.partitions for n in parse_pbsnodes(doc("pbsnodes.json"))} == {()}


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ("free", NodeState.IDLE),
        ("job-busy", NodeState.ALLOCATED),
        ("down,offline", NodeState.DOWN),
        ("offline,job-exclusive", NodeState.DRAINED),
        ("resv-exclusive", NodeState.RESERVED),
        ("provisioning", NodeState.DOWN),
        ("", NodeState.DOWN),
    ],
)
def test_node_state_mapping(state: str, expected: NodeState) -> None:
    assert map_pbs_node_state(state) is expected


def test_snapshot_from_documents() -> None:
    nodes = parse_pbsnodes(doc("pbsnodes.json"))
    jobs = parse_qstat(doc("qstat.json"))
    resv = parse_pbs_rstat(doc("pbs_rstat_f.txt"))
    now = local(2026, 11, 29, 23, 20)
    snap = build_pbs_snapshot(now, nodes, jobs, resv, ours_prefix="pm-block")
    assert snap.idle_nodes() == ["node01", "node02"]
    running = {j.job_id: j for j in snap.running}
    assert set(running) == {"101.pbs-head", "102.pbs-head", "106.pbs-head", "107.pbs-head"}
    cfd = running["101.pbs-head"]
    assert cfd.nodes == ("node03", "node04")
    assert cfd.start == local(2026, 11, 29, 22, 0)
    assert cfd.time_limit == 7200.0
    assert (cfd.user, cfd.partition, cfd.ours) == ("alice", "workq", False)
    assert running["102.pbs-head"].nodes == ("node05",)  # two chunks on one vnode
    assert running["106.pbs-head"].ours
    # Held 105 is out; jobs with a planned start come first, in start order, then by qtime.
    assert [j.job_id for j in snap.pending] == ["108.pbs-head", "103.pbs-head", "104.pbs-head"]
    big = snap.pending[1]
    assert big.num_nodes == 4
    assert big.expected_start == local(2026, 11, 30, 0, 0)
    assert big.time_limit == 4 * 3600.0
    assert snap.pending[2].num_nodes == 4  # from select 3:...+1:..., no nodect
    assert snap.pending[2].expected_start is None
    assert snap.backfill == "easy"
    names = {r.name: r for r in snap.reservations}
    assert names["vis_workshop"].nodes == ("node08",)
    assert not names["vis_workshop"].maintenance
    maint = names["M300.pbs-head"]
    assert maint.maintenance and maint.nodes == ("node01", "node02")
    assert maint.end - maint.start == 4 * 3600.0


def test_finished_job_states() -> None:
    jobs = {j.job_id: j for j in parse_qstat(doc("qstat_x.json"))}
    assert jobs["201.pbs-head"].state is JobState.TIMEOUT  # Exit_status -29
    assert jobs["201.pbs-head"].end == local(2026, 11, 29, 21, 10, 3)  # obittime
    assert jobs["202.pbs-head"].state is JobState.COMPLETED
    assert jobs["203.pbs-head"].state is JobState.CANCELLED  # deleted while queued
    assert jobs["204.pbs-head"].state is JobState.CANCELLED  # 271 = SIGTERM from qdel
    assert jobs["205.pbs-head"].state is JobState.RUNNING
    assert jobs["205.pbs-head"].nodes == ("node04", "node02")
    assert jobs["206.pbs-head"].expected_start == local(2026, 11, 29, 21, 30)


def test_helpers() -> None:
    assert chunks_node_count("2:ncpus=4+1:ngpus=1", "f") == 3
    assert chunks_node_count("ncpus=4", "f") == 1
    assert chunks_node_count("host=a:ncpus=1+host=b:ncpus=1", "f") == 2
    with pytest.raises(OutputParseError, match="select"):
        chunks_node_count("two:ncpus=4", "Resource_List.select")
    assert vnodes_of("n1/0*2+n2/0") == ("n1", "n2")
    assert parse_walltime("01:02:03", "w") == 3723.0
    assert parse_walltime(90, "w") == 90.0
    assert parse_walltime("90", "w") == 90.0
    assert parse_pbs_time(1795996800, "t") == 1795996800.0
    assert parse_pbs_time("Mon Nov 30  0:00:00 2026", "t") == local(2026, 11, 30)
    with pytest.raises(OutputParseError, match="stime"):
        parse_pbs_time("soon", "stime")
    assert format_walltime(3723.9) == "01:02:03"
    assert parse_qsub("1234.pbs-head\n") == "1234.pbs-head"
    with pytest.raises(OutputParseError, match="qsub"):
        parse_qsub("qsub: Unknown queue")


def test_malformed_json_is_named() -> None:
    with pytest.raises(OutputParseError, match="qstat -f -F json: malformed JSON"):
        parse_qstat(doc("qstat.json")[:200])
    with pytest.raises(OutputParseError, match="pbsnodes: nodes"):
        parse_pbsnodes('{"timestamp": 1}')


@pytest.mark.parametrize(
    ("field", "message"),
    [
        ("job_state", r"101.pbs-head: job_state"),
        ("Resource_List", r"101.pbs-head: Resource_List"),
        ("exec_vnode", r"101.pbs-head: exec_vnode"),
    ],
)
def test_missing_job_field_is_named(field: str, message: str) -> None:
    data = json.loads(doc("qstat.json"))
    del data["Jobs"]["101.pbs-head"][field]
    if field == "exec_vnode":
        del data["Jobs"]["101.pbs-head"]["exec_host"]
    with pytest.raises(OutputParseError, match=message):
        parse_qstat(json.dumps(data))


def test_missing_node_count_is_named() -> None:
    data = json.loads(doc("qstat.json"))
    del data["Jobs"]["103.pbs-head"]["Resource_List"]["nodect"]
    del data["Jobs"]["103.pbs-head"]["Resource_List"]["select"]
    with pytest.raises(OutputParseError, match=r"103.pbs-head: Resource_List.nodect"):
        parse_qstat(json.dumps(data))


@pytest.mark.parametrize("nodect", [1.5, float("inf"), "1.5", "two"])
def test_node_count_that_is_not_whole_is_named(nodect: object) -> None:
    data = json.loads(doc("qstat.json"))
    data["Jobs"]["103.pbs-head"]["Resource_List"]["nodect"] = nodect
    with pytest.raises(OutputParseError, match=r"103.pbs-head: Resource_List.nodect.*not a whole"):
        parse_qstat(json.dumps(data))


def test_torque_exec_host_ranges_name_each_node_once() -> None:
    assert vnodes_of("n3/0-35+n4/0-35") == ("n3", "n4")
    assert vnodes_of("n3/0+n3/1+n4/0,2-5") == ("n3", "n4")


def test_missing_node_state_is_named() -> None:
    data = json.loads(doc("pbsnodes.json"))
    del data["nodes"]["node04"]["state"]
    with pytest.raises(OutputParseError, match="node04: state"):
        parse_pbsnodes(json.dumps(data))


def test_rstat_missing_end() -> None:
    text = "Resv ID: R1.s\nreserve_start = Sun Nov 29 22:00:00 2026\n"
    with pytest.raises(OutputParseError, match=r"R1\.s: reserve_end"):
        parse_pbs_rstat(text)


def test_qsub_argv() -> None:
    pbs = PBSScheduler(queue="harvest")
    argv = pbs.qsub_argv(["python", "-m", "worker", "a b"], nodes=3, walltime_s=1800, job_name="x")
    assert argv[:3] == ["qsub", "-N", "pm-block-x"]
    assert "select=3" in argv and "place=scatter:excl" in argv and "walltime=00:30:00" in argv
    assert argv[argv.index("-q") + 1] == "harvest"
    assert argv[-5:] == ["--", "python", "-m", "worker", "a b"]
    assert pbs.qsub_argv("/path/job.sh", nodes=1, walltime_s=60)[-1] == "/path/job.sh"
    with pytest.raises(ValueError, match="nodes"):
        pbs.qsub_argv("job.sh", nodes=0, walltime_s=60)


# The adapter end to end, through stand-in PBS commands that print the recorded documents.


def stand_ins(fake_bin, tmp_path) -> dict[str, str]:
    log = tmp_path / "calls.log"
    env = {}
    for name, path in [
        ("pbsnodes", PBS_DATA / "pbsnodes.json"),
        ("pbs_rstat", PBS_DATA / "pbs_rstat_f.txt"),
    ]:
        env = fake_bin(name, f'echo "{name} $*" >> {log}; cat {shlex.quote(str(path))}')
    qstat = (
        f'echo "qstat $*" >> {log}\n'
        'case " $* " in *" -x "*) '
        f"cat {shlex.quote(str(PBS_DATA / 'qstat_x.json'))}; "
        'echo "qstat: Unknown Job Id 999.pbs-head" >&2; exit 153;; esac\n'
        f'case " $* " in *" -Q "*) cat {shlex.quote(str(PBS_DATA / "qstat_Q.json"))}; exit;; esac\n'
        f'case " $* " in *" -B "*) cat {shlex.quote(str(PBS_DATA / "qstat_B.json"))}; exit;; esac\n'
        f"cat {shlex.quote(str(PBS_DATA / 'qstat.json'))}"
    )
    env = fake_bin("qstat", qstat)
    env = fake_bin("qsub", f'echo "qsub $*" >> {log}; echo 4242.pbs-head')
    env = fake_bin("qdel", f'echo "qdel $*" >> {log}; echo "qdel: Unknown Job Id $1" >&2; exit 1')
    env = fake_bin("qsig", f'echo "qsig $*" >> {log}')
    return env


def test_adapter_through_stand_in_commands(fake_bin, tmp_path) -> None:
    env = stand_ins(fake_bin, tmp_path)
    pbs = PBSScheduler(env=env, clock=lambda: 5.0)
    snap = pbs.snapshot()
    assert snap.now == 5.0
    assert snap.idle_nodes() == ["node01", "node02"]
    assert len(snap.running) == 4 and len(snap.pending) == 3 and len(snap.reservations) == 2
    statuses = pbs.status(["201.pbs-head", "205", "999.pbs-head"])
    assert statuses["201.pbs-head"].state is JobState.TIMEOUT
    assert statuses["205"].state is JobState.RUNNING  # matched on the number
    assert statuses["999.pbs-head"].state is JobState.UNKNOWN
    assert pbs.submit(["sleep", "10"], nodes=2, walltime_s=600) == "4242.pbs-head"
    pbs.cancel(["4242.pbs-head"])  # already gone: not an error
    pbs.signal_batch(["4242.pbs-head"], "USR1")
    calls = (tmp_path / "calls.log").read_text().splitlines()
    assert calls[:5] == [
        "qstat -Q -f -F json",
        "qstat -B -f -F json",
        "pbsnodes -a -F json",
        "qstat -f -t -F json",
        "pbs_rstat -f",
    ]
    qsub = (
        "qsub -N pm-block -r n -l select=2 -l place=scatter:excl -l walltime=00:10:00 -- sleep 10"
    )
    assert qsub in calls
    # qsig signals every process of a job: USR1 would end its login shell, URG is ignored
    # by all but the block script, which traps it as its USR1.
    assert calls[-1] == "qsig -s URG 4242.pbs-head"
    # The queue and server settings are read again only after queue_refresh_s.
    pbs.snapshot()
    later = (tmp_path / "calls.log").read_text().splitlines()[len(calls) :]
    assert later == ["pbsnodes -a -F json", "qstat -f -t -F json", "pbs_rstat -f"]


def test_a_job_deleted_here_that_pbs_records_as_finished_reads_cancelled(
    fake_bin, tmp_path
) -> None:
    # 202 ended with exit status 0 and substate 92 in the captured document: on the live
    # server, a job deleted while its MoM was starting it is recorded just so.
    env = stand_ins(fake_bin, tmp_path)
    fake_bin("qdel", "exit 0")  # the delete is taken
    pbs = PBSScheduler(env=env)
    assert pbs.status(["202.pbs-head"])["202.pbs-head"].state is JobState.COMPLETED
    assert pbs.deleted_read_finished == set()
    pbs.cancel(["202"])  # the number alone, as a user may write it
    ended = pbs.status(["202.pbs-head", "201.pbs-head"])
    assert ended["202.pbs-head"].state is JobState.CANCELLED
    assert "deleted by qdel" in ended["202.pbs-head"].reason
    assert ended["201.pbs-head"].state is JobState.TIMEOUT  # not deleted here: as PBS says
    assert pbs.deleted_read_finished == {"202"}
    # Another adapter (a new driver) did not delete it: PBS's word stands.
    assert PBSScheduler(env=env).status(["202.pbs-head"])["202.pbs-head"].state is (
        JobState.COMPLETED
    )


def test_a_job_that_had_finished_before_the_qdel_keeps_its_state(fake_bin, tmp_path) -> None:
    env = stand_ins(fake_bin, tmp_path)
    # qdel of two jobs, one of them over already: it says so for that one and exits 1.
    fake_bin("qdel", 'echo "qdel: Job has finished 202.pbs-head" >&2; exit 35')
    pbs = PBSScheduler(env=env)
    pbs.cancel(["202.pbs-head", "2020.pbs-head"])
    assert pbs.status(["202.pbs-head"])["202.pbs-head"].state is JobState.COMPLETED
    assert pbs.deleted_read_finished == set()
    assert pbs._deleted == {"2020"}  # the other one was taken


def test_adapter_garbage_is_a_command_error(fake_bin) -> None:
    fake_bin("qstat", "echo '{}'")  # no queue or server settings: nothing restricts a vnode
    env = fake_bin("pbsnodes", "echo '<html>502 Bad Gateway</html>'")
    with pytest.raises(SchedulerCommandError, match="pbsnodes -a -F json: unparseable output"):
        PBSScheduler(env=env).snapshot()
