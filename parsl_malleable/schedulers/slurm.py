"""Slurm adapter: a :class:`Snapshot` from two queries, and submit/test/status/cancel.

Queries per :meth:`SlurmScheduler.snapshot`: ``sinfo -N`` (nodes, partitions, limits) and
``squeue`` (running and pending jobs with limits, start and expected start), plus
``scontrol show res -o`` when ``reservations=True`` (the default), so two or three.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import re
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from parsl_malleable.errors import SchedulerCommandError, StartRefused
from parsl_malleable.schedulers.base import OURS_PREFIX, Script, SiteDestination
from parsl_malleable.schedulers.command_scheduler import CommandScheduler, current_user
from parsl_malleable.schedulers.commands import describe_failure
from parsl_malleable.schedulers.records import (
    JobState,
    JobStatus,
    OutputParseError,
    parse_output,
)
from parsl_malleable.schedulers.slurm_parse import (
    SINFO_FORMAT,
    SQUEUE_FORMAT,
    SinfoResult,
    SqueueRow,
    map_job_state,
    parse_reservations,
    parse_sbatch_parsable,
    parse_scontrol_job,
    parse_sinfo_nodes,
    parse_squeue,
    parse_test_only,
)
from parsl_malleable.snapshot import PendingJob, Reservation, RunningJob, Snapshot

ACTIVE_STATES = "PENDING,RUNNING,CONFIGURING,COMPLETING,SUSPENDED"
# Pending jobs the backfill scheduler never plans for: they hold no future nodes.
NEVER_STARTS = {"DependencyNeverSatisfied"}
# Constant wrapper so an argument vector can be submitted without building a shell string.
EXEC_WRAPPER = '#!/bin/sh\nexec "$@"\n'
# sbatch options the provider sets on every block (long name -> short letter, and what to set
# in the site profile instead). sbatch also takes an unambiguous prefix of a long name.
CONTROLLED: dict[str, tuple[str | None, str]] = {
    "nodes": ("N", "block sizes are min_nodes_per_block / max_nodes_per_block"),
    "time": ("t", "each block's walltime comes from its window: set max_walltime_s, min_block_s"),
    "job-name": ("J", "the provider names its blocks (it finds them by name)"),
    "partition": ("p", "use the profile's `partition`"),
    "qos": ("q", "use the profile's `qos`"),
    "account": ("A", "use the profile's `account`"),
    "output": ("o", "a block's output goes next to its script (BackfillProvider script_dir)"),
    "nodelist": ("w", "blocks go to the planned nodes: `pin_nodes`"),
    "signal": (None, "use `signal_margin_s`"),
    "exclusive": (None, "blocks always take whole nodes"),
    "parsable": (None, "the provider reads the job id itself"),
    "test-only": (None, "use `test_start`"),
    "wrap": (None, "the block script is the provider's"),
    "wait": ("W", "sbatch would wait for the block to end"),
    "array": ("a", "a block is one job"),
    "hold": ("H", "a block must start when it is planned"),
    "begin": ("b", "a block must start when it is planned"),
    "dependency": ("d", "a block must start when it is planned"),
}
_SHORT = {short: long for long, (short, _) in CONTROLLED.items() if short}
# A constraint the snapshot can match against node features: names joined by & (and) or | (or).
_SIMPLE_CONSTRAINT = re.compile(r"[\w.:=+-]+([&|][\w.:=+-]+)*")


def build_snapshot(
    now: float,
    sinfo: SinfoResult,
    jobs: Iterable[SqueueRow],
    reservations: Sequence[Reservation] = (),
    *,
    partition: str | None = None,
    ours_prefix: str = "",
    backfill: str = "conservative",
) -> Snapshot:
    """Assemble a :class:`Snapshot` from parsed sinfo/squeue/scontrol output (pure).

    Running jobs (RUNNING, SUSPENDED) keep squeue's order; COMPLETING jobs are left out (their
    nodes still show as allocated). Pending jobs are held out when held or never eligible and
    are sorted in Slurm's own order: partition PriorityTier, then job priority, then submit
    time and id. ``default_time_limit`` is ``partition``'s DefaultTime (else its MaxTime),
    or the default partition's when ``partition`` is None.
    """
    running: list[RunningJob] = []
    pending: list[tuple[tuple[int, int, float, int, str], PendingJob]] = []
    for job in jobs:
        ours = bool(ours_prefix) and job.name.startswith(ours_prefix)
        if job.state in (JobState.RUNNING, JobState.SUSPENDED):
            if job.start is None:
                raise OutputParseError(f"squeue job {job.job_id} start", "running without start")
            running.append(
                RunningJob(
                    job_id=job.job_id,
                    nodes=job.nodes,
                    start=job.start,
                    time_limit=job.time_limit,
                    partition=job.partition,
                    user=job.user,
                    ours=ours,
                    name=job.name,
                )
            )
        elif job.state is JobState.PENDING and job.reason not in NEVER_STARTS:
            tiers = [
                sinfo.partitions[p].tier for p in job.partition.split(",") if p in sinfo.partitions
            ]
            tier = max(tiers, default=0)
            submit = job.submit if job.submit is not None else now
            key = (-tier, -job.priority, submit, _id_number(job.job_id), job.job_id)
            pending.append(
                (
                    key,
                    PendingJob(
                        job_id=job.job_id,
                        num_nodes=job.num_nodes,
                        time_limit=job.time_limit,
                        submit=submit,
                        partition=job.partition,
                        user=job.user,
                        expected_start=job.start,
                        ours=ours,
                        name=job.name,
                    ),
                )
            )
    pending.sort(key=lambda item: item[0])
    part = sinfo.partitions.get(partition) if partition else sinfo.default_partition()
    default_limit = None
    if part is not None:
        default_limit = part.default_time if part.default_time is not None else part.max_time
    return Snapshot(
        now=now,
        nodes=list(sinfo.nodes),
        running=running,
        pending=[job for _, job in pending],
        reservations=list(reservations),
        backfill=backfill,
        default_time_limit=default_limit,
    )


def _id_number(job_id: str) -> int:
    head = job_id.split("_", 1)[0].split("+", 1)[0]
    return int(head) if head.isdigit() else 0


def walltime_minutes(walltime_s: float) -> int:
    """Whole minutes for ``--time``, rounded DOWN so a block never outlives its window."""
    # Parsl has no seconds-to-limit helper (parsl.utils.wtime_to_minutes parses HH:MM:SS and
    # only warns below a minute, where a block must be refused).
    minutes = math.floor(walltime_s / 60.0)
    if minutes < 1:
        raise ValueError(f"walltime_s={walltime_s}: Slurm limits are whole minutes; need >= 60 s")
    return minutes


class SlurmScheduler(CommandScheduler):
    """Live Slurm: snapshots, block submission, start-time tests, status, cancel and signal.

    ``partition`` restricts the nodes queried (``sinfo -p``) and is the default partition of
    :meth:`submit`/:meth:`test_start`; jobs of every partition are read because any of them
    can hold the nodes. ``submit_partition``, ``qos``, ``account``, ``pin_nodes`` and
    ``signal_margin_s`` are where blocks go and how (a site profile's destination) without
    narrowing what is read. Jobs whose name starts with ``ours_prefix`` are flagged ``ours``.
    ``env`` is added to the environment of every command (e.g. ``SLURM_CONF``, ``PATH``).
    Snapshot queries: ``sinfo -N``, ``squeue`` and, with ``reservations``, ``scontrol``.
    """

    GONE = ("already completing or completed", "invalid job id")
    # squeue fails with one unknown id but prints nothing for several: same meaning.
    UNKNOWN_JOB = ("invalid job id",)
    OUTPUT = "{name}-%j.out"
    DIRECTIVE = "#SBATCH"
    parse_nodes = staticmethod(parse_sinfo_nodes)
    parse_jobs = staticmethod(parse_squeue)
    parse_reservations = staticmethod(parse_reservations)
    parse_submitted = staticmethod(parse_sbatch_parsable)

    def __init__(
        self,
        *,
        partition: str | None = None,
        submit_partition: str | None = None,
        qos: str | None = None,
        pin_nodes: bool = False,
        signal_margin_s: float | None = None,
        backfill: str = "conservative",
        env: Mapping[str, str] | None = None,
        **common: Any,
    ) -> None:
        # Unix seconds everywhere: no local-time parsing, no DST ambiguity.
        super().__init__(
            backfill=backfill, env={**(env or {}), "SLURM_TIME_FORMAT": "%s"}, **common
        )
        self.partition = partition
        self.submit_partition = submit_partition
        self.qos = qos
        self.pin_nodes = pin_nodes
        self.signal_margin_s = signal_margin_s

    @classmethod
    def settings_of(cls, profile: SiteDestination) -> dict[str, Any]:
        """Blocks to the profile's partition and QOS; every partition is read."""
        return {
            "submit_partition": profile.partition,
            "qos": profile.qos,
            "pin_nodes": profile.pin_nodes,
            "signal_margin_s": profile.signal_margin_s or None,
        }

    @classmethod
    def controlled_option(cls, words: list[str]) -> str | None:
        """The hint for an sbatch option the provider sets (``--time``, ``-N``, ``--part``)."""
        flag = words[0]
        if flag.startswith("--"):
            name = flag[2:].partition("=")[0]
            for long, (_, hint) in CONTROLLED.items():
                # sbatch takes any unambiguous prefix: --part is --partition.
                if name == long or (len(name) >= 3 and long.startswith(name)):
                    return f"--{long}: {hint}"
            return None
        short = _SHORT.get(flag[1:2])
        return f"-{flag[1]} (--{short}): {CONTROLLED[short][1]}" if short else None

    def constraint(self) -> list[set[str]] | None:
        """The submit options' ``--constraint`` as alternatives, each a set of features a
        node needs all of; None when there is none or it is more than features joined by
        ``&`` and ``|`` (brackets, counts: Slurm alone decides those, the start test sees)."""
        value = None
        args = self.option_args
        for i, arg in enumerate(args):
            name = arg[2:].partition("=")[0] if arg.startswith("--") else ""
            if len(name) >= 3 and "constraint".startswith(name):
                value = arg.partition("=")[2] if "=" in arg else _next(args, i)
            elif arg.startswith("-C"):
                value = arg[2:] or _next(args, i)
        if not value or not _SIMPLE_CONSTRAINT.fullmatch(value):
            return None
        return [set(alt.split("&")) for alt in value.split("|")]

    def nodes_argv(self) -> list[str]:
        argv = ["sinfo", "-N", "--noheader", "-o", SINFO_FORMAT]
        return argv + (["-p", self.partition] if self.partition else [])

    def jobs_argv(self) -> list[str]:
        return self.squeue_argv()

    def reservations_argv(self) -> list[str]:
        return ["scontrol", "show", "reservation", "--oneliner"]

    def squeue_argv(self, job_ids: Sequence[str] | None = None) -> list[str]:
        argv = ["squeue", "--noheader", "--all", "-o", SQUEUE_FORMAT]
        if job_ids is None:
            return [*argv, f"--states={ACTIVE_STATES}"]
        return [*argv, "--states=all", "--jobs", ",".join(job_ids)]

    def build_snapshot(
        self, now: float, nodes: SinfoResult, jobs: list[SqueueRow], reservations: list[Reservation]
    ) -> Snapshot:
        nodes = self.constrained(nodes)
        return build_snapshot(
            now,
            nodes,
            jobs,
            reservations,
            partition=self.partition,
            ours_prefix=self.ours_prefix,
            backfill=self.backfill,
        )

    def constrained(self, sinfo: SinfoResult) -> SinfoResult:
        """``sinfo`` with the blocks' partition taken off every node that lacks the features
        the submit options' constraint asks for, so no block is planned (and pinned) where
        Slurm would refuse it: the planner plans blocks only on nodes their partition holds."""
        wanted = self.constraint()
        where = self.submit_partition or self.partition
        if wanted is None or not where:
            return sinfo
        kept = [
            node
            if any(alt <= set(node.features) for alt in wanted)
            else dataclasses.replace(
                node, partitions=tuple(p for p in node.partitions if p != where)
            )
            for node in sinfo.nodes
        ]
        return dataclasses.replace(sinfo, nodes=kept)

    def submit_argv(
        self,
        *,
        nodes: int,
        walltime_s: float,
        node_ids: Sequence[str] = (),
        job_name: str | None = None,
        output: str | None = None,
        partition: str | None = None,
        signal_margin_s: float | None = None,
        workdir: str | None = None,
        extra_args: Sequence[str] = (),
    ) -> list[str]:
        """The sbatch options for one whole-node block (without the script). The walltime is
        rounded down to whole minutes (at least one); USR1 reaches the batch shell
        ``signal_margin_s`` (default: the scheduler's) before the limit (Slurm may send it up
        to 60 s earlier)."""
        if nodes < 1:
            raise ValueError(f"nodes={nodes}: need at least one node")
        argv = [
            "sbatch",
            "--parsable",
            "--exclusive",
            f"--nodes={nodes}",
            f"--time={walltime_minutes(walltime_s)}",
            f"--job-name={self.block_name(job_name)}",
        ]
        partition = partition or self.submit_partition or self.partition
        if partition:
            argv.append(f"--partition={partition}")
        if self.qos:
            argv.append(f"--qos={self.qos}")
        margin = signal_margin_s if signal_margin_s is not None else self.signal_margin_s
        if margin is not None:
            # B: signal the batch shell (where the worker pool runs), not only job steps.
            argv.append(f"--signal=B:USR1@{max(1, math.ceil(margin))}")
        if output:
            argv.append(f"--output={output}")
        if workdir:
            argv.append(f"--chdir={workdir}")
        if self.account:
            argv.append(f"--account={self.account}")
        if self.pin_nodes and node_ids:
            argv.append(f"--nodelist={','.join(node_ids)}")
        return argv + self.option_args + list(extra_args)

    def submit(
        self,
        script: Script,
        *,
        nodes: int,
        walltime_s: float,
        node_ids: Sequence[str] = (),
        name: str | None = None,
        output: str | None = None,
        **options: Any,
    ) -> str:
        """Submit a block (:meth:`CommandScheduler.submit`). A batch script's block runs in
        the script's folder (``--chdir``, unless ``workdir`` says otherwise), the run's private
        block folder, which the nodes already read the block's files from: by default Slurm
        runs it in sbatch's working folder, the driver's, which may be shared with other users
        (issue 49)."""
        if isinstance(script, str | os.PathLike) and options.get("workdir") is None:
            options["workdir"] = str(Path(script).resolve().parent)
        return super().submit(
            script,
            nodes=nodes,
            walltime_s=walltime_s,
            node_ids=node_ids,
            name=name,
            output=output,
            **options,
        )

    @contextlib.contextmanager
    def command_tail(self, args: list[str]) -> Iterator[list[str]]:
        """A constant ``exec "$@"`` wrapper script and ``args`` as its arguments."""
        with tempfile.NamedTemporaryFile("w", prefix="pm-exec-", suffix=".sh") as wrapper:
            # The directives too, so the job's stored script shows the submit options.
            shebang, body = EXEC_WRAPPER.split("\n", 1)
            wrapper.write("\n".join([shebang, *self.directive_lines(), body]))
            wrapper.flush()
            # sbatch copies the script into the job at submit time: the file may go after.
            yield [wrapper.name, *args]

    def start_estimate(
        self,
        nodes: int,
        walltime_s: float,
        node_ids: Sequence[str] = (),
        partition: str | None = None,
    ) -> tuple[float, tuple[str, ...]]:
        """When and where Slurm would start such a block now (``sbatch --test-only``); raises
        :class:`StartRefused` with Slurm's words when it refuses the block."""
        argv = self.submit_argv(
            nodes=nodes, walltime_s=walltime_s, node_ids=node_ids, partition=partition
        )
        dropped = ("--parsable", "--job-name", "--signal")
        argv = [a for a in argv if not a.startswith(dropped)]
        argv[1:1] = ["--test-only"]
        argv += ["--wrap", "true"]
        result = self.run(argv, check=False, label="sbatch --test-only")
        if result.returncode != 0:
            words = " ".join(result.stderr.split()) or f"exit status {result.returncode}"
            raise StartRefused(argv, words)
        start, hosts, _partition = parse_output(argv, parse_test_only, result.stderr)
        return start, hosts

    def test_start(
        self, nodes: int, walltime_s: float, node_ids: Sequence[str] = ()
    ) -> float | None:
        """When Slurm would start the block (on ``node_ids`` when pinned)."""
        return self.start_estimate(nodes, walltime_s, node_ids)[0]

    def status_argv(self, job_ids: list[str]) -> list[str]:
        return self.squeue_argv(job_ids)

    def read_statuses(self, argv: list[str], stdout: str) -> list[JobStatus]:
        return [
            JobStatus(
                job_id=row.job_id,
                state=row.state,
                raw_state=row.raw_state,
                reason=row.reason,
                nodes=row.nodes,
                start=row.start,
                end_limit=row.end,
            )
            for row in parse_output(argv, parse_squeue, stdout)
        ]

    def named_argv(self, name: str) -> list[str]:
        # --user: a job another user gave this name is not ours to adopt (or to cancel).
        return ["squeue", "--noheader", "--all", f"--user={current_user()}", f"--name={name}",
                f"--states={ACTIVE_STATES}", "--format=%i"]  # fmt: skip

    def confirm_gone(self, job_ids: Sequence[str]) -> dict[str, JobStatus]:
        """Each job's state from ``scontrol show job``, which asks slurmctld itself rather
        than through squeue: an id it does not know (purged, never ours) is UNKNOWN."""
        out: dict[str, JobStatus] = {}
        for job_id in job_ids:
            argv = ["scontrol", "show", "job", "--oneliner", str(job_id)]
            result = self.run(argv, check=False)
            if result.returncode != 0:
                if "invalid job id" not in result.stderr.lower():
                    raise SchedulerCommandError(
                        argv, describe_failure(result.returncode, result.stderr)
                    )
                out[job_id] = JobStatus(job_id, JobState.UNKNOWN)
                continue
            _, raw, reason = parse_output(argv, parse_scontrol_job, result.stdout.strip())
            out[job_id] = JobStatus(job_id, map_job_state(raw, reason), raw_state=raw)
        return out

    def cancel_argv(self, job_ids: list[str]) -> list[str]:
        return ["scancel", *job_ids]

    def signal_argv(self, job_ids: list[str], signal: str) -> list[str]:
        # --batch: the batch shell only; --full would also hit the worker pools, which Parsl
        # does not let handle USR1.
        return ["scancel", "--batch", f"--signal={signal}", *job_ids]

    def preempted(self, job_ids: Sequence[str]) -> set[str]:
        """Which of these (ended) jobs Slurm preempted: its PreemptTime is set. A preempted
        block whose workers left within the grace time ends FAILED or COMPLETED, not
        PREEMPTED, so its state alone does not say."""
        argv = ["squeue", "--noheader", "--states=all", f"--jobs={','.join(job_ids)}",
                "--Format=JobID:32,PreemptTime:32"]  # fmt: skip
        out = set()
        for line in self.run(argv).stdout.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1] not in ("N/A", "None", "Unknown", "0"):
                out.add(parts[0])
        return out

    def queue_signature(self) -> frozenset[tuple[str, str]]:
        """Native jobs pending or running now, as (id, PD|R): one small ``squeue``."""
        argv = ["squeue", "--noheader", "--states=PD,CF,R,S", "--format=%i %t %j"]
        result = self.run(argv, label="squeue (watch)")
        return queue_signature_of(result.stdout, self.ours_prefix)


def _next(args: list[str], i: int) -> str | None:
    return args[i + 1] if i + 1 < len(args) else None


def queue_signature_of(
    squeue_output: str, ours_prefix: str = OURS_PREFIX
) -> frozenset[tuple[str, str]]:
    """(id, PD|R) of every native job in ``squeue --format='%i %t %j'`` output."""
    out = set()
    for line in squeue_output.splitlines():
        parts = line.split(maxsplit=2)
        if len(parts) < 2 or (len(parts) == 3 and parts[2].startswith(ours_prefix)):
            continue
        out.add((parts[0], "PD" if parts[1] == "PD" else "R"))
    return frozenset(out)


__all__ = ["SlurmScheduler", "build_snapshot", "queue_signature_of", "walltime_minutes"]
