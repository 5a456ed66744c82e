"""Pure parsers for Slurm 22.05 command output (no commands are run here).

The adapter asks for explicit ``|``-separated formats and sets ``SLURM_TIME_FORMAT=%s``, so
timestamps arrive as Unix seconds; ISO local times (``2026-11-29T21:17:30``, Slurm's default)
are accepted too. Every function raises :class:`OutputParseError` naming the field it could
not read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from parsl_malleable.schedulers.hostlist import expand_hostlist, natural_key
from parsl_malleable.schedulers.records import JobState, OutputParseError
from parsl_malleable.snapshot import Node, NodeState, Reservation

# (field, squeue -o code). The job name comes last because it is the only free-text field:
# a '|' inside a name then cannot shift the other columns.
SQUEUE_FIELDS: tuple[tuple[str, str], ...] = (
    ("job_id", "%i"),
    ("state", "%T"),
    ("reason", "%r"),
    ("partition", "%P"),
    ("user", "%u"),
    ("num_nodes", "%D"),
    ("time_limit", "%l"),
    ("start", "%S"),
    ("submit", "%V"),
    ("end", "%e"),
    ("priority", "%Q"),
    ("nodes", "%N"),
    ("name", "%j"),
)
SQUEUE_FORMAT = "|".join(code for _, code in SQUEUE_FIELDS)

SINFO_FIELDS: tuple[tuple[str, str], ...] = (
    ("node", "%N"),
    ("partition", "%P"),
    ("state", "%T"),
    ("tier", "%p"),
    ("max_time", "%l"),
    ("default_time", "%L"),
    ("features", "%f"),
)
SINFO_FORMAT = "|".join(code for _, code in SINFO_FIELDS)

_NO_VALUE = {"", "N/A", "n/a", "None", "(null)", "Unknown", "NONE"}
_UNLIMITED = {"UNLIMITED", "unlimited", "infinite", "INFINITE", "Partition_Limit"}


def parse_duration(text: str, field: str = "time_limit") -> float | None:
    """Seconds in a Slurm time string; None for ``UNLIMITED``/``infinite``/``INVALID``/``N/A``.

    Accepts every form Slurm prints or takes: ``D-HH:MM:SS``, ``D-HH:MM``, ``D-HH``,
    ``HH:MM:SS``, ``MM:SS`` and a bare number of minutes.
    """
    # Not parsl.utils.wtime_to_minutes (Parsl's only walltime helper): it reads HH:MM:SS
    # alone, drops the seconds and fails on D-HH:MM:SS, MM:SS, minutes and UNLIMITED.
    text = text.strip()
    if text in _UNLIMITED or text in _NO_VALUE or text.upper() == "INVALID":
        return None
    days = 0
    rest = text
    if "-" in text:
        day_text, rest = text.split("-", 1)
        if not day_text.isdigit():
            raise OutputParseError(field, f"bad time {text!r}")
        days = int(day_text)
    parts = rest.split(":")
    if not all(p.isdigit() for p in parts) or len(parts) > 3:
        raise OutputParseError(field, f"bad time {text!r}")
    nums = [int(p) for p in parts]
    if "-" in text:  # after a day count: hours[:minutes[:seconds]]
        nums += [0] * (3 - len(nums))
        hours, minutes, seconds = nums
    elif len(nums) == 3:
        hours, minutes, seconds = nums
    elif len(nums) == 2:
        hours, (minutes, seconds) = 0, nums
    else:
        hours, minutes, seconds = 0, nums[0], 0
    return float(((days * 24 + hours) * 60 + minutes) * 60 + seconds)


def parse_timestamp(text: str, field: str = "time") -> float | None:
    """Unix seconds from ``SLURM_TIME_FORMAT=%s`` output or an ISO local time; None if unset."""
    text = text.strip()
    if text in _NO_VALUE or text == "0":
        return None
    if text.isdigit():
        return float(text)
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise OutputParseError(field, f"bad timestamp {text!r}") from None


def map_job_state(state: str, reason: str = "") -> JobState:
    """Slurm job state (long name, e.g. ``RUNNING``) -> :class:`JobState`; held jobs -> HELD."""
    state = state.strip().upper()
    if state in {"PENDING", "REQUEUED", "REQUEUE_FED"}:
        return JobState.HELD if reason.startswith("JobHeld") else JobState.PENDING
    if state in {"REQUEUE_HOLD", "RESV_DEL_HOLD", "SPECIAL_EXIT"}:
        return JobState.HELD
    return _JOB_STATES.get(state, JobState.UNKNOWN)


_JOB_STATES = {
    "RUNNING": JobState.RUNNING,
    "CONFIGURING": JobState.RUNNING,
    "RESIZING": JobState.RUNNING,
    "SIGNALING": JobState.RUNNING,
    "STAGE_OUT": JobState.RUNNING,
    "SUSPENDED": JobState.SUSPENDED,
    "STOPPED": JobState.SUSPENDED,
    "COMPLETING": JobState.COMPLETING,
    "COMPLETED": JobState.COMPLETED,
    "FAILED": JobState.FAILED,
    "BOOT_FAIL": JobState.FAILED,
    "DEADLINE": JobState.FAILED,
    "CANCELLED": JobState.CANCELLED,
    "REVOKED": JobState.CANCELLED,
    "TIMEOUT": JobState.TIMEOUT,
    "NODE_FAIL": JobState.NODE_FAIL,
    "PREEMPTED": JobState.PREEMPTED,
    "OUT_OF_MEMORY": JobState.OUT_OF_MEMORY,
}

_NODE_DOWN = {
    "down", "fail", "failing", "future", "inval", "unknown", "unk", "no_respond",
    "power_down", "powered_down", "powering_down", "powering_up", "power_up",
    "reboot_issued", "reboot_requested", "blocked", "not_responding",
}  # fmt: skip
_NODE_DRAIN = {"drain", "drained", "draining", "drng"}
_NODE_RESERVED = {"reserved", "resv", "maint"}
_NODE_BUSY = {"allocated", "alloc", "mixed", "mix", "completing", "comp"}
# planned: idle now, but the backfill scheduler has picked it for a pending job; the window
# ends at that job's expected start, which the snapshot carries.
_NODE_IDLE = {"idle", "planned", "plnd", "cloud"}


def map_node_state(text: str) -> NodeState:
    """Slurm node state (``idle``, ``down*``, ``idle+drain``, ``planned``...) -> NodeState.

    Flag suffixes count: ``*`` (not responding) and ``~`` (powered off) make a node DOWN, ``$``
    (in a maintenance reservation) RESERVED. Unrecognised words map to DOWN: a node we cannot
    read is not a node to plan on.
    """
    raw = text.strip().lower()
    base = raw.rstrip("*~#!%$@^-")
    flags = raw[len(base) :]
    words = set(base.split("+"))
    if "*" in flags or "~" in flags or words & _NODE_DOWN:
        return NodeState.DOWN
    if words & _NODE_DRAIN:
        return NodeState.DRAINED
    if "$" in flags or words & _NODE_RESERVED:
        return NodeState.RESERVED
    if words & _NODE_BUSY:
        return NodeState.ALLOCATED
    if words and words <= _NODE_IDLE:
        return NodeState.IDLE
    return NodeState.DOWN


@dataclass(frozen=True)
class SqueueRow:
    """One line of ``squeue -o SQUEUE_FORMAT``."""

    job_id: str
    state: JobState
    raw_state: str
    reason: str
    partition: str
    user: str
    num_nodes: int
    time_limit: float | None
    start: float | None
    submit: float | None
    end: float | None
    priority: int
    nodes: tuple[str, ...]
    name: str


def parse_squeue(text: str) -> list[SqueueRow]:
    """Parse ``squeue -h -o SQUEUE_FORMAT`` output, one row per line, in printed order."""
    rows = []
    n = len(SQUEUE_FIELDS)
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split("|", n - 1)
        if len(parts) != n:
            raise OutputParseError(
                f"squeue line {lineno}", f"expected {n} '|'-separated fields, got {line!r}"
            )
        f = dict(zip((name for name, _ in SQUEUE_FIELDS), parts, strict=True))
        where = f"squeue line {lineno} "
        if not f["num_nodes"].strip().isdigit():
            raise OutputParseError(where + "num_nodes", f"not a number: {f['num_nodes']!r}")
        try:
            priority = int(f["priority"]) if f["priority"].strip() not in _NO_VALUE else 0
        except ValueError:
            raise OutputParseError(where + "priority", f"not a number: {f['priority']!r}") from None
        rows.append(
            SqueueRow(
                job_id=f["job_id"].strip(),
                state=map_job_state(f["state"], f["reason"]),
                raw_state=f["state"].strip(),
                reason="" if f["reason"].strip() in _NO_VALUE else f["reason"].strip(),
                partition=f["partition"].strip(),
                user=f["user"].strip(),
                num_nodes=int(f["num_nodes"]),
                time_limit=parse_duration(f["time_limit"], where + "time_limit"),
                start=parse_timestamp(f["start"], where + "start"),
                submit=parse_timestamp(f["submit"], where + "submit"),
                end=parse_timestamp(f["end"], where + "end"),
                priority=priority,
                nodes=tuple(expand_hostlist(f["nodes"])),
                name=f["name"],
            )
        )
    return rows


@dataclass(frozen=True)
class PartitionInfo:
    """What sinfo says about one partition."""

    name: str
    max_time: float | None
    default_time: float | None
    tier: int
    default: bool


@dataclass(frozen=True)
class SinfoResult:
    """Nodes (natural name order, partitions merged) and partitions from ``sinfo -N``."""

    nodes: list[Node]
    partitions: dict[str, PartitionInfo]

    def default_partition(self) -> PartitionInfo | None:
        """The partition marked default (``*``), else None."""
        return next((p for p in self.partitions.values() if p.default), None)


def parse_sinfo_nodes(text: str) -> SinfoResult:
    """Parse ``sinfo -N -h -o SINFO_FORMAT``: one line per (node, partition) pair."""
    n = len(SINFO_FIELDS)
    states: dict[str, NodeState] = {}
    node_parts: dict[str, list[str]] = {}
    features: dict[str, tuple[str, ...]] = {}
    partitions: dict[str, PartitionInfo] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split("|")
        if len(parts) != n:
            raise OutputParseError(
                f"sinfo line {lineno}", f"expected {n} '|'-separated fields, got {line!r}"
            )
        f = dict(zip((name for name, _ in SINFO_FIELDS), (p.strip() for p in parts), strict=True))
        where = f"sinfo line {lineno} "
        is_default = f["partition"].endswith("*")
        part = f["partition"].rstrip("*")
        if not f["tier"].isdigit():
            raise OutputParseError(where + "tier", f"not a number: {f['tier']!r}")
        partitions.setdefault(
            part,
            PartitionInfo(
                name=part,
                max_time=parse_duration(f["max_time"], where + "max_time"),
                default_time=parse_duration(f["default_time"], where + "default_time"),
                tier=int(f["tier"]),
                default=is_default,
            ),
        )
        feats = tuple(x for x in f["features"].split(",") if x and x not in _NO_VALUE)
        for name in expand_hostlist(f["node"]):
            states[name] = map_node_state(f["state"])
            node_parts.setdefault(name, [])
            if part not in node_parts[name]:
                node_parts[name].append(part)
            features[name] = feats
    nodes = [
        Node(name, states[name], tuple(node_parts[name]), features[name])
        for name in sorted(states, key=natural_key)
    ]
    return SinfoResult(nodes, partitions)


_KV = re.compile(r"(\w+)=(\S*)")


def parse_reservations(text: str) -> list[Reservation]:
    """Parse ``scontrol show res -o`` (one reservation per line); "No reservations" -> []."""
    out = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("No reservations"):
            continue
        kv = dict(_KV.findall(line))
        where = f"scontrol show res line {lineno} "
        for key in ("ReservationName", "StartTime", "EndTime"):
            if key not in kv:
                raise OutputParseError(where + key, f"missing in {line[:120]!r}")
        start = parse_timestamp(kv["StartTime"], where + "StartTime")
        end = parse_timestamp(kv["EndTime"], where + "EndTime")
        if start is None or end is None:
            raise OutputParseError(where + "StartTime", f"reservation without times: {line!r}")
        flags = set(kv.get("Flags", "").split(","))
        out.append(
            Reservation(
                name=kv["ReservationName"],
                nodes=tuple(expand_hostlist(kv.get("Nodes", ""))),
                start=start,
                end=end,
                maintenance="MAINT" in flags,
            )
        )
    return out


_TEST_ONLY = re.compile(
    r"Job (?P<job>\d+) to start at (?P<start>\S+) using (?P<cpus>\d+) processors? "
    r"on nodes (?P<nodes>\S+) in partition (?P<partition>\S+)"
)


def parse_test_only(stderr: str) -> tuple[float, tuple[str, ...], str]:
    """(start, nodes, partition) from ``sbatch --test-only``'s stderr line."""
    m = _TEST_ONLY.search(stderr)
    if not m:
        raise OutputParseError("sbatch --test-only", f"no 'Job N to start at' line in {stderr!r}")
    start = parse_timestamp(m["start"], "sbatch --test-only start")
    if start is None:
        raise OutputParseError("sbatch --test-only start", f"no start time in {stderr!r}")
    return start, tuple(expand_hostlist(m["nodes"])), m["partition"]


def parse_scontrol_job(text: str) -> tuple[str, str, str]:
    """``(job id, state, reason)`` from one ``scontrol show job --oneliner`` line."""
    fields = dict(
        item.split("=", 1) for item in text.split() if "=" in item and not item.startswith("=")
    )
    try:
        return fields["JobId"], fields["JobState"], fields.get("Reason", "")
    except KeyError as exc:
        raise OutputParseError("scontrol show job", f"no {exc.args[0]} in {text[:80]!r}") from None


def parse_sbatch_parsable(stdout: str) -> str:
    """Job id from ``sbatch --parsable`` (``123`` or ``123;cluster``)."""
    first = stdout.strip().split(";", 1)[0]
    if not first.isdigit():
        raise OutputParseError("sbatch --parsable", f"expected a job id, got {stdout!r}")
    return first
