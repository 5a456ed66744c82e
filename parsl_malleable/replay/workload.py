"""Training workloads the replay runs: FreeTrain's, or a sweep generated from one curve."""

from __future__ import annotations

import csv
import datetime as dt
from dataclasses import replace
from pathlib import Path
from typing import Annotated

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

    def __post_init__(self) -> None:
        if self.min_nodes > self.max_nodes:
            raise ConfigError(
                f"job {self.name!r}: need 1 <= min_nodes <= max_nodes; got "
                f"min_nodes={self.min_nodes}, max_nodes={self.max_nodes}"
            )


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


__all__ = ["ReplayJob", "load_replay_workload", "shift", "sweep"]
