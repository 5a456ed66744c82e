"""Slurm parsers on outputs recorded from the local Slurm 22.05.8 cluster (data/slurm/).

The recordings were made with the adapter's own formats and SLURM_TIME_FORMAT=%s: a busy
cluster (4 running jobs, a 5-node job pending on Resources, a held job, a harvest-partition
block, a maintenance reservation), a cluster with a drained and a down node, and finished jobs
(TIMEOUT from a --time=1 job, CANCELLED, COMPLETED, FAILED).
"""

from __future__ import annotations

from datetime import datetime

import pytest

from parsl_malleable.schedulers.records import JobState, OutputParseError
from parsl_malleable.schedulers.slurm import build_snapshot, walltime_minutes
from parsl_malleable.schedulers.slurm_parse import (
    map_job_state,
    map_node_state,
    parse_duration,
    parse_reservations,
    parse_sbatch_parsable,
    parse_scontrol_job,
    parse_sinfo_nodes,
    parse_squeue,
    parse_test_only,
    parse_timestamp,
)
from parsl_malleable.snapshot import NodeState

from .conftest import DATA


def recorded(name: str) -> str:
    return (DATA / "slurm" / name).read_text()


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("UNLIMITED", None),
        ("infinite", None),
        ("INVALID", None),
        ("N/A", None),
        ("1-02:03:04", 93784.0),
        ("2-00:00:00", 172800.0),
        ("1-02:03", 93780.0),
        ("3-04", 273600.0),
        ("01:00:00", 3600.0),
        ("1:00:00", 3600.0),
        ("20:00", 1200.0),
        ("0:30", 30.0),
        ("45", 2700.0),
    ],
)
def test_parse_duration(text: str, seconds: float | None) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["1:2:3:4", "x-01:00", "ten", "1-", "-5"])
def test_parse_duration_rejects(bad: str) -> None:
    with pytest.raises(OutputParseError, match="time_limit"):
        parse_duration(bad)


def test_parse_timestamp_forms() -> None:
    assert parse_timestamp("1795987928") == 1795987928.0
    assert parse_timestamp("N/A") is None
    assert parse_timestamp("Unknown") is None
    iso = "2026-11-29T21:17:30"
    assert parse_timestamp(iso) == datetime.fromisoformat(iso).timestamp()
    with pytest.raises(OutputParseError, match="start"):
        parse_timestamp("yesterday", "start")


@pytest.mark.parametrize(
    ("text", "state"),
    [
        ("idle", NodeState.IDLE),
        ("planned", NodeState.IDLE),
        ("allocated", NodeState.ALLOCATED),
        ("mixed", NodeState.ALLOCATED),
        ("completing", NodeState.ALLOCATED),
        ("down", NodeState.DOWN),
        ("down*", NodeState.DOWN),
        ("idle*", NodeState.DOWN),
        ("idle~", NodeState.DOWN),
        ("drained", NodeState.DRAINED),
        ("draining", NodeState.DRAINED),
        ("idle+drain", NodeState.DRAINED),
        ("reserved", NodeState.RESERVED),
        ("idle$", NodeState.RESERVED),
        ("maint", NodeState.RESERVED),
        ("fail", NodeState.DOWN),
        ("something_new", NodeState.DOWN),
    ],
)
def test_map_node_state(text: str, state: NodeState) -> None:
    assert map_node_state(text) is state


@pytest.mark.parametrize(
    ("state", "reason", "expected"),
    [
        ("PENDING", "Resources", JobState.PENDING),
        ("PENDING", "JobHeldUser", JobState.HELD),
        ("PENDING", "JobHeldAdmin", JobState.HELD),
        ("CONFIGURING", "", JobState.RUNNING),
        ("TIMEOUT", "TimeLimit", JobState.TIMEOUT),
        ("PREEMPTED", "", JobState.PREEMPTED),
        ("NODE_FAIL", "", JobState.NODE_FAIL),
        ("BOOT_FAIL", "", JobState.FAILED),
        ("OUT_OF_MEMORY", "", JobState.OUT_OF_MEMORY),
        ("REQUEUE_HOLD", "", JobState.HELD),
        ("WEIRD", "", JobState.UNKNOWN),
    ],
)
def test_map_job_state(state: str, reason: str, expected: JobState) -> None:
    assert map_job_state(state, reason) is expected


def test_recorded_busy_squeue() -> None:
    rows = {r.job_id: r for r in parse_squeue(recorded("squeue_busy.txt"))}
    assert set(rows) == {"10", "11", "12", "13", "14", "15", "16", "17"}
    odd = rows["12"]
    assert odd.name == "odd|name"  # a '|' in the name does not shift the columns
    assert odd.nodes == ("n4", "n5")
    assert odd.time_limit == 600.0
    assert odd.end == odd.start + 600.0
    assert rows["11"].nodes == ("n2", "n3")
    big = rows["14"]
    assert (big.state, big.reason, big.num_nodes, big.nodes) == (
        JobState.PENDING,
        "Resources",
        5,
        (),
    )
    assert big.time_limit == 1200.0
    assert rows["15"].state is JobState.HELD and rows["15"].start is None
    assert rows["17"].reason.startswith("Nodes required for job are DOWN")
    assert rows["10"].reason == ""  # Slurm's "None" reason


def test_recorded_busy_snapshot() -> None:
    sinfo = parse_sinfo_nodes(recorded("sinfo_busy.txt"))
    jobs = parse_squeue(recorded("squeue_busy.txt"))
    resv = parse_reservations(recorded("scontrol_show_res.txt"))
    snap = build_snapshot(1795987333.0, sinfo, jobs, resv, ours_prefix="pm-block")
    assert [n.name for n in snap.nodes] == ["n1", "n2", "n3", "n4", "n5", "n6"]
    assert all(n.state is NodeState.ALLOCATED for n in snap.nodes)
    assert all(n.partitions == ("batch", "harvest") for n in snap.nodes)
    assert snap.idle_nodes() == []
    assert [j.job_id for j in snap.running] == ["10", "11", "12", "13"]
    running_nodes = sorted(n for j in snap.running for n in j.nodes)
    assert running_nodes == ["n1", "n2", "n3", "n4", "n5", "n6"]
    # Held job 15 is left out; the harvest block (lower PriorityTier) comes last.
    assert [j.job_id for j in snap.pending] == ["14", "16", "17"]
    big = snap.pending[0]
    ends = {j.job_id: j.start + j.time_limit for j in snap.running}
    # Backfill planned the 5-node job for when the 10-minute job 12 ends.
    assert big.expected_start == ends["12"]
    assert snap.pending[2].ours and not big.ours
    assert snap.default_time_limit == 3600.0
    assert snap.backfill == "conservative"
    (maint,) = snap.reservations
    assert (maint.name, maint.nodes, maint.maintenance) == ("maint_n6", ("n6",), True)
    assert maint.end - maint.start == 3600.0


def test_snapshot_of_harvest_partition_uses_its_default_limit() -> None:
    sinfo = parse_sinfo_nodes(recorded("sinfo_busy.txt"))
    snap = build_snapshot(0.0, sinfo, [], partition="harvest")
    assert snap.default_time_limit == 600.0
    assert sinfo.partitions["batch"].max_time is None  # infinite
    assert sinfo.partitions["harvest"].max_time == 4 * 3600.0
    assert (sinfo.partitions["batch"].tier, sinfo.partitions["harvest"].tier) == (10, 1)


def test_recorded_mixed_node_states() -> None:
    sinfo = parse_sinfo_nodes(recorded("sinfo_mixed.txt"))
    states = {n.name: n.state for n in sinfo.nodes}
    assert states == {
        "n1": NodeState.ALLOCATED,
        "n2": NodeState.IDLE,
        "n3": NodeState.IDLE,
        "n4": NodeState.IDLE,
        "n5": NodeState.DRAINED,
        "n6": NodeState.DOWN,
    }


def test_recorded_finished_states() -> None:
    rows = {r.job_id: r for r in parse_squeue(recorded("squeue_finished.txt"))}
    assert rows["10"].state is JobState.TIMEOUT
    assert rows["10"].end - rows["10"].start >= 60.0  # killed after its 1-minute limit
    assert rows["11"].state is JobState.CANCELLED
    assert rows["15"].state is JobState.CANCELLED  # cancelled while held
    assert rows["19"].state is JobState.COMPLETED
    assert rows["20"].state is JobState.FAILED
    assert all(r.state.finished for r in rows.values())


def test_recorded_test_only() -> None:
    start, nodes, partition = parse_test_only(recorded("sbatch_test_only.txt"))
    assert (start, nodes, partition) == (1795988768.0, ("n1", "n6"), "batch")


def test_test_only_iso_time() -> None:
    line = (
        "sbatch: Job 1 to start at 2026-11-29T21:17:30 using 2 processors "
        "on nodes n[1-2] in partition batch"
    )
    start, nodes, _ = parse_test_only(line)
    assert start == datetime(2026, 11, 29, 21, 17, 30).timestamp()
    assert nodes == ("n1", "n2")


def test_no_reservations() -> None:
    assert parse_reservations("No reservations in the system\n") == []


def test_reservation_missing_field() -> None:
    with pytest.raises(OutputParseError, match="EndTime"):
        parse_reservations("ReservationName=x StartTime=1 Nodes=n1")


def test_garbage_squeue_names_line_and_field() -> None:
    with pytest.raises(OutputParseError, match="squeue line 2"):
        parse_squeue(recorded("squeue_busy.txt").splitlines()[0] + "\nhello world\n")
    bad = "1|RUNNING|None|batch|root|two|1:00|1|1|1|1|n1|x"
    with pytest.raises(OutputParseError, match="num_nodes"):
        parse_squeue(bad)


def test_garbage_sinfo() -> None:
    with pytest.raises(OutputParseError, match="sinfo line 1"):
        parse_sinfo_nodes("PARTITION AVAIL TIMELIMIT\n")


def test_sbatch_parsable() -> None:
    assert parse_sbatch_parsable("123\n") == "123"
    assert parse_sbatch_parsable("123;cluster\n") == "123"
    with pytest.raises(OutputParseError, match="sbatch"):
        parse_sbatch_parsable("Submitted batch job 123")


def test_walltime_rounds_down_to_minutes() -> None:
    assert walltime_minutes(60) == 1
    assert walltime_minutes(179.9) == 2
    with pytest.raises(ValueError, match="whole minutes"):
        walltime_minutes(59)


def test_scontrol_show_job_gives_id_state_and_reason() -> None:
    line = (
        "JobId=1413 JobName=pm-block-x-0-0 UserId=root(0) JobState=CANCELLED Reason=None "
        "Dependency=(null)"
    )
    assert parse_scontrol_job(line) == ("1413", "CANCELLED", "None")
    with pytest.raises(OutputParseError, match="no JobState"):
        parse_scontrol_job("JobId=1413 JobName=x")
