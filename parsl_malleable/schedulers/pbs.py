"""PBS Professional / OpenPBS adapter: the same :class:`Snapshot` as the Slurm adapter.

Queries per :meth:`PBSScheduler.snapshot`: ``pbsnodes -a -F json`` and ``qstat -f -F json``,
plus ``pbs_rstat -f`` when ``reservations=True`` (the default). OpenPBS is not packaged for
Debian, so this adapter is tested on recorded documents (``tests/data/pbs/``) and through
stand-in commands that print them.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

from parsl_malleable.schedulers.base import Script, SiteDestination
from parsl_malleable.schedulers.command_scheduler import CommandScheduler
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
                    job.job_id,
                    job.nodes,
                    job.start,
                    job.walltime,
                    job.queue,
                    job.user,
                    ours,
                    name=job.name,
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
                    name=job.name,
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
    """

    GONE = ("unknown job id", "job has finished", "request invalid for state of job")
    UNKNOWN_JOB = ("unknown job id",)
    OUTPUT = "{name}.out"
    parse_nodes = staticmethod(parse_pbsnodes)
    parse_jobs = staticmethod(parse_qstat)
    parse_reservations = staticmethod(parse_pbs_rstat)
    parse_submitted = staticmethod(parse_qsub)
    signals_before_walltime = False
    JOB_ID = re.compile(r"\d+(\[\d*\])?(\.[A-Za-z0-9_.-]+)?")

    def __init__(
        self,
        *,
        queue: str | None = None,
        backfill: str = "easy",
        default_time_limit: float | None = None,
        **common: Any,
    ) -> None:
        super().__init__(backfill=backfill, **common)
        self.queue = queue
        self.default_time_limit = default_time_limit

    @classmethod
    def settings_of(cls, profile: SiteDestination) -> dict[str, Any]:
        """Blocks to the profile's queue."""
        return {"queue": profile.queue}

    def nodes_argv(self) -> list[str]:
        return ["pbsnodes", "-a", "-F", "json"]

    def jobs_argv(self) -> list[str]:
        return ["qstat", "-f", "-F", "json"]

    def reservations_argv(self) -> list[str]:
        return ["pbs_rstat", "-f"]

    def build_snapshot(
        self, now: float, nodes: list[Node], jobs: list[PBSJob], reservations: list[Reservation]
    ) -> Snapshot:
        return build_pbs_snapshot(
            now,
            nodes,
            jobs,
            reservations,
            ours_prefix=self.ours_prefix,
            backfill=self.backfill,
            default_time_limit=self.default_time_limit,
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
        PBS places the block itself: ``node_ids`` are not pinned."""
        if nodes < 1:
            raise ValueError(f"nodes={nodes}: need at least one node")
        argv = [
            "qsub",
            "-N",
            self.block_name(job_name),
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
        return argv + list(extra_args)

    def command_tail(self, args: list[str]) -> contextlib.AbstractContextManager[list[str]]:
        """``qsub ... -- prog args``: qsub runs the argument vector itself."""
        return contextlib.nullcontext(["--", *args])

    def qsub_argv(self, script: Script, **options: Any) -> list[str]:
        """The whole qsub command for ``script`` (a path or an argument vector)."""
        head = self.submit_argv(**options)
        with self.script_tail(script) as tail:
            return [*head, *tail]

    def status_argv(self, job_ids: list[str]) -> list[str]:
        # -x: finished jobs too.
        return ["qstat", "-f", "-x", "-F", "json", *job_ids]

    def read_statuses(self, argv: list[str], stdout: str) -> list[JobStatus]:
        return [
            JobStatus(
                job_id=job.job_id,
                state=job.state,
                raw_state=job.raw_state,
                reason=job.comment,
                nodes=job.nodes,
                start=job.start if job.start is not None else job.expected_start,
                end_limit=job.end,
            )
            for job in parse_output(argv, parse_qstat, stdout)
        ]

    def short_id(self, job_id: str) -> str:
        # qstat may print "1234.server" for a request of "1234": match on the number too.
        return job_id.split(".", 1)[0]

    def named_argv(self, name: str) -> list[str]:
        # qselect lists the jobs not yet finished by default, one id per line.
        return ["qselect", "-N", name]

    def cancel_argv(self, job_ids: list[str]) -> list[str]:
        return ["qdel", *job_ids]

    def signal_argv(self, job_ids: list[str], signal: str) -> list[str]:
        return ["qsig", "-s", signal, *job_ids]


__all__ = ["PBSScheduler", "build_pbs_snapshot", "format_walltime"]
