"""Pure parsers for PBS Professional / OpenPBS output (no commands are run here).

Inputs: ``pbsnodes -a -F json``, ``qstat -f [-x] -F json`` and ``pbs_rstat -f`` (text; PBS
prints reservations only as text). Times are accepted as Unix seconds (integers, as pbsnodes
prints them) or as the ctime strings qstat prints (``Sun Nov 29 10:00:00 2026``, local time).
Every problem raises :class:`OutputParseError` naming the job or node and the field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from parsl_malleable.schedulers.hostlist import natural_key
from parsl_malleable.schedulers.records import JobState, OutputParseError
from parsl_malleable.snapshot import Node, NodeState, Reservation


def load_json(text: str, what: str) -> dict[str, Any]:
    """Parse a JSON document printed by ``what``; the top level must be an object."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OutputParseError(what, f"malformed JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise OutputParseError(what, f"expected a JSON object, got {type(doc).__name__}")
    return doc


def parse_pbs_time(value: Any, field: str) -> float:
    """Unix seconds from an integer, a digit string or a ctime string (local time)."""
    if isinstance(value, bool):
        raise OutputParseError(field, f"bad time {value!r}")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        if text.isdigit():
            return float(text)
        try:
            return datetime.strptime(" ".join(text.split()), "%a %b %d %H:%M:%S %Y").timestamp()
        except ValueError:
            pass
    raise OutputParseError(field, f"bad time {value!r}")


def parse_walltime(value: Any, field: str) -> float:
    """Seconds in a PBS duration: ``HH:MM:SS``, ``MM:SS``, plain seconds, or an integer."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        parts = value.strip().split(":")
        if 1 <= len(parts) <= 3 and all(p.replace(".", "", 1).isdigit() for p in parts):
            seconds = 0.0
            for p in parts:
                seconds = seconds * 60 + float(p)
            return seconds
    raise OutputParseError(field, f"bad walltime {value!r}")


def chunks_node_count(select: str, field: str) -> int:
    """Nodes asked for by a select statement (``2:ncpus=4+1:ngpus=1`` -> 3 chunks)."""
    total = 0
    for chunk in select.split("+"):
        head = chunk.split(":", 1)[0].strip()
        if head.isdigit():
            total += int(head)
        elif "=" in head:
            total += 1  # a chunk without a count is one chunk
        else:
            raise OutputParseError(field, f"bad select statement {select!r}")
    return total


def vnodes_of(exec_vnode: str) -> tuple[str, ...]:
    """Node names, in order, in an exec_vnode (``(n1:ncpus=2)+(n2:ncpus=2)``) or exec_host.

    exec_host looks like ``n1/0*2+n2/0``; a node listed in several chunks appears once.
    """
    names: list[str] = []
    for item in exec_vnode.replace("(", "").replace(")", "").split("+"):
        name = item.split(":", 1)[0].split("/", 1)[0].strip()
        if name and name not in names:
            names.append(name)
    return tuple(names)


_NODE_DOWN = {
    "down", "state-unknown", "stale", "unresolvable", "sleep", "maintenance",
    "provisioning", "wait-provisioning", "initializing",
}  # fmt: skip
_NODE_BUSY = {"job-busy", "job-exclusive", "busy", "resv-busy"}


def map_pbs_node_state(state: str, has_jobs: bool = False) -> NodeState:
    """PBS node state (comma-separated words, e.g. ``down,offline``) -> NodeState.

    ``offline`` is PBS's drain (running jobs finish, no new ones start). A ``free`` node that
    still runs a job (shared nodes) counts as ALLOCATED: blocks need whole nodes.
    """
    words = {w.strip() for w in state.split(",") if w.strip()}
    if not words or words & _NODE_DOWN:
        return NodeState.DOWN
    if "offline" in words:
        return NodeState.DRAINED
    if "resv-exclusive" in words:
        return NodeState.RESERVED
    if words & _NODE_BUSY or has_jobs:
        return NodeState.ALLOCATED
    if words == {"free"}:
        return NodeState.IDLE
    return NodeState.DOWN


def parse_pbsnodes(text: str) -> list[Node]:
    """Nodes from ``pbsnodes -a -F json`` in natural name order."""
    doc = load_json(text, "pbsnodes -a -F json")
    nodes = doc.get("nodes")
    if not isinstance(nodes, Mapping):
        raise OutputParseError("pbsnodes: nodes", "missing or not an object")
    out = []
    for name, attrs in nodes.items():
        if not isinstance(attrs, Mapping):
            raise OutputParseError(f"pbsnodes node {name}", "not an object")
        state = attrs.get("state")
        if not isinstance(state, str):
            raise OutputParseError(f"pbsnodes node {name}: state", "missing or not a string")
        avail = attrs.get("resources_available") or {}
        parts: tuple[str, ...] = ()
        if isinstance(attrs.get("partition"), str):
            parts = (attrs["partition"],)
        elif isinstance(avail.get("Qlist"), str):
            parts = tuple(q for q in avail["Qlist"].split(",") if q)
        elif isinstance(attrs.get("queue"), str):
            parts = (attrs["queue"],)
        out.append(Node(name, map_pbs_node_state(state, bool(attrs.get("jobs"))), parts))
    return sorted(out, key=lambda n: natural_key(n.name))


# Exit statuses PBS documents for jobs it killed (JOB_EXEC_KILL_*) and for deleted jobs.
EXIT_WALLTIME = -29
EXIT_MEMORY = -27
EXIT_SIGTERM = 256 + 15


def map_pbs_job_state(state: str, exit_status: Any = None) -> JobState:
    """PBS job_state letter (plus Exit_status for finished jobs) -> JobState."""
    if state == "F" or state == "X":
        if exit_status is None:
            return JobState.CANCELLED if state == "F" else JobState.COMPLETED
        try:
            code = int(exit_status)
        except (TypeError, ValueError):
            return JobState.FAILED
        if code == 0:
            return JobState.COMPLETED
        if code == EXIT_WALLTIME:
            return JobState.TIMEOUT
        if code == EXIT_MEMORY:
            return JobState.OUT_OF_MEMORY
        if code == EXIT_SIGTERM:
            return JobState.CANCELLED
        return JobState.FAILED
    return _PBS_STATES.get(state, JobState.UNKNOWN)


_PBS_STATES = {
    "Q": JobState.PENDING,
    "W": JobState.PENDING,  # waiting for its requested execution time
    "T": JobState.PENDING,  # being moved
    "H": JobState.HELD,
    "R": JobState.RUNNING,
    "B": JobState.RUNNING,
    "S": JobState.SUSPENDED,
    "U": JobState.SUSPENDED,
    "E": JobState.COMPLETING,
    "M": JobState.UNKNOWN,  # moved to another server
}


@dataclass(frozen=True)
class PBSJob:
    """One job of ``qstat -f -F json``, reduced to what the snapshot and status need."""

    job_id: str
    state: JobState
    raw_state: str
    queue: str
    user: str
    name: str
    num_nodes: int
    walltime: float | None
    nodes: tuple[str, ...]
    start: float | None
    submit: float | None
    expected_start: float | None
    end: float | None
    comment: str


def parse_qstat(text: str) -> list[PBSJob]:
    """Jobs from ``qstat -f [-x] -F json`` in printed order ({} or no Jobs key -> [])."""
    doc = load_json(text, "qstat -f -F json")
    jobs = doc.get("Jobs", {})
    if not isinstance(jobs, Mapping):
        raise OutputParseError("qstat: Jobs", "not an object")
    return [_parse_job(job_id, attrs) for job_id, attrs in jobs.items()]


def _parse_job(job_id: str, attrs: Any) -> PBSJob:
    where = f"qstat job {job_id}"
    if not isinstance(attrs, Mapping):
        raise OutputParseError(where, "not an object")
    raw_state = attrs.get("job_state")
    if not isinstance(raw_state, str):
        raise OutputParseError(f"{where}: job_state", "missing")
    state = map_pbs_job_state(raw_state, attrs.get("Exit_status"))
    resources = attrs.get("Resource_List")
    if not isinstance(resources, Mapping):
        raise OutputParseError(f"{where}: Resource_List", "missing or not an object")
    if "nodect" in resources:
        try:
            num_nodes = int(resources["nodect"])
        except (TypeError, ValueError):
            raise OutputParseError(
                f"{where}: Resource_List.nodect", f"not a number: {resources['nodect']!r}"
            ) from None
    elif isinstance(resources.get("select"), str):
        num_nodes = chunks_node_count(resources["select"], f"{where}: Resource_List.select")
    else:
        raise OutputParseError(f"{where}: Resource_List.nodect", "missing (and no select)")
    walltime = None
    if "walltime" in resources:
        walltime = parse_walltime(resources["walltime"], f"{where}: Resource_List.walltime")

    def when(key: str, container: Mapping[str, Any] = attrs, label: str = "") -> float | None:
        if key not in container:
            return None
        return parse_pbs_time(container[key], f"{where}: {label or key}")

    start = when("stime")
    if state in (JobState.RUNNING, JobState.SUSPENDED) and start is None:
        raise OutputParseError(f"{where}: stime", "missing for a running job")
    nodes: tuple[str, ...] = ()
    if isinstance(attrs.get("exec_vnode"), str):
        nodes = vnodes_of(attrs["exec_vnode"])
    elif isinstance(attrs.get("exec_host"), str):
        nodes = vnodes_of(attrs["exec_host"])
    if state in (JobState.RUNNING, JobState.SUSPENDED) and not nodes:
        raise OutputParseError(f"{where}: exec_vnode", "missing for a running job")
    raw_estimated = attrs.get("estimated")
    estimated = raw_estimated if isinstance(raw_estimated, Mapping) else {}
    expected = when("start_time", estimated, "estimated.start_time")
    end = when("obittime") if state.finished else None
    if end is None and state.finished:
        end = when("mtime")
    if end is None and start is not None and walltime is not None:
        end = start + walltime
    owner = str(attrs.get("Job_Owner", ""))
    return PBSJob(
        job_id=job_id,
        state=state,
        raw_state=raw_state,
        queue=str(attrs.get("queue", "")),
        user=owner.split("@", 1)[0],
        name=str(attrs.get("Job_Name", "")),
        num_nodes=num_nodes,
        walltime=walltime,
        nodes=nodes,
        start=start,
        submit=when("qtime") or when("ctime"),
        expected_start=expected,
        end=end,
        comment=str(attrs.get("comment", "")),
    )


_RESV_HEADER = re.compile(r"^Resv ID:\s*(\S+)")


def parse_pbs_rstat(text: str) -> list[Reservation]:
    """Reservations from ``pbs_rstat -f`` (``Resv ID:`` blocks of ``key = value`` lines).

    Maintenance reservations (``pbs_rsub --hosts``) have ids starting with ``M``.
    """
    blocks: list[tuple[str, dict[str, str]]] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        m = _RESV_HEADER.match(line.strip())
        if m:
            blocks.append((m.group(1), {}))
            continue
        key, sep, value = line.partition("=")
        if not sep or not blocks:
            raise OutputParseError(f"pbs_rstat line {lineno}", f"unexpected line {line!r}")
        blocks[-1][1][key.strip()] = value.strip()
    out = []
    for resv_id, attrs in blocks:
        where = f"pbs_rstat {resv_id}"
        for key in ("reserve_start", "reserve_end"):
            if key not in attrs:
                raise OutputParseError(f"{where}: {key}", "missing")
        out.append(
            Reservation(
                name=attrs.get("Reserve_Name", resv_id) or resv_id,
                nodes=vnodes_of(attrs.get("resv_nodes", "")),
                start=parse_pbs_time(attrs["reserve_start"], f"{where}: reserve_start"),
                end=parse_pbs_time(attrs["reserve_end"], f"{where}: reserve_end"),
                maintenance=resv_id.startswith("M"),
            )
        )
    return out


def parse_qsub(stdout: str) -> str:
    """Job id printed by ``qsub`` (``1234.server``)."""
    job_id = stdout.strip()
    if not job_id or not job_id.split(".", 1)[0].split("[", 1)[0].isdigit() or " " in job_id:
        raise OutputParseError("qsub", f"expected a job id, got {stdout!r}")
    return job_id
