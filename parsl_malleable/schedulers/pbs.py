"""PBS Professional / OpenPBS adapter: the same :class:`Snapshot` as the Slurm adapter.

Queries per :meth:`PBSScheduler.snapshot`: ``pbsnodes -a -F json`` and ``qstat -f -F json``,
plus ``pbs_rstat -f`` when ``reservations=True`` (the default). OpenPBS is not packaged for
Debian, so this adapter is tested on recorded documents (``tests/data/pbs/``) and through
stand-in commands that print them.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from parsl_malleable.errors import SchedulerCommandError
from parsl_malleable.schedulers.commands import CommandResult, describe_failure, run_command
from parsl_malleable.schedulers.pbs_parse import (
    PBSJob,
    parse_pbs_rstat,
    parse_pbsnodes,
    parse_qstat,
    parse_qsub,
)
from parsl_malleable.schedulers.records import (
    JobState,
    JobStatus,
    parse_output,
)
from parsl_malleable.snapshot import Node, PendingJob, Reservation, RunningJob, Snapshot


def build_pbs_snapshot(
    now: float,
    nodes: Sequence[Node],
    jobs: Iterable[PBSJob],
    reservations: Sequence[Reservation] = (),
    *,
    ours_prefix: str = "",
    backfill: str = "easy",
    default_time_limit: float | None = None,
) -> Snapshot:
    """Assemble a :class:`Snapshot` from parsed PBS output (pure).

    Running: states R and S. Pending: Q, W and T (held jobs are left out: they never start
    on their own). PBS does not print its sort order, so pending jobs are ordered by the
    scheduler's own calendar (``estimated.start_time``, set for the jobs it plans) and then
    by queue time and id.
    """
    running: list[RunningJob] = []
    pending: list[PendingJob] = []
    for job in jobs:
        ours = bool(ours_prefix) and job.name.startswith(ours_prefix)
        if job.state in (JobState.RUNNING, JobState.SUSPENDED) and job.start is not None:
            running.append(
                RunningJob(
                    job.job_id, job.nodes, job.start, job.walltime, job.queue, job.user, ours
                )
            )
        elif job.state is JobState.PENDING:
            pending.append(
                PendingJob(
                    job_id=job.job_id,
                    num_nodes=job.num_nodes,
                    time_limit=job.walltime,
                    submit=job.submit if job.submit is not None else now,
                    partition=job.queue,
                    user=job.user,
                    expected_start=job.expected_start,
                    ours=ours,
                )
            )
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
    )


def _id_number(job_id: str) -> int:
    head = job_id.split(".", 1)[0].split("[", 1)[0]
    return int(head) if head.isdigit() else 0


def format_walltime(walltime_s: float) -> str:
    """``HH:MM:SS`` for ``-l walltime``, rounded down to whole seconds (at least one)."""
    seconds = math.floor(walltime_s)
    if seconds < 1:
        raise ValueError(f"walltime_s={walltime_s}: need at least one second")
    return f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class PBSScheduler:
    """Live PBS Pro: snapshots, whole-node block submission, status and delete/signal.

    ``queue`` is the default destination of :meth:`submit`. Jobs whose name starts with
    ``ours_prefix`` are flagged ``ours`` (PBS truncates names to 236 characters; keep the
    prefix short). PBS has no "signal N seconds before the walltime" option: a block must
    watch its own clock. ``default_time_limit`` is the queue's default walltime, if known.
    """

    def __init__(
        self,
        *,
        queue: str | None = None,
        ours_prefix: str = "pm-block",
        reservations: bool = True,
        backfill: str = "easy",
        default_time_limit: float | None = None,
        timeout_s: float = 30.0,
        retries: int = 2,
        backoff_s: float = 0.5,
        env: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.queue = queue
        self.ours_prefix = ours_prefix
        self.reservations = reservations
        self.backfill = backfill
        self.default_time_limit = default_time_limit
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.env = dict(env or {})
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

    def snapshot(self) -> Snapshot:
        """Nodes, running and queued jobs (and reservations) now, in two or three queries."""
        now = self.clock()
        argv = ["pbsnodes", "-a", "-F", "json"]
        nodes = parse_output(argv, parse_pbsnodes, self._run(argv).stdout)
        argv = ["qstat", "-f", "-F", "json"]
        jobs = parse_output(argv, parse_qstat, self._run(argv).stdout)
        reservations: list[Reservation] = []
        if self.reservations:
            argv = ["pbs_rstat", "-f"]
            reservations = parse_output(argv, parse_pbs_rstat, self._run(argv).stdout)
        return build_pbs_snapshot(
            now,
            nodes,
            jobs,
            reservations,
            ours_prefix=self.ours_prefix,
            backfill=self.backfill,
            default_time_limit=self.default_time_limit,
        )

    def qsub_argv(
        self,
        script: str | os.PathLike[str] | Sequence[str],
        *,
        nodes: int,
        walltime_s: float,
        queue: str | None = None,
        job_name: str | None = None,
        output: str | None = None,
        extra_args: Sequence[str] = (),
    ) -> list[str]:
        """qsub arguments for one whole-node block (``select=N``, ``place=scatter:excl``).

        ``script`` is a script path or an argument vector (``qsub ... -- prog args``).
        """
        if nodes < 1:
            raise ValueError(f"nodes={nodes}: need at least one node")
        name = job_name or self.ours_prefix
        if self.ours_prefix and not name.startswith(self.ours_prefix):
            name = f"{self.ours_prefix}-{name}"
        argv = [
            "qsub",
            "-N",
            name,
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
        argv += list(extra_args)
        if isinstance(script, str | os.PathLike):
            return [*argv, os.fspath(script)]
        args = [str(a) for a in script]
        if not args:
            raise ValueError("submit needs a script path or a non-empty argument vector")
        return [*argv, "--", *args]

    def submit(
        self,
        script: str | os.PathLike[str] | Sequence[str],
        *,
        nodes: int,
        walltime_s: float,
        queue: str | None = None,
        job_name: str | None = None,
        output: str | None = None,
        extra_args: Sequence[str] = (),
    ) -> str:
        """Submit a block with qsub; returns its job id (``1234.server``)."""
        argv = self.qsub_argv(
            script,
            nodes=nodes,
            walltime_s=walltime_s,
            queue=queue,
            job_name=job_name,
            output=output,
            extra_args=extra_args,
        )
        return parse_output(argv, parse_qsub, self._run(argv).stdout)

    def status(self, job_ids: Sequence[str]) -> dict[str, JobStatus]:
        """State of each job (finished ones too, ``qstat -x``); unknown ids are UNKNOWN."""
        ids = [str(j) for j in job_ids]
        if not ids:
            return {}
        argv = ["qstat", "-f", "-x", "-F", "json", *ids]
        result = self._run(argv, check=False)
        errors = [ln for ln in result.stderr.splitlines() if ln.strip()]
        if result.returncode != 0 and not all("unknown job id" in e.lower() for e in errors):
            raise SchedulerCommandError(argv, describe_failure(result.returncode, result.stderr))
        jobs: list[PBSJob] = []
        if result.stdout.strip():
            jobs = parse_output(argv, parse_qstat, result.stdout)
        found = {}
        for job in jobs:
            found[job.job_id] = JobStatus(
                job_id=job.job_id,
                state=job.state,
                raw_state=job.raw_state,
                reason=job.comment,
                nodes=job.nodes,
                start=job.start if job.start is not None else job.expected_start,
                end_limit=job.end,
            )
        # qstat may print "1234.server" for a request of "1234": match on the number too.
        by_number = {j.split(".", 1)[0]: s for j, s in found.items()}
        return {
            j: found.get(j) or by_number.get(j.split(".", 1)[0]) or JobStatus(j, JobState.UNKNOWN)
            for j in ids
        }

    def cancel(self, job_ids: Sequence[str], signal: str | None = None) -> None:
        """``qdel`` the jobs, or ``qsig -s SIGNAL`` them; already finished jobs are fine."""
        ids = [str(j) for j in job_ids]
        if not ids:
            return
        argv = ["qsig", "-s", signal, *ids] if signal else ["qdel", *ids]
        result = self._run(argv, check=False)
        gone = ("unknown job id", "job has finished", "request invalid for state of job")
        lines = [ln.lower() for ln in result.stderr.splitlines() if ln.strip()]
        if result.returncode != 0 and not (
            lines and all(any(g in ln for g in gone) for ln in lines)
        ):
            raise SchedulerCommandError(argv, describe_failure(result.returncode, result.stderr))


__all__ = ["PBSScheduler", "build_pbs_snapshot", "format_walltime"]
