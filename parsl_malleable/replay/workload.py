"""Training workloads the replay runs: FreeTrain's, or a sweep generated from one curve."""

from __future__ import annotations

import csv
import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, StrictStr

from parsl_malleable.allocate.curve import ScalingCurve
from parsl_malleable.allocate.workload import _csv_file, load_workload
from parsl_malleable.errors import ConfigError, TraceFormatError
from parsl_malleable.inputs import Amount, Number, WholeCount, boundary
from parsl_malleable.traces._io import open_text


@boundary(ConfigError)
class ReplayJob:
    """One training job of a replay: its true curve and costs (the replay's physics), bounds,
    the samples it must train (``math.inf``: unlimited, a job that trains as long as the replay
    lasts), and when it is submitted (seconds, the idle timeline's clock); ``family`` names its
    model (jobs of one family have the same curve)."""

    name: Annotated[StrictStr, Field(min_length=1)]
    curve: ScalingCurve
    min_nodes: Annotated[WholeCount, Field(ge=1)]
    max_nodes: WholeCount
    scale_up_s: Annotated[Number, Field(ge=0)]
    scale_down_s: Annotated[Number, Field(ge=0)]
    samples: Amount
    submit: Number
    family: StrictStr | None = None
    # The runtime's physics (:class:`Physics`); None: the replay's setting.
    startup_s: Annotated[Number, Field(ge=0)] | None = None
    regroup_s: Annotated[Number, Field(ge=0)] | None = None
    leave_s: Annotated[Number, Field(ge=0)] | None = None

    def __post_init__(self) -> None:
        if self.min_nodes > self.max_nodes:
            raise ConfigError(
                f"job {self.name!r}: need 1 <= min_nodes <= max_nodes; got "
                f"min_nodes={self.min_nodes}, max_nodes={self.max_nodes}"
            )


PhysicsModel = Literal["runtime", "freetrain"]

# The runtime's costs, from the live figures of docs/benchmarks.md (docs/replay.md, "The
# physics", says which figure each comes from).
# Node idle -> its rank's first step, warm joins on the local Slurm cluster: 7.06 s median
# ("Node idle to first training step"; 6.46-7.32 s over its runs; block submitted -> first step
# 6.8 s median in the live-training run).
STARTUP_S = 7.0
# The whole job's pause when ranks join: the rendezvous, "joined -> first step" 0.58 s median,
# 0.93 s p90 (rescale pauses up 0.07 s median); the p90, rounded up, for a model larger than the
# digits MLP it was measured on.
REGROUP_S = 1.0
# The whole job's pause when ranks leave at a commit: rescale pause down 0.08 s median,
# bench_rescale's planned shrink 0.09-0.24 s; rounded up as REGROUP_S is.
LEAVE_S = 1.0


@dataclass(frozen=True)
class JobCosts:
    """What a job's node-set changes cost under one :class:`Physics` (seconds).

    ``startup_s``: a node the job gains trains nothing for this long (runtime physics only; 0
    under FreeTrain's); ``up_s``: the whole job's pause when nodes join it (runtime: the
    regroup once the new nodes are up; FreeTrain: its ``Tcup``, from the change);
    ``down_s``: the whole job's pause when it loses nodes and keeps some."""

    startup_s: float
    up_s: float
    down_s: float

    @property
    def lead_s(self) -> float:
        """The least time from a node's taking to its first training step."""
        return self.startup_s + self.up_s


@boundary(ConfigError)
class Physics:
    """How a replay charges changes of a job's node set (docs/replay.md, "The physics").

    ``"runtime"`` (the default), as this project's runtime pays: a gained node waits
    ``startup_s`` while the job's other nodes train on, then the whole job pauses
    ``regroup_s`` (its ranks meet); a job with no node training (a first start, or a restart
    after losing all its nodes) so pays ``startup_s + regroup_s`` for all its nodes; a loss
    pauses the job ``leave_s`` if it keeps nodes that train. ``"freetrain"``: FreeTrain's
    model, which its published figures use: every change pauses the whole job, the job's
    ``scale_up_s`` when it gains nodes (a start included), ``scale_down_s`` when it loses some,
    both when both happen in one step; ``startup_s`` (if given) replaces ``scale_up_s`` and
    ``leave_s`` replaces ``scale_down_s``.

    A value given here applies to every job; else a job's own (``ReplayJob.startup_s`` ...),
    else the defaults :data:`STARTUP_S`, :data:`REGROUP_S`, :data:`LEAVE_S`.
    """

    model: PhysicsModel = "runtime"
    startup_s: Annotated[Number, Field(ge=0)] | None = None
    regroup_s: Annotated[Number, Field(ge=0)] | None = None
    leave_s: Annotated[Number, Field(ge=0)] | None = None

    def costs(self, job: ReplayJob) -> JobCosts:
        """``job``'s costs under this physics."""

        def pick(given: float | None, own: float | None, default: float) -> float:
            return float(given if given is not None else own if own is not None else default)

        if self.model == "freetrain":
            return JobCosts(
                0.0,
                pick(self.startup_s, job.scale_up_s, 0.0),
                pick(self.leave_s, job.scale_down_s, 0.0),
            )
        return JobCosts(
            pick(self.startup_s, job.startup_s, STARTUP_S),
            pick(self.regroup_s, job.regroup_s, REGROUP_S),
            pick(self.leave_s, job.leave_s, LEAVE_S),
        )

    def bound_jobs(self, jobs: Sequence[ReplayJob]) -> list[ReplayJob]:
        """``jobs`` with ``scale_up_s`` set to the least time from a node's taking to its first
        step under this physics, as :mod:`~parsl_malleable.replay.bounds` reads it."""
        return [replace(job, scale_up_s=self.costs(job).lead_s) for job in jobs]


FREETRAIN_PHYSICS = Physics("freetrain")


def _when(text: str) -> float:
    """A submit time: Unix seconds, or an ISO date-time (UTC unless it says otherwise)."""
    try:
        return float(text)
    except ValueError:
        stamp = dt.datetime.fromisoformat(text)
        if stamp.tzinfo is None:
            stamp = stamp.replace(tzinfo=dt.UTC)
        return stamp.timestamp()


def load_replay_workload(
    directory: str | Path, name: str, limit: int | None = None
) -> list[ReplayJob]:
    """FreeTrain's workload ``name`` (``<name>-jobs.csv``: ``Pmax`` samples, ``Tsub`` submit
    time; ``<name>-scaling.csv``: curves), jobs in submit order. A job's family is the model in
    its name (``J00001-vgg16``: ``vgg16``), else the workload's."""
    directory = Path(directory)
    jobs = {job.name: job for job in load_workload(directory, name, limit)}
    path = _csv_file(directory, f"{name}-jobs")
    rows = []
    with open_text(path, newline="") as handle:
        reader = csv.DictReader(handle)
        missing = {"Pmax", "Tsub"} - set(reader.fieldnames or [])
        if missing:
            raise TraceFormatError(path, 1, f"missing column(s) {', '.join(sorted(missing))}")
        for line, row in enumerate(reader, start=2):
            if row["job"] not in jobs:
                continue
            try:
                rows.append((_when(row["Tsub"]), float(row["Pmax"]), row["job"]))
            except ValueError as exc:
                raise TraceFormatError(path, line, f"bad Pmax or Tsub: {exc}") from None
    out = []
    for submit, samples, job_name in sorted(rows):
        job = jobs[job_name]
        out.append(
            ReplayJob(
                job.name,
                job.curve,
                job.min_nodes,
                job.max_nodes,
                job.scale_up_cost,
                job.scale_down_cost,
                samples,
                submit,
                family=job.name.split("-", 1)[1] if "-" in job.name else name,
            )
        )
    return out


def sweep(template: ReplayJob, count: int, submit: float, every_s: float = 0.0) -> list[ReplayJob]:
    """``count`` copies of ``template`` (an HPO sweep: same model, different settings, same
    cost), submitted from ``submit`` every ``every_s`` seconds."""
    return [
        replace(template, name=f"{template.name}-{i:03d}", submit=submit + i * every_s)
        for i in range(count)
    ]


def shift(jobs: list[ReplayJob], to: float) -> list[ReplayJob]:
    """The same jobs with submit times moved so that the first is at ``to``."""
    first = min(job.submit for job in jobs)
    return [replace(job, submit=job.submit - first + to) for job in jobs]


__all__ = [
    "FREETRAIN_PHYSICS",
    "LEAVE_S",
    "REGROUP_S",
    "STARTUP_S",
    "JobCosts",
    "Physics",
    "PhysicsModel",
    "ReplayJob",
    "load_replay_workload",
    "shift",
    "sweep",
]
