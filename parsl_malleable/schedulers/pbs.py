"""PBS Professional / OpenPBS adapter: the same :class:`Snapshot` as the Slurm adapter.

Queries per :meth:`PBSScheduler.snapshot`: ``pbsnodes -a -F json`` and ``qstat -f -t -F json``
(``-t``: the subjobs of job arrays, which hold the nodes an array runs on), plus ``pbs_rstat
-f`` when ``reservations=True`` (the default); every ``queue_refresh_s`` also ``qstat -Q -f -F
json`` and ``qstat -B -f -F json``, which say which queues may run jobs on which vnodes.
OpenPBS is not packaged for Debian: this adapter is tested on documents recorded from a live
OpenPBS 23.06 server (``tests/data/pbs/live/``), on hand-built ones (``tests/data/pbs/``) and
through stand-in commands (``tests/provider/fake_pbs.py`` runs block scripts as a MoM would).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

from parsl_malleable.errors import SchedulerCommandError
from parsl_malleable.schedulers.base import Script, SiteDestination
from parsl_malleable.schedulers.command_scheduler import CommandScheduler, current_user
from parsl_malleable.schedulers.pbs_parse import (
    Chunk,
    PBSJob,
    PBSQueue,
    PBSServer,
    PBSVnode,
    parse_pbs_rstat,
    parse_pbs_vnodes,
    parse_qstat,
    parse_qstat_queues,
    parse_qstat_server,
    parse_qsub,
    queue_signature_of_qstat,
    serve_queues,
    vnode_takes_chunk,
)
from parsl_malleable.schedulers.records import (
    JobState,
    JobStatus,
    parse_output,
)
from parsl_malleable.snapshot import (
    Node,
    NodeState,
    PendingJob,
    Reservation,
    RunningJob,
    Snapshot,
)

# A job in E (exiting) is taken to free its nodes now: PBS ends it within tens of seconds,
# and a queued job may start on them then; planning it later would harvest in its way.
EXITING_LIMIT_FLOOR_S = 1.0
# qsub options the provider sets on every block (letter -> what to set in the profile instead).
CONTROLLED: dict[str, str] = {
    "N": "the provider names its blocks (it finds them by name)",
    "q": "use the profile's `queue`",
    "A": "use the profile's `account`",
    "o": "a block's output goes next to its script (BackfillProvider script_dir)",
    "j": "a block's output goes next to its script (BackfillProvider script_dir)",
    "r": "blocks are never rerun (-r n)",
    "J": "a block is one job",
    "h": "a block must start when it is planned",
    "a": "a block must start when it is planned",
    "I": "a block is a batch job",
}
# -l resources the provider sets (the chunk count, the walltime, whole-node placement).
CONTROLLED_RESOURCES: dict[str, str] = {
    "select": "block sizes are min_nodes_per_block / max_nodes_per_block",
    "nodes": "block sizes are min_nodes_per_block / max_nodes_per_block",
    "walltime": "each block's walltime comes from its window: set max_walltime_s, min_block_s",
    "place": "blocks take whole nodes (place=scatter:excl)",
}


def build_pbs_snapshot(
    now: float,
    nodes: Sequence[Node],
    jobs: Iterable[PBSJob],
    reservations: Sequence[Reservation] = (),
    *,
    ours_prefix: str = "",
    backfill: str = "easy",
    default_time_limit: float | None = None,
    default_partition: str | None = None,
    vnodes: Mapping[str, PBSVnode] | None = None,
) -> Snapshot:
    """Assemble a :class:`Snapshot` from parsed PBS output (pure).

    Running: jobs in R, S and E on the vnodes they hold; a job in R without ``stime`` (just
    sent to its MoM) started ``now``; a job in E ends now. A job array (``27[]``) holds no
    vnode: its subjobs (``qstat -t``) do, and queue one by one. PBS shares vnodes between
    jobs, a whole-node block cannot: a shared vnode goes to the job that ends last and is
    free when it ends. A vnode pbsnodes showed free that a job holds (it started between the
    two queries) is allocated. Pending: Q, W and T (held jobs are left out: they never start
    on their own). PBS does not print its sort order, so pending jobs are ordered by the
    scheduler's own calendar (``estimated.start_time``, set for the jobs it plans) and then
    by queue time and id. Each pending job carries the vnodes it may run on
    (:class:`AllowedVnodes`; ``vnodes``: the parsed vnodes by name, whose binding and
    resources that needs; without them only ``Node.partitions`` restricts a job), None when
    that is every vnode; a queued subjob that prints no select takes its array's.
    """
    jobs = list(jobs)
    known = {n.name for n in nodes}
    with_subjobs = {j.array_id for j in jobs if j.array_id}
    # The scheduler's calendar plans an array's next subjob on the array itself.
    array_start = {j.job_id: j.expected_start for j in jobs if j.array_parent}
    array_chunks = {j.job_id: j.chunks for j in jobs if j.array_parent}
    allowed = AllowedVnodes(nodes, vnodes)
    holding: list[RunningJob] = []
    pending: list[PendingJob] = []
    for job in jobs:
        ours = bool(ours_prefix) and job.name.startswith(ours_prefix)
        if job.array_parent and (job.job_id in with_subjobs or job.state is not JobState.PENDING):
            continue  # its subjobs are listed, or it holds nothing and queues nothing itself
        if job.state.holds_nodes:
            held = tuple(n for n in job.nodes if n in known)
            if not held:
                continue  # a starting job whose vnodes are not printed yet, or unknown ones
            start = job.start if job.start is not None else now
            limit = job.walltime
            if job.state is JobState.COMPLETING:
                limit = max(now - start, EXITING_LIMIT_FLOOR_S)
            holding.append(
                RunningJob(job.job_id, held, start, limit, job.queue, job.user, ours, job.name)
            )
        elif job.state is JobState.PENDING:
            expected = job.expected_start
            if expected is None and job.array_id:
                # No subjob starts before the array's next one: each keeps its array's place.
                expected = array_start.get(job.array_id)
            chunks = job.chunks or array_chunks.get(job.array_id, ())
            pending.append(
                PendingJob(
                    job_id=job.job_id,
                    num_nodes=job.num_nodes,
                    time_limit=job.walltime,
                    submit=job.submit if job.submit is not None else now,
                    partition=job.queue,
                    user=job.user,
                    expected_start=expected,
                    ours=ours,
                    name=job.name,
                    allowed_nodes=allowed(job.queue, chunks),
                )
            )
    running = _one_holder_per_vnode(holding)
    held_now = {n for job in running for n in job.nodes}
    nodes = [
        dataclasses.replace(n, state=NodeState.ALLOCATED)
        if n.state is NodeState.IDLE and n.name in held_now
        else n
        for n in nodes
    ]
    pending.sort(
        key=lambda p: (
            p.expected_start is None,
            p.expected_start or 0.0,
            p.submit,
            _id_number(p.job_id),
        )
    )
    return Snapshot(
        now=now,
        nodes=list(nodes),
        running=running,
        pending=pending,
        reservations=list(reservations),
        backfill=backfill,
        default_time_limit=default_time_limit,
        default_partition=default_partition,
    )


# Chunk resources that ask nothing of a vnode: how many MPI ranks and threads to start.
CHUNK_ONLY = frozenset({"mpiprocs", "ompthreads"})


class AllowedVnodes:
    """The vnodes (of ``nodes``, the snapshot's) a queued job may ever run on, by its queue
    and its chunks; None when that is all of them, so that a snapshot where every job may use
    every vnode keeps the planner's plain kernel. Answers are memoised per queue, per chunk and
    per (queue, chunks), and equal sets are one object, however many jobs share it (the
    planner maps each distinct set to node ids once).

    - Queue: the vnodes whose ``Node.partitions`` list it (:func:`serve_queues`: a vnode
      bound to a queue serves that queue only, a queue with bound vnodes runs only there,
      plus the PBS ``partition`` and ``default_chunk`` rules). A queue that no vnode lists
      (one the queue list did not name) gets PBS's binding rule from ``vnodes``: the vnodes
      bound to it, else the unbound ones; without ``vnodes``, any vnode.
    - Chunks: a vnode qualifies when its ``resources_available`` hold what at least one
      kind of the job's chunks asks (:func:`vnode_takes_chunk`: numbers and sizes at least as
      large, strings equal). A resource that no vnode defines is not matched (the scheduler
      does not schedule on it), nor are ``mpiprocs`` and ``ompthreads``. A job no vnode of its
      queue can take by this reading is given its queue's vnodes instead: the reading may miss
      a resource that a hook or the host's natural vnode provides, and a job planned on nodes
      it might use errs towards harvesting less.

    Approximated (the plan counts whole vnodes, one per chunk, as ``nodect`` does): a job with
    several kinds of chunk may use any vnode that takes one of them, not so many of each kind;
    ``place=pack``/``free``/``shared`` may put several chunks on one vnode (planned as
    several vnodes: the job looks larger); ``place=excl``/``scatter`` are what the plan
    assumes. Resources are compared with what a vnode has in all, not with what is free now.
    """

    def __init__(self, nodes: Sequence[Node], vnodes: Mapping[str, PBSVnode] | None) -> None:
        self.nodes = list(nodes)
        self.vnodes = vnodes
        self.everything = frozenset(n.name for n in self.nodes)
        self.defined = {r for v in (vnodes or {}).values() for r in v.resources} - CHUNK_ONLY
        self._queues: dict[str, frozenset[str] | None] = {}
        self._chunks: dict[Chunk, frozenset[str] | None] = {}
        self._jobs: dict[tuple[str, tuple[Chunk, ...]], frozenset[str] | None] = {}
        self._sets: dict[frozenset[str], frozenset[str]] = {}

    def __call__(self, queue: str, chunks: tuple[Chunk, ...]) -> frozenset[str] | None:
        """The vnodes a job of ``queue`` asking ``chunks`` may use; None: all of them."""
        key = (queue, chunks)
        if key not in self._jobs:
            allowed = self._allowed(queue, chunks)
            self._jobs[key] = None if allowed is None else self._sets.setdefault(allowed, allowed)
        return self._jobs[key]

    def _allowed(self, queue: str, chunks: tuple[Chunk, ...]) -> frozenset[str] | None:
        served = self.queue_vnodes(queue)
        takers: frozenset[str] | None = frozenset() if chunks else None
        for chunk in chunks:
            taking = self.chunk_vnodes(chunk)
            if taking is None:  # a kind of chunk any vnode takes
                takers = None
                break
            takers = (takers or frozenset()) | taking
        allowed = served
        if takers is not None:
            both = takers if served is None else takers & served
            # Nothing of its queue takes it by our reading: plan it on its queue's vnodes.
            allowed = both if both else served
        if allowed is None or allowed >= self.everything:
            return None
        return allowed

    def queue_vnodes(self, queue: str) -> frozenset[str] | None:
        """The vnodes whose queues include ``queue``; None: any vnode."""
        if queue not in self._queues:
            listed = frozenset(n.name for n in self.nodes if queue in n.partitions)
            if not listed and self.vnodes is not None:
                bound = {v.queue for v in self.vnodes.values()}
                want = queue if queue in bound else None
                vnodes = self.vnodes
                listed = frozenset(
                    n.name for n in self.nodes if n.name in vnodes and vnodes[n.name].queue == want
                )
            self._queues[queue] = listed or None
        return self._queues[queue]

    def chunk_vnodes(self, chunk: Chunk) -> frozenset[str] | None:
        """The vnodes that can take one ``chunk``; None: any vnode."""
        if chunk not in self._chunks:
            asks = tuple((r, want) for r, want in chunk if r in self.defined)
            if not asks or self.vnodes is None:
                self._chunks[chunk] = None
            else:
                self._chunks[chunk] = self._takers(asks)
        return self._chunks[chunk]

    def _takers(self, asks: Chunk) -> frozenset[str]:
        vnodes = self.vnodes or {}
        # vnodes alike in what the chunk asks about are decided once
        seen: dict[tuple[Any, ...], bool] = {}
        names = []
        for node in self.nodes:
            vnode = vnodes.get(node.name)
            if vnode is None:
                names.append(node.name)  # not parsed: nothing known to rule it out
                continue
            have = tuple(_hashable(vnode.resources.get(r)) for r, _ in asks)
            if have not in seen:
                seen[have] = vnode_takes_chunk(vnode.resources, asks)
            if seen[have]:
                names.append(node.name)
        return frozenset(names)


def _hashable(value: Any) -> tuple[str, Any]:
    # typed, so that True and 1 (equal as keys) stay apart
    plain = isinstance(value, str | int | float | bool | None)
    return type(value).__name__, value if plain else repr(value)


def _one_holder_per_vnode(jobs: list[RunningJob]) -> list[RunningJob]:
    """Each vnode held by the job that ends last of those sharing it; jobs left holding
    none are dropped (the planner's jobs hold whole nodes, and a vnode frees only when the
    last of its jobs ends)."""

    def end(job: RunningJob) -> float:
        return math.inf if job.time_limit is None else job.start + job.time_limit

    holder: dict[str, RunningJob] = {}
    for job in jobs:
        for name in job.nodes:
            if name not in holder or end(job) > end(holder[name]):
                holder[name] = job
    out = []
    for job in jobs:
        mine = tuple(n for n in job.nodes if holder[n] is job)
        if mine:
            out.append(job if mine == job.nodes else dataclasses.replace(job, nodes=mine))
    return out


def _id_number(job_id: str) -> int:
    head = job_id.split(".", 1)[0].split("[", 1)[0]
    return int(head) if head.isdigit() else 0


def format_walltime(walltime_s: float) -> str:
    """``HH:MM:SS`` for ``-l walltime``, rounded down to whole seconds (at least one)."""
    # Parsl formats no walltime (its providers take the user's HH:MM:SS string as given).
    seconds = math.floor(walltime_s)
    if seconds < 1:
        raise ValueError(f"walltime_s={walltime_s}: need at least one second")
    return f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class PBSScheduler(CommandScheduler):
    """Live PBS Pro: snapshots, whole-node block submission, status, delete and signal.

    ``queue`` is the default destination of :meth:`submit`. Jobs whose name starts with
    ``ours_prefix`` are flagged ``ours`` (PBS truncates names to 236 characters; keep the
    prefix short). PBS has no ``--test-only`` (so :meth:`test_start` cannot say) and no
    "signal N seconds before the walltime" option: blocks watch ``PM_BLOCK_DEADLINE``
    themselves. ``default_time_limit`` is the queue's default walltime, if known.
    ``queue_refresh_s``: how long the queue and server settings read by ``qstat -Q``/``-B``
    are reused (they decide which queues may use which vnode and change rarely).
    """

    GONE = ("unknown job id", "job has finished", "request invalid for state of job")
    UNKNOWN_JOB = ("unknown job id",)
    OUTPUT = "{name}.out"
    DIRECTIVE = "#PBS"
    parse_nodes = staticmethod(parse_pbs_vnodes)
    parse_jobs = staticmethod(parse_qstat)
    parse_reservations = staticmethod(parse_pbs_rstat)
    parse_submitted = staticmethod(parse_qsub)
    signals_before_walltime = False
    JOB_ID = re.compile(r"\d+(\[\d*\])?(\.[A-Za-z0-9_.-]+)?")
    #: What ``signal_batch`` sends with qsig for a signal meant for the block script. qsig
    #: signals every process of the job (the MoM's kill_session: the login shell that runs
    #: the script, the worker pools, the ranks), and USR1 ends a process that does not catch
    #: it: the login shell dies and the MoM kills the rest. SIGURG is ignored by default by
    #: every process that does not ask for it (POSIX), and the block script traps it as its
    #: USR1 (harvest/block_script.py), so the job lives on and only the script hears the notice.
    BATCH_SIGNALS: ClassVar[dict[str, str]] = {"USR1": "URG"}

    def __init__(
        self,
        *,
        queue: str | None = None,
        backfill: str = "easy",
        default_time_limit: float | None = None,
        queue_refresh_s: float = 300.0,
        **common: Any,
    ) -> None:
        super().__init__(backfill=backfill, **common)
        self.queue = queue
        self.default_time_limit = default_time_limit
        self.queue_refresh_s = queue_refresh_s
        self.queues: dict[str, PBSQueue] = {}
        self.server = PBSServer()
        self._placement_read_at: float | None = None
        # Short ids of the jobs this adapter deleted, and those of them PBS then recorded as
        # finished with exit status 0 (see read_statuses).
        self._deleted: set[str] = set()
        self.deleted_read_finished: set[str] = set()

    @classmethod
    def settings_of(cls, profile: SiteDestination) -> dict[str, Any]:
        """Blocks to the profile's queue."""
        return {"queue": profile.queue}

    @classmethod
    def controlled_option(cls, words: list[str]) -> str | None:
        """The hint for a qsub option the provider sets (``-N``, ``-q``, ``-l walltime=``)."""
        letter = words[0][1:2]
        value = words[0][2:] or (words[1] if len(words) > 1 else "")
        if letter == "l":
            for resource in value.split(","):
                name = resource.partition("=")[0].strip()
                if name in CONTROLLED_RESOURCES:
                    return f"-l {name}: {CONTROLLED_RESOURCES[name]}"
            return None
        if letter == "W" and value.partition("=")[0] in ("block", "depend"):
            return f"-W {value.partition('=')[0]}: a block must start when it is planned"
        hint = CONTROLLED.get(letter)
        return f"-{letter}: {hint}" if hint and not words[0].startswith("--") else None

    def nodes_argv(self) -> list[str]:
        return ["pbsnodes", "-a", "-F", "json"]

    def jobs_argv(self) -> list[str]:
        # -t: the subjobs of arrays too; an array itself holds no node, its subjobs do.
        return ["qstat", "-f", "-t", "-F", "json"]

    def reservations_argv(self) -> list[str]:
        return ["pbs_rstat", "-f"]

    def queues_argv(self) -> list[str]:
        """The queue settings (``hasnodes``, ``partition``, ``default_chunk``, routes)."""
        return ["qstat", "-Q", "-f", "-F", "json"]

    def server_argv(self) -> list[str]:
        """The server settings (``default_queue``, ``default_chunk``)."""
        return ["qstat", "-B", "-f", "-F", "json"]

    @property
    def block_queue(self) -> str | None:
        """Where blocks go: ``queue``, else the server's default queue (once read)."""
        return self.queue or self.server.default_queue

    def snapshot(self) -> Snapshot:
        """The common snapshot, its vnodes marked with the queues that may use them."""
        self.refresh_placement()
        return super().snapshot()

    def refresh_placement(self, force: bool = False) -> None:
        """Read the queue and server settings again when ``queue_refresh_s`` has passed."""
        read_at = self._placement_read_at
        if not force and read_at is not None and time.monotonic() - read_at < self.queue_refresh_s:
            return
        self.queues = self._query(self.queues_argv(), parse_qstat_queues)
        self.server = self._query(self.server_argv(), parse_qstat_server)
        self._placement_read_at = time.monotonic()

    def build_snapshot(
        self,
        now: float,
        nodes: list[PBSVnode],
        jobs: list[PBSJob],
        reservations: list[Reservation],
    ) -> Snapshot:
        block_queue = self.block_queue
        served = serve_queues(
            nodes, self.queues, self.server, also=(block_queue,) if block_queue else ()
        )
        queue = self.queues.get(block_queue or "")
        if queue is not None and not (queue.enabled and queue.started):
            # A block queued there would never start (or qsub refuses it): no vnode serves
            # it, so none is planned, instead of one block after another being withdrawn.
            served = [
                dataclasses.replace(n, partitions=tuple(p for p in n.partitions if p != queue.name))
                for n in served
            ]
        return build_pbs_snapshot(
            now,
            served,
            jobs,
            reservations,
            ours_prefix=self.ours_prefix,
            backfill=self.backfill,
            default_time_limit=self.default_time_limit,
            default_partition=self.server.default_queue,
            vnodes={v.name: v for v in nodes},
        )

    def submit_argv(
        self,
        *,
        nodes: int,
        walltime_s: float,
        node_ids: Sequence[str] = (),
        job_name: str | None = None,
        output: str | None = None,
        queue: str | None = None,
        extra_args: Sequence[str] = (),
    ) -> list[str]:
        """qsub options for one whole-node block (``select=N``, ``place=scatter:excl``).
        PBS places the block itself: ``node_ids`` are not pinned. ``-r n``: a block is not
        rerunnable, so PBS never starts it again later (after a node failure, a qrerun) at
        a time and on nodes nobody planned; it ends NODE_FAIL instead."""
        if nodes < 1:
            raise ValueError(f"nodes={nodes}: need at least one node")
        argv = [
            "qsub",
            "-N",
            self.block_name(job_name),
            "-r",
            "n",
            "-l",
            f"select={nodes}",
            "-l",
            "place=scatter:excl",
            "-l",
            f"walltime={format_walltime(walltime_s)}",
        ]
        queue = queue or self.queue
        if queue:
            argv += ["-q", queue]
        if output:
            argv += ["-j", "oe", "-o", output]
        if self.account:
            argv += ["-A", self.account]
        return argv + self.option_args + list(extra_args)

    def command_tail(self, args: list[str]) -> contextlib.AbstractContextManager[list[str]]:
        """``qsub ... -- prog args``: qsub runs the argument vector itself."""
        return contextlib.nullcontext(["--", *args])

    def qsub_argv(self, script: Script, **options: Any) -> list[str]:
        """The whole qsub command for ``script`` (a path or an argument vector)."""
        head = self.submit_argv(**options)
        with self.script_tail(script) as tail:
            return [*head, *tail]

    # OpenPBS 23.06 prints only the first job of ``qstat -f -x -F json ID1 ID2`` (the text
    # form prints all): seen on the live server, where three blocks that ended in one poll
    # read CANCELLED, UNKNOWN, UNKNOWN.
    STATUS_ONE_JOB_PER_QUERY = True

    def status_argv(self, job_ids: list[str]) -> list[str]:
        # -x: finished jobs too.
        return ["qstat", "-f", "-x", "-F", "json", *job_ids]

    def read_statuses(self, argv: list[str], stdout: str) -> list[JobStatus]:
        return [
            JobStatus(
                job_id=job.job_id,
                state=state,
                raw_state=job.raw_state,
                reason=reason,
                nodes=job.nodes,
                start=job.start if job.start is not None else job.expected_start,
                end_limit=job.end,
            )
            for job in parse_output(argv, parse_qstat, stdout)
            for state, reason in [self._deleted_state(job.job_id, job.state, job.comment)]
        ]

    def _deleted_state(self, job_id: str, state: JobState, comment: str) -> tuple[JobState, str]:
        """A job this adapter deleted that PBS recorded as finished with exit status 0 is
        CANCELLED. OpenPBS 23.06 does that when the MoM's obit for the killed job arrives
        while the server still has it in substate 41 (PRERUN): substate 92 and the comment
        "finished", no trace of the delete outside the server log (seen on the live server,
        about one delete in ten with the machine busy). Each such id is kept in
        :attr:`deleted_read_finished`."""
        short = self.short_id(job_id)
        if state is not JobState.COMPLETED or short not in self._deleted:
            return state, comment
        self.deleted_read_finished.add(short)
        return JobState.CANCELLED, f"deleted by qdel; PBS recorded it finished ({comment})"

    def cancel(self, job_ids: Sequence[str]) -> None:
        """qdel the jobs. Each that qdel did not report gone already ("Job has finished",
        "Unknown Job Id": its id is on an error line) is remembered as deleted here (see
        :meth:`_deleted_state`): one that had ended by itself keeps PBS's word."""
        ids = [str(j) for j in job_ids]
        if not ids:
            return
        try:
            stderr = self._run_tolerating_gone(self.cancel_argv(ids))
        except SchedulerCommandError:
            # A qdel that failed part-way may still have ended some: for those, the delete
            # is the likelier end than a run that finished on its own at that moment.
            self._deleted.update(self.short_id(i) for i in ids)
            raise
        gone = {self.short_id(i) for i in ids if _named_in(self.short_id(i), stderr)}
        self._deleted.update(self.short_id(i) for i in ids if self.short_id(i) not in gone)

    def short_id(self, job_id: str) -> str:
        # qstat may print "1234.server" for a request of "1234": match on the number too.
        return job_id.split(".", 1)[0]

    def named_argv(self, name: str) -> list[str]:
        # qselect lists the jobs not yet finished by default, one id per line; -u: a job
        # another user gave this name is not ours to adopt (or to cancel).
        return ["qselect", "-N", name, "-u", current_user()]

    def cancel_argv(self, job_ids: list[str]) -> list[str]:
        return ["qdel", *job_ids]

    def queue_signature(self) -> frozenset[tuple[str, str]]:
        """Native jobs queued or running now, as (id, PD|R): one plain ``qstat -t`` (text,
        no history), so the provider's watch sees an arrival or an end between polls."""
        result = self.run(["qstat", "-t"], label="qstat (watch)")
        return queue_signature_of_qstat(result.stdout, self.ours_prefix)

    def signal_argv(self, job_ids: list[str], signal: str) -> list[str]:
        """qsig of :attr:`BATCH_SIGNALS`' stand-in for ``signal`` (USR1 goes as URG); other
        signals go as they are, to every process of the job."""
        return ["qsig", "-s", self.BATCH_SIGNALS.get(signal, signal), *job_ids]


def _named_in(short_id: str, text: str) -> bool:
    """Whether ``text`` names the job ``short_id`` (alone or with its server's name)."""
    return re.search(rf"(?<![\w\[]){re.escape(short_id)}(?![\w\[\]])", text) is not None


__all__ = ["AllowedVnodes", "PBSScheduler", "build_pbs_snapshot", "format_walltime"]
