"""Pure parsers for PBS Professional / OpenPBS output (no commands are run here).

Inputs: ``pbsnodes -a -F json``, ``qstat -f [-t] [-x] -F json``, ``qstat -Q -f -F json``,
``qstat -B -f -F json`` and ``pbs_rstat -f`` (text; PBS prints reservations only as text).
Times are accepted as Unix seconds (integers, as pbsnodes prints them) or as the ctime strings
qstat prints (``Sun Nov 29 10:00:00 2026``, local time). PBS's JSON output turns every value
that reads as JSON into a number (``select`` of ``1`` comes back as the integer 1), so values
are read whatever their JSON type. Every problem raises :class:`OutputParseError` naming the
job, node or queue and the field.

Which states and exit statuses mean what is documented, with its sources, in
docs/schedulers.md ("PBS job states and exit statuses").
"""

from __future__ import annotations

import dataclasses
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


def chunks_node_count(select: Any, field: str) -> int:
    """Nodes asked for by a select statement (``2:ncpus=4+1:ngpus=1`` -> 3 chunks).

    PBS's JSON prints ``select=1`` as the integer 1: any JSON type is read as its text."""
    total = 0
    for chunk in str(select).split("+"):
        head = chunk.split(":", 1)[0].strip()
        if head.isdigit():
            total += int(head)
        elif "=" in head:
            total += 1  # a chunk without a count is one chunk
        else:
            raise OutputParseError(field, f"bad select statement {select!r}")
    return total


# One kind of chunk of a select statement: the (resource, value) pairs it asks of one vnode,
# sorted by resource (hashable, so that jobs asking the same share one answer).
Chunk = tuple[tuple[str, str], ...]
_RESOURCE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")


def select_chunks(select: Any, field: str) -> tuple[Chunk, ...]:
    """What each kind of chunk of a select statement asks of one vnode, counts dropped
    (``2:ncpus=4+1:ngpus=1`` -> ``((("ncpus", "4"),), (("ngpus", "1"),))``); a chunk that
    names no resource (``select=2``) asks nothing. Values are kept as text (PBS's JSON may
    print a whole select as a number). A chunk without a resource, a part without ``=`` or a
    name or value, or an empty chunk raises :class:`OutputParseError` naming ``field``."""
    out: list[Chunk] = []
    for chunk in str(select).split("+"):
        parts = [p.strip() for p in chunk.split(":")]
        if parts[0].isdigit():
            parts = parts[1:]
            if not parts:
                out.append(())  # a count alone: that many chunks of the defaults
                continue
        asks: dict[str, str] = {}
        for part in parts:
            name, sep, value = (x.strip() for x in part.partition("="))
            if not sep or not _RESOURCE_NAME.match(name) or not value:
                raise OutputParseError(field, f"bad select statement {select!r}")
            asks[name] = value
        out.append(tuple(sorted(asks.items())))
    return tuple(out)


def vnode_takes_chunk(resources: Mapping[str, Any], chunk: Chunk) -> bool:
    """Whether a vnode with these ``resources_available`` has, in all (free or not: a plan's
    question), what ``chunk`` asks: every resource by :func:`resource_satisfies`."""
    return all(resource_satisfies(resources.get(name), want) for name, want in chunk)


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


def as_bool(value: Any) -> bool | None:
    """A PBS boolean (``True``/``False`` as qstat and pbsnodes print them, any case, or a
    JSON boolean); None when ``value`` is not one."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return None


_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*([kmgtp]?)(b|w)?\s*$", re.IGNORECASE)
_SIZE_FACTOR = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}


def as_amount(value: Any) -> float | None:
    """A PBS number or size in bytes (``4``, ``191gb``, ``512mb``, ``2kw``; a word is 8
    bytes); None when ``value`` is neither (a string or a boolean resource)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if not isinstance(value, str):
        return None
    m = _SIZE.match(value)
    if m is None or (m.group(2) and not m.group(3)):
        return None  # "4k" is no PBS size; "4" and "4kb" are
    number = float(m.group(1)) * _SIZE_FACTOR[m.group(2).lower()]
    return number * 8 if (m.group(3) or "").lower() == "w" else number


def resource_satisfies(have: Any, want: Any) -> bool:
    """Whether a vnode whose ``resources_available`` value is ``have`` (None: unset) can
    take a chunk asking for ``want`` of that resource, as PBS matches chunks to vnodes.

    Booleans must be equal (an unset boolean is False); numbers and sizes need ``have >=
    want`` (unset is 0); strings must be equal, or one of the values of a string_array
    (printed comma-separated); an unset string matches nothing.
    """
    wanted_bool = as_bool(want)
    if wanted_bool is not None:
        return (as_bool(have) or False) is wanted_bool
    wanted_amount = as_amount(want)
    have_amount = 0.0 if have is None else as_amount(have)
    if wanted_amount is not None and have_amount is not None:
        return have_amount >= wanted_amount
    if have is None:
        return False
    return str(want).strip() in {v.strip() for v in str(have).split(",")}


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


@dataclass(frozen=True)
class PBSVnode:
    """One vnode of ``pbsnodes -a -F json`` with what decides which queues may use it.

    ``node.partitions`` is filled later, with the queues that may run jobs on the vnode
    (:func:`serve_queues`). ``queue``: the queue the vnode is bound to (PBS's ``queue``
    attribute: only that queue's jobs run there); ``partition``: its PBS partition (the
    scheduler that serves it); ``resources``: its ``resources_available``.
    """

    node: Node
    queue: str | None = None
    partition: str | None = None
    resources: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def name(self) -> str:
        """The vnode's name."""
        return self.node.name

    @property
    def has_cpus(self) -> bool:
        """False when ``resources_available.ncpus`` is 0 (unknown counts as cpus)."""
        return as_amount(self.resources.get("ncpus")) != 0.0


def parse_pbs_vnodes(text: str) -> list[PBSVnode]:
    """Vnodes from ``pbsnodes -a -F json`` in natural name order."""
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
        avail = attrs.get("resources_available")
        if avail is not None and not isinstance(avail, Mapping):
            raise OutputParseError(f"pbsnodes node {name}: resources_available", "not an object")
        queue = _text_or_none(attrs.get("queue"))
        node = Node(
            str(name),
            map_pbs_node_state(state, bool(attrs.get("jobs"))),
            (queue,) if queue else (),
        )
        out.append(PBSVnode(node, queue, _text_or_none(attrs.get("partition")), dict(avail or {})))
    return sorted(out, key=lambda v: natural_key(v.name))


def parse_pbsnodes(text: str) -> list[Node]:
    """Nodes from ``pbsnodes -a -F json`` in natural name order. Without the queues (see
    :func:`serve_queues`) only a vnode bound to a queue says which one may use it."""
    return [v.node for v in parse_pbs_vnodes(text)]


def _text_or_none(value: Any) -> str | None:
    # JSON turns a queue or partition named "7" into the number 7.
    if value is None or isinstance(value, Mapping | list):
        return None
    text = str(value).strip()
    return text or None


# ---------------------------------------------------------------------------- queues


@dataclass(frozen=True)
class PBSQueue:
    """One queue of ``qstat -Q -f -F json``: what decides where its jobs may run.

    ``execution``: an execution queue (else a routing queue, whose jobs go on to
    ``route_destinations``). ``has_nodes``: vnodes are bound to it (its jobs run only on
    those). ``default_chunk``: resources added to every chunk that does not name them (our
    blocks' ``select=N`` names none), which a vnode must satisfy.
    """

    name: str
    execution: bool = True
    enabled: bool = True
    started: bool = True
    has_nodes: bool = False
    partition: str | None = None
    default_chunk: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    route_destinations: tuple[str, ...] = ()


def parse_qstat_queues(text: str) -> dict[str, PBSQueue]:
    """Queues from ``qstat -Q -f -F json`` by name ({} when it lists none)."""
    doc = load_json(text, "qstat -Q -f -F json")
    queues = doc.get("Queue", {})
    if not isinstance(queues, Mapping):
        raise OutputParseError("qstat -Q: Queue", "not an object")
    out = {}
    for name, attrs in queues.items():
        where = f"qstat queue {name}"
        if not isinstance(attrs, Mapping):
            raise OutputParseError(where, "not an object")
        kind = str(attrs.get("queue_type", "Execution")).strip().lower()
        if kind not in ("e", "execution", "r", "route"):
            raise OutputParseError(f"{where}: queue_type", f"unknown queue type {kind!r}")
        chunk = attrs.get("default_chunk") or {}
        if not isinstance(chunk, Mapping):
            raise OutputParseError(f"{where}: default_chunk", "not an object")
        routes = str(attrs.get("route_destinations", "") or "")
        out[str(name)] = PBSQueue(
            name=str(name),
            execution=kind.startswith("e"),
            # Unset means PBS's default, False; a queue that runs jobs always has them set.
            enabled=as_bool(attrs.get("enabled")) is not False,
            started=as_bool(attrs.get("started")) is not False,
            has_nodes=as_bool(attrs.get("hasnodes")) is True,
            partition=_text_or_none(attrs.get("partition")),
            default_chunk=dict(chunk),
            route_destinations=tuple(d.strip() for d in routes.split(",") if d.strip()),
        )
    return out


@dataclass(frozen=True)
class PBSServer:
    """What ``qstat -B -f -F json`` says that placement needs: where a job that names no
    queue goes, and the server's ``default_chunk`` (under each queue's own)."""

    default_queue: str | None = None
    default_chunk: Mapping[str, Any] = dataclasses.field(default_factory=dict)


def parse_qstat_server(text: str) -> PBSServer:
    """The (first) server of ``qstat -B -f -F json``."""
    doc = load_json(text, "qstat -B -f -F json")
    servers = doc.get("Server", {})
    if not isinstance(servers, Mapping):
        raise OutputParseError("qstat -B: Server", "not an object")
    for name, attrs in servers.items():
        if not isinstance(attrs, Mapping):
            raise OutputParseError(f"qstat server {name}", "not an object")
        chunk = attrs.get("default_chunk") or {}
        if not isinstance(chunk, Mapping):
            raise OutputParseError(f"qstat server {name}: default_chunk", "not an object")
        return PBSServer(_text_or_none(attrs.get("default_queue")), dict(chunk))
    return PBSServer()


def serve_queues(
    vnodes: list[PBSVnode],
    queues: Mapping[str, PBSQueue],
    server: PBSServer | None = None,
    *,
    also: tuple[str, ...] = (),
) -> list[Node]:
    """Each vnode's :class:`Node` with ``partitions`` = the queues whose jobs may run on it.

    A vnode bound to a queue serves that queue only. An unbound vnode serves every queue
    that has no bound vnodes (a queue with bound vnodes runs its jobs there only), whose PBS
    ``partition`` is the vnode's, and whose ``default_chunk`` (over the server's) the vnode
    satisfies. A routing queue serves what its destinations on this server serve. Queues in
    ``also`` that the server did not list (the blocks' queue, when no queue list could be
    read) are taken as unrestricted beyond the binding. A vnode without cpus is left out: it
    is no node for any job (a MoM that carries vnodes lists its natural vnode so).
    """
    bound = {v.queue for v in vnodes if v.queue}
    bound |= {q.name for q in queues.values() if q.has_nodes}
    base_chunk = dict(server.default_chunk) if server is not None else {}
    names = list(queues) + [q for q in also if q and q not in queues]
    out = []
    for vnode in vnodes:
        if not vnode.has_cpus:
            continue
        memo: dict[str, bool] = {}
        served = tuple(
            q for q in names if _serves(vnode, q, queues, bound, base_chunk, memo, set())
        )
        out.append(dataclasses.replace(vnode.node, partitions=served))
    return out


def _serves(
    vnode: PBSVnode,
    name: str,
    queues: Mapping[str, PBSQueue],
    bound: set[str],
    base_chunk: Mapping[str, Any],
    memo: dict[str, bool],
    visiting: set[str],
) -> bool:
    if name in memo:
        return memo[name]
    queue = queues.get(name)
    if queue is not None and not queue.execution:
        # A routing queue: its jobs run where the destinations they are routed to run them
        # (which destination takes a job depends on the job's limits: any of them may).
        visiting = visiting | {name}
        result = any(
            _serves(vnode, dest, queues, bound, base_chunk, memo, visiting)
            for dest in queue.route_destinations
            if "@" not in dest and dest not in visiting and dest in queues
        )
    elif vnode.queue is not None:
        result = vnode.queue == name
    elif name in bound:
        result = False
    elif queue is None:
        result = True  # a queue we know nothing about: only the binding rule applies
    else:
        chunk = {**base_chunk, **queue.default_chunk}
        result = queue.partition == vnode.partition and all(
            resource_satisfies(vnode.resources.get(res), want) for res, want in chunk.items()
        )
    memo[name] = result
    return result


# ---------------------------------------------------------------------------- jobs

# Substates PBS sets on finished jobs (OpenPBS src/include/job.h; the server picks one in
# svr_setjob_histinfo, src/server/svr_jobfunc.c): deleted by a qdel, ended with exit status
# 0, ended otherwise. PBS names them JOB_SUBSTATE_TERMINATED, _FINISHED and _FAILED.
SUBSTATE_TERMINATED = 91
SUBSTATE_FINISHED = 92
SUBSTATE_FAILED = 93
# The server sent the job to its MoM but the job has not started yet (JOB_SUBSTATE_PRERUN):
# job_state is R already and stime is not set.
SUBSTATE_PRERUN = 41

# Exit statuses the MoM sets itself (JOB_EXEC_*, all negative, src/include/job.h).
EXIT_WALLTIME = -29  # JOB_EXEC_KILL_WALLTIME
EXIT_MEMORY = -27  # JOB_EXEC_KILL_MEM
EXIT_VMEM = -26  # JOB_EXEC_KILL_VMEM
# A job whose top shell was killed by signal N ends with 256 + N (the MoM adds 0x100 to the
# signal number: src/resmom/linux/mom_start.c); below 256 it is the shell's own status.
EXIT_SIGNAL_BASE = 256
EXIT_SIGTERM = EXIT_SIGNAL_BASE + 15
EXIT_SIGKILL = EXIT_SIGNAL_BASE + 9


def map_pbs_job_state(state: str, exit_status: Any = None, substate: Any = None) -> JobState:
    """PBS job_state letter (plus Exit_status and substate for finished jobs) -> JobState.

    F (finished) and X (a finished subjob), first match wins: substate 91 (deleted by a
    qdel) CANCELLED; no exit status: substate 93 NODE_FAIL (how the server ends a job
    whose node went down), else CANCELLED (deleted before it ran); 0 COMPLETED; -29
    TIMEOUT; -27 or -26 OUT_OF_MEMORY; 256 + TERM or KILL CANCELLED (a qdel where no
    substate is printed); anything else FAILED.
    """
    if state in ("F", "X"):
        sub = _int_or_none(substate)
        if sub == SUBSTATE_TERMINATED:
            return JobState.CANCELLED
        if exit_status is None:
            return JobState.NODE_FAIL if sub == SUBSTATE_FAILED else JobState.CANCELLED
        code = _int_or_none(exit_status)
        if code is None:
            return JobState.FAILED
        if code == 0:
            return JobState.COMPLETED
        if code == EXIT_WALLTIME:
            return JobState.TIMEOUT
        if code in (EXIT_MEMORY, EXIT_VMEM):
            return JobState.OUT_OF_MEMORY
        if code in (EXIT_SIGTERM, EXIT_SIGKILL):
            return JobState.CANCELLED
        return JobState.FAILED
    return _PBS_STATES.get(state, JobState.UNKNOWN)


def _int_or_none(value: Any) -> int | None:
    """A whole number, or None (``1.5`` is not 1: truncating it would misstate a job)."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, float) and not value.is_integer():  # also inf and NaN
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


_PBS_STATES = {
    "Q": JobState.PENDING,
    "W": JobState.PENDING,  # waiting for its requested execution time
    "T": JobState.PENDING,  # being moved
    "H": JobState.HELD,
    "R": JobState.RUNNING,
    "B": JobState.RUNNING,  # an array that has begun: its subjobs hold the nodes
    "S": JobState.SUSPENDED,
    "U": JobState.SUSPENDED,
    "E": JobState.COMPLETING,  # exiting: still on its nodes (tens of seconds)
    "M": JobState.UNKNOWN,  # moved to another server
}


@dataclass(frozen=True)
class PBSJob:
    """One job of ``qstat -f -F json``, reduced to what the snapshot and status need.

    ``start`` is None for a job in R whose ``stime`` PBS has not set yet (it just started).
    ``array_parent``: a job array (``27[]``), which never holds a node itself; its subjobs
    (``qstat -t``) carry ``array_id``, the parent's id. ``chunks``: for a queued job, what
    each kind of its chunks asks of a vnode (:func:`select_chunks` of ``schedselect``, the
    select with the queue's and server's ``default_chunk`` filled in, else of
    ``Resource_List.select``); () for other jobs and when neither is printed.
    """

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
    substate: int | None = None
    array_parent: bool = False
    array_id: str = ""
    chunks: tuple[Chunk, ...] = ()

    @property
    def starting(self) -> bool:
        """In R without ``stime``: the server sent it to its MoM a moment ago."""
        return self.state is JobState.RUNNING and self.start is None and not self.array_parent


def parse_qstat(text: str) -> list[PBSJob]:
    """Jobs from ``qstat -f [-t] [-x] -F json`` in printed order ({} or no Jobs key -> [])."""
    doc = load_json(text, "qstat -f -F json")
    jobs = doc.get("Jobs", {})
    if not isinstance(jobs, Mapping):
        raise OutputParseError("qstat: Jobs", "not an object")
    return [_parse_job(str(job_id), attrs) for job_id, attrs in jobs.items()]


def _parse_job(job_id: str, attrs: Any) -> PBSJob:
    where = f"qstat job {job_id}"
    if not isinstance(attrs, Mapping):
        raise OutputParseError(where, "not an object")
    raw_state = attrs.get("job_state")
    if not isinstance(raw_state, str):
        raise OutputParseError(f"{where}: job_state", "missing")
    substate = _int_or_none(attrs.get("substate"))
    state = map_pbs_job_state(raw_state, attrs.get("Exit_status"), substate)
    array_parent = "[]" in job_id or as_bool(attrs.get("array")) is True
    resources = attrs.get("Resource_List")
    if not isinstance(resources, Mapping):
        raise OutputParseError(f"{where}: Resource_List", "missing or not an object")
    if "nodect" in resources:
        num_nodes = _int_or_none(resources["nodect"])
        if num_nodes is None:
            raise OutputParseError(
                f"{where}: Resource_List.nodect",
                f"not a whole number: {resources['nodect']!r}",
            )
    elif resources.get("select") is not None:
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

    # A job in R has no stime for a moment after the server sent it to its MoM (substate
    # 41): it is starting, not broken. Queued subjobs print their array's stime: not theirs.
    start = when("stime") if state.holds_nodes or state.finished else None
    nodes: tuple[str, ...] = ()
    if not array_parent:  # the parent's estimated.exec_vnode is a plan, not an allocation
        if isinstance(attrs.get("exec_vnode"), str):
            nodes = vnodes_of(attrs["exec_vnode"])
        elif isinstance(attrs.get("exec_host"), str):
            nodes = vnodes_of(attrs["exec_host"])
    running = state in (JobState.RUNNING, JobState.SUSPENDED)
    if running and not nodes and not array_parent and start is not None:
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
        substate=substate,
        array_parent=array_parent,
        array_id=str(attrs.get("array_id", "") or "") or _array_of(job_id),
        chunks=_chunks_of(where, attrs, resources) if state is JobState.PENDING else (),
    )


def _chunks_of(
    where: str, attrs: Mapping[str, Any], resources: Mapping[str, Any]
) -> tuple[Chunk, ...]:
    """A queued job's chunks (only queued jobs are placed by them: a running job's select
    is not read, so a status query never fails on it)."""
    if attrs.get("schedselect") is not None:
        return select_chunks(attrs["schedselect"], f"{where}: schedselect")
    if resources.get("select") is not None:
        return select_chunks(resources["select"], f"{where}: Resource_List.select")
    return ()


# qstat's text form cuts a name to 16 characters, the last one then a ``*``.
_NAME_WIDTH = 16
_WAITING = frozenset("QWT")
_HOLDING = frozenset("RBESU")


def queue_signature_of_qstat(text: str, ours_prefix: str) -> frozenset[tuple[str, str]]:
    """(sequence number, PD|R) of every native job in plain ``qstat -t`` output (id, name,
    user, time, state, queue), for the provider's watch between polls. A name qstat cut short
    is ours when what is left of it begins ``ours_prefix``, or ``ours_prefix`` begins with it."""
    out = set()
    for line in text.splitlines():
        words = line.split()
        if len(words) < 6 or words[0].startswith(("Job", "-")):
            continue
        # qstat cuts a long id as it cuts a name (``1234567.polaris-*``); the sequence number
        # before the first dot is unique on a server, and the snapshot's ids are compared by it.
        job_id, name, state = words[0].split(".", 1)[0], words[1], words[4]
        if "[]" in job_id:
            continue  # an array: -t lists its subjobs, which the snapshot counts instead
        cut = len(name) == _NAME_WIDTH and name.endswith("*")
        stem = name[:-1] if cut else name
        if ours_prefix and (stem.startswith(ours_prefix) or (cut and ours_prefix.startswith(stem))):
            continue
        if state in _WAITING:
            out.add((job_id, "PD"))
        elif state in _HOLDING:
            out.add((job_id, "R"))
    return frozenset(out)


# A subjob's id, ``27[3].server``: its array is ``27[].server``.
_SUBJOB_ID = re.compile(r"^(\d+)\[\d+\](.*)$")


def _array_of(job_id: str) -> str:
    """The array id of a subjob (OpenPBS 23.06 prints no ``array_id`` for queued subjobs,
    and their array was then counted as one more pending job); "" for any other job."""
    m = _SUBJOB_ID.match(job_id)
    return f"{m[1]}[]{m[2]}" if m else ""


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
