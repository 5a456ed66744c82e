"""Slurm adapter: a :class:`Snapshot` from two queries, and submit/test/status/cancel.

Queries per :meth:`SlurmScheduler.snapshot`: ``sinfo -N`` (nodes, partitions, limits) and
``squeue`` (running and pending jobs with limits, start and expected start), plus
``scontrol show res -o`` when ``reservations=True`` (the default), so two or three.
"""

from __future__ import annotations

import math
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from parsl_malleable.errors import SchedulerCommandError
from parsl_malleable.schedulers.commands import CommandResult, describe_failure, run_command
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
    parse_reservations,
    parse_sbatch_parsable,
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
    minutes = math.floor(walltime_s / 60.0)
    if minutes < 1:
        raise ValueError(f"walltime_s={walltime_s}: Slurm limits are whole minutes; need >= 60 s")
    return minutes


class SlurmScheduler:
    """Live Slurm: snapshots, block submission, start-time tests, status and cancel.

    ``partition`` restricts the nodes queried (``sinfo -p``) and is the default partition of
    :meth:`submit`/:meth:`test_start`; jobs of every partition are read because any of them
    can hold the nodes. Jobs whose name starts with ``ours_prefix`` are flagged ``ours``.
    ``env`` is added to the environment of every command (e.g. ``SLURM_CONF``, ``PATH``).
    """

    def __init__(
        self,
        *,
        partition: str | None = None,
        ours_prefix: str = "pm-block",
        reservations: bool = True,
        backfill: str = "conservative",
        timeout_s: float = 30.0,
        retries: int = 2,
        backoff_s: float = 0.5,
        env: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.partition = partition
        self.ours_prefix = ours_prefix
        self.reservations = reservations
        self.backfill = backfill
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        # Unix seconds everywhere: no local-time parsing, no DST ambiguity.
        self.env = {**(env or {}), "SLURM_TIME_FORMAT": "%s"}
        self.clock = clock

    def _run(self, argv: list[str], check: bool = True) -> CommandResult:
        return run_command(
            argv,
            timeout_s=self.timeout_s,
            retries=self.retries,
            backoff_s=self.backoff_s,
            env=self.env,
            check=check,
        )

    def sinfo_argv(self) -> list[str]:
        argv = ["sinfo", "-N", "--noheader", "-o", SINFO_FORMAT]
        return argv + (["-p", self.partition] if self.partition else [])

    def squeue_argv(self, job_ids: Sequence[str] | None = None) -> list[str]:
        argv = ["squeue", "--noheader", "--all", "-o", SQUEUE_FORMAT]
        if job_ids is None:
            return [*argv, f"--states={ACTIVE_STATES}"]
        return [*argv, "--states=all", "--jobs", ",".join(job_ids)]

    def snapshot(self) -> Snapshot:
        """Nodes, running and pending jobs (and reservations) now, in two or three queries."""
        now = self.clock()
        argv = self.sinfo_argv()
        sinfo = parse_output(argv, parse_sinfo_nodes, self._run(argv).stdout)
        argv = self.squeue_argv()
        jobs = parse_output(argv, parse_squeue, self._run(argv).stdout)
        reservations: list[Reservation] = []
        if self.reservations:
            argv = ["scontrol", "show", "reservation", "--oneliner"]
            reservations = parse_output(argv, parse_reservations, self._run(argv).stdout)
        try:
            return build_snapshot(
                now,
                sinfo,
                jobs,
                reservations,
                partition=self.partition,
                ours_prefix=self.ours_prefix,
                backfill=self.backfill,
            )
        except OutputParseError as exc:
            raise SchedulerCommandError(self.squeue_argv(), f"inconsistent output: {exc}") from exc

    def submit_argv(
        self,
        *,
        nodes: int,
        walltime_s: float,
        partition: str | None = None,
        qos: str | None = None,
        job_name: str | None = None,
        signal_margin_s: float | None = None,
        output: str | None = None,
        workdir: str | None = None,
        extra_args: Sequence[str] = (),
    ) -> list[str]:
        """The sbatch options for one whole-node block (without the script)."""
        if nodes < 1:
            raise ValueError(f"nodes={nodes}: need at least one node")
        name = job_name or self.ours_prefix
        if self.ours_prefix and not name.startswith(self.ours_prefix):
            name = f"{self.ours_prefix}-{name}"
        argv = [
            "sbatch",
            "--parsable",
            "--exclusive",
            f"--nodes={nodes}",
            f"--time={walltime_minutes(walltime_s)}",
            f"--job-name={name}",
        ]
        partition = partition or self.partition
        if partition:
            argv.append(f"--partition={partition}")
        if qos:
            argv.append(f"--qos={qos}")
        if signal_margin_s is not None:
            # B: signal the batch shell (where the worker pool runs), not only job steps.
            argv.append(f"--signal=B:USR1@{max(1, math.ceil(signal_margin_s))}")
        if output:
            argv.append(f"--output={output}")
        if workdir:
            argv.append(f"--chdir={workdir}")
        return argv + list(extra_args)

    def submit(
        self,
        script: str | os.PathLike[str] | Sequence[str],
        *,
        nodes: int,
        walltime_s: float,
        partition: str | None = None,
        qos: str | None = None,
        job_name: str | None = None,
        signal_margin_s: float | None = None,
        output: str | None = None,
        workdir: str | None = None,
        extra_args: Sequence[str] = (),
    ) -> str:
        """Submit a block; returns its job id.

        ``script`` is a batch script path, or an argument vector run on the first node
        (passed to sbatch as arguments of a constant ``exec "$@"`` wrapper, never as a shell
        string). The walltime is rounded down to whole minutes (at least one); USR1 reaches
        the batch shell ``signal_margin_s`` before the limit (Slurm may send it up to 60 s
        earlier).
        """
        argv = self.submit_argv(
            nodes=nodes,
            walltime_s=walltime_s,
            partition=partition,
            qos=qos,
            job_name=job_name,
            signal_margin_s=signal_margin_s,
            output=output,
            workdir=workdir,
            extra_args=extra_args,
        )
        if isinstance(script, (str, os.PathLike)):
            argv.append(os.fspath(script))
            return self._submit(argv)
        args = [str(a) for a in script]
        if not args:
            raise ValueError("submit needs a script path or a non-empty argument vector")
        with tempfile.NamedTemporaryFile("w", prefix="pm-exec-", suffix=".sh") as wrapper:
            wrapper.write(EXEC_WRAPPER)
            wrapper.flush()
            # sbatch copies the script into the job at submit time: the file may go after.
            return self._submit([*argv, wrapper.name, *args])

    def _submit(self, argv: list[str]) -> str:
        result = self._run(argv)
        return parse_output(argv, parse_sbatch_parsable, result.stdout)

    def test_start(
        self, nodes: int, walltime_s: float, partition: str | None = None
    ) -> tuple[float, tuple[str, ...]]:
        """When and where Slurm would start such a block now (``sbatch --test-only``)."""
        argv = self.submit_argv(nodes=nodes, walltime_s=walltime_s, partition=partition)
        argv = [a for a in argv if a != "--parsable" and not a.startswith("--job-name")]
        argv[1:1] = ["--test-only"]
        argv += ["--wrap", "true"]
        result = self._run(argv)
        start, hosts, _partition = parse_output(argv, parse_test_only, result.stderr)
        return start, hosts

    def status(self, job_ids: Sequence[str]) -> dict[str, JobStatus]:
        """State of each job; a job Slurm has forgotten (purged after MinJobAge) is UNKNOWN."""
        ids = [str(j) for j in job_ids]
        if not ids:
            return {}
        argv = self.squeue_argv(ids)
        result = self._run(argv, check=False)
        if result.returncode != 0:
            # squeue fails with one unknown id but prints nothing for several: same meaning.
            if "invalid job id" not in result.stderr.lower():
                message = describe_failure(result.returncode, result.stderr)
                raise SchedulerCommandError(argv, message)
            rows: list[SqueueRow] = []
        else:
            rows = parse_output(argv, parse_squeue, result.stdout)
        found = {
            row.job_id: JobStatus(
                job_id=row.job_id,
                state=row.state,
                raw_state=row.raw_state,
                reason=row.reason,
                nodes=row.nodes,
                start=row.start,
                end_limit=row.end,
            )
            for row in rows
        }
        return {j: found.get(j, JobStatus(j, JobState.UNKNOWN)) for j in ids}

    def cancel(self, job_ids: Sequence[str], signal: str | None = None) -> None:
        """Cancel jobs, or with ``signal`` (e.g. ``"USR1"``) signal the batch shell and steps.

        Cancelling a job that already ended is not an error.
        """
        ids = [str(j) for j in job_ids]
        if not ids:
            return
        argv = ["scancel"]
        if signal:
            argv += [f"--signal={signal}", "--full"]
        argv += ids
        result = self._run(argv, check=False)
        if result.returncode != 0 and not _only_gone(result.stderr):
            raise SchedulerCommandError(argv, describe_failure(result.returncode, result.stderr))


def _only_gone(stderr: str) -> bool:
    """True when every error line says the job is already finished or unknown."""
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    gone = ("already completing or completed", "invalid job id")
    return bool(lines) and all(any(g in ln.lower() for g in gone) for ln in lines)


__all__ = ["SlurmScheduler", "build_snapshot", "walltime_minutes"]
