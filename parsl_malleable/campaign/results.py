"""A campaign's results: one row per job (CSV and Parquet) and two pictures (PNG).

* ``results.csv`` / ``results.parquet``: name, app, swept parameters (``param.<name>``),
  status (``pruned``: a search stopped the trial early; ``pruned_step``: the step of the
  report that decided it), the final metrics the training function returned
  (``result.<name>``), node-hours, rescales, time to result (from the campaign's first start
  to the job's end, driver deaths included), the driver runs it took, the checkpoint step it
  last resumed from; with the campaign's ``metric`` (``acc``, say): ``acc_final`` (its last
  report), ``acc_best`` and ``acc_best_step`` (by the metric's direction; NaN and infinities
  never count) and ``acc_nonfinite``; ``reports``: the steps the job reported;
* ``metrics/<job>.csv``: every step a job reported (private files in a private folder);
* ``tensorboard/<job>/``: the same as TensorBoard event files, when ``tensorboard`` is
  installed (:mod:`~parsl_malleable.campaign.tensorboard_events`);
* ``curves.png``: the campaign's metric (else the most reported one) against the step, per job;
* ``gantt.png``: which job trained on which node over time (from the 1 s samples);
* ``nodes.png``: the site's nodes over time: native; harvested, split into in training steps,
  holding ranks that made no step (starting, paused for a rescale, draining), and held by no
  job; idle. The harvest fraction is harvested / (harvested + idle) node-seconds;
* ``startup.csv``: one row per node that reached a first training step (per run and block):
  the seconds of each phase of its start-up (:func:`startup_frame`).

The training fraction (:func:`training_fraction`) counts steps: node-seconds in the ranks'
training steps / harvested node-seconds. What was counted before, node-seconds of nodes given to
a job (its ranks starting included), is :func:`assigned_fraction`.
"""

from __future__ import annotations

import logging
import statistics
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import pandas as pd

from parsl_malleable.campaign.store import (
    STARTUP_PHASES,
    CampaignStore,
    MetricSummary,
    NodeStartupRow,
)
from parsl_malleable.campaign.tensorboard_events import write_event_files
from parsl_malleable.errors import UnsafePathError
from parsl_malleable.private_files import private_dir, write_private_bytes

log = logging.getLogger(__name__)


def _flat(prefix: str, values: dict[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in (values or {}).items():
        if isinstance(value, (int, float, str, bool)) or value is None:
            out[f"{prefix}.{key}"] = value
        else:
            out[f"{prefix}.{key}"] = str(value)
    return out


def results_frame(store: CampaignStore) -> pd.DataFrame:
    """One row per job, in campaign order."""
    started = store.started_at
    spec = store.metric_spec()
    summaries: dict[str, MetricSummary] = store.metric_summary(*spec) if spec else {}
    counts = Counter(row["job"] for row in store.metrics())
    rows = []
    for job in store.jobs():
        metric: dict[str, Any] = {}
        if spec is not None:
            name = spec[0]
            summary = summaries.get(job.name)
            metric = {
                f"{name}_final": summary.final if summary else None,
                f"{name}_best": summary.best if summary else None,
                f"{name}_best_step": summary.best_step if summary else None,
                f"{name}_nonfinite": summary.nonfinite if summary else 0,
            }
        rows.append(
            {
                "job": job.name,
                "app": job.spec.get("app"),
                **_flat("param", job.params),
                "status": job.status,
                **_flat("result", job.result),
                **metric,
                "reports": counts.get(job.name, 0),
                "pruned_step": job.pruned_step,
                "node_hours": job.node_seconds / 3600.0,
                "rescales": job.rescales,
                "time_to_result_s": (
                    job.finished_at - started
                    if job.finished_at is not None and started is not None
                    else None
                ),
                "first_start_s": (
                    job.first_start - started
                    if job.first_start is not None and started is not None
                    else None
                ),
                "driver_runs": job.submissions,
                "finished_in_run": job.finished_in_run,
                "resumed_from_step": job.resumed_from_step,
                "min_nodes": job.spec.get("min_nodes"),
                "max_nodes": job.spec.get("max_nodes"),
                "priority": job.spec.get("priority"),
                "error": job.error,
                "warnings": "; ".join(job.warnings) or None,
            }
        )
    frame = pd.DataFrame(rows)
    if "pruned_step" in frame:  # a whole step, blank where the job was not pruned
        frame["pruned_step"] = frame["pruned_step"].astype("Int64")
    params = sorted(c for c in frame.columns if c.startswith("param."))
    results = [c for c in frame.columns if c.startswith("result.")]
    rest = [c for c in frame.columns if c not in params and c not in results]
    # Rows differ in their parameters and metrics: keep them together, after job and status.
    return frame[[*rest[:3], *params, *results, *rest[3:]]]


class _Outputs:
    """The files of :func:`write_results`, each written on its own: one that cannot be (a folder
    in its place, a full disk) is noted, and the others are still written. A run's end once
    stopped at the first (a folder where ``metrics/<job>.csv`` was): a traceback, no pictures."""

    def __init__(self, output: Path) -> None:
        self.output = output
        self.written: list[Path] = []
        self.failed: list[str] = []

    def write(self, path: Path, make: Callable[[], object]) -> None:
        """Call ``make``, which writes ``path``; noted as written, or as failed."""
        try:
            make()
        except (OSError, UnsafePathError) as exc:
            self.failed.append(f"{self._name(path)} ({_why(exc)})")
        else:
            self.written.append(path)

    def add(self, what: Path, make: Callable[[], list[Path]]) -> None:
        """Call ``make``, which writes several files and gives their paths."""
        try:
            self.written += make()
        except (OSError, UnsafePathError) as exc:
            self.failed.append(f"{self._name(what)} ({_why(exc)})")

    def _name(self, path: Path) -> str:
        return str(path.relative_to(self.output)) if path.is_relative_to(self.output) else str(path)

    def warn(self) -> None:
        """One warning line naming every file not written, when some were not."""
        if self.failed:
            log.warning(
                "could not write %s in %s; the other results were written. Move what is in the "
                "way (or free space), then run the campaign again: a rerun writes the results "
                "again",
                ", ".join(self.failed),
                self.output,
            )


def _why(exc: OSError | UnsafePathError) -> str:
    """Why a file could not be written, in a few words."""
    if isinstance(exc, IsADirectoryError):
        return "a folder is in its place"
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return str(exc)


def write_metrics(
    store: CampaignStore, output: Path, failed: list[str] | None = None
) -> list[Path]:
    """``metrics/<job>.csv`` for every job that reported: one row per step (``step``, ``time``,
    ``run``, then the metrics, NaN where NaN was reported); private files in a private
    folder. The paths written. With ``failed``, a file that cannot be written is added to it
    (``metrics/a.csv (a folder is in its place)``) and the other jobs' files are still
    written; without, the error is raised."""
    rows = store.metrics()
    if not rows:
        return []
    folder = private_dir(output / "metrics", what="metrics folder")
    frame = pd.DataFrame(rows)
    written = []
    for job, part in frame.groupby("job", sort=False):
        path = folder / f"{job}.csv"
        table = part.drop(columns="job").dropna(axis="columns", how="all")
        try:
            write_private_bytes(path, table.to_csv(index=False).encode())
        except OSError as exc:
            if failed is None:
                raise
            failed.append(f"metrics/{job}.csv ({_why(exc)})")
            continue
        written.append(path)
    return written


@dataclass(frozen=True)
class NodeTime:
    """Node-seconds over every sample interval of every run (the gap between two runs is no
    interval): ``harvested`` (in our blocks), ``idle`` (nobody's), ``assigned`` (given to a
    job: its ranks there, starting ones included), ``stepping`` (in the ranks' training steps,
    over the intervals whose steps were counted), and ``unmeasured``: harvested node-seconds
    of intervals whose steps were not counted (samples written before they were)."""

    harvested: float = 0.0
    idle: float = 0.0
    assigned: float = 0.0
    stepping: float = 0.0
    unmeasured: float = 0.0
    measured_intervals: int = 0

    @property
    def harvest_fraction(self) -> float | None:
        """Harvested / (harvested + idle)."""
        total = self.harvested + self.idle
        return self.harvested / total if total > 0 else None

    @property
    def assigned_fraction(self) -> float | None:
        """Assigned / harvested: the share of harvested node-time given to jobs."""
        return self.assigned / self.harvested if self.harvested > 0 else None

    @property
    def training_fraction(self) -> float | None:
        """Stepping / harvested, over the intervals whose steps were counted; None when no
        interval's were (the campaign's samples predate step counting) or nothing was
        harvested in them."""
        measured = self.harvested - self.unmeasured
        if self.measured_intervals == 0 or measured <= 0:
            return None
        return self.stepping / measured


def node_time(store: CampaignStore) -> NodeTime:
    """The campaign's :class:`NodeTime` from its site samples. A sample's counts stand for the
    time until the next sample of its run; the stepping node-seconds of that interval are the
    ones the next sample recorded (counted up to it)."""
    harvested = idle = assigned = stepping = unmeasured = 0.0
    measured = 0
    for a, b in pairwise(store.site_samples()):
        if a[1] != b[1]:
            continue  # the gap between two runs is no sample interval
        dt = b[0] - a[0]
        harvested += a[4] * dt
        idle += a[6] * dt
        assigned += a[5] * dt
        if b[7] is None:
            unmeasured += a[4] * dt
        else:
            stepping += b[7]
            measured += 1
    return NodeTime(harvested, idle, assigned, stepping, unmeasured, measured)


def harvest_fraction(store: CampaignStore) -> float | None:
    """Harvested / (harvested + idle) node-seconds over every sample of every run."""
    return node_time(store).harvest_fraction


def training_fraction(store: CampaignStore) -> float | None:
    """Node-seconds in training steps / harvested node-seconds over every sample of every run
    whose steps were counted (the ranks' own steps, from the controller's phase log: start-up,
    rescale pauses, drains and nodes no job wanted are the rest); None when no sample's steps
    were counted (a campaign run before they were)."""
    return node_time(store).training_fraction


def assigned_fraction(store: CampaignStore) -> float | None:
    """Node-seconds of nodes given to a job (its ranks there or starting) / harvested
    node-seconds: what the training fraction was before it counted steps."""
    return node_time(store).assigned_fraction


STARTUP_COLUMNS = [
    "run",
    "block",
    "node",
    "first_step_at_s",
    *STARTUP_PHASES,
    "idle_to_first_step_s",
]
# How the end summary names each phase.
PHASE_NAMES = {
    "queued_s": "queued",
    "worker_start_s": "worker start",
    "rank_start_s": "rank start",
    "first_step_s": "first step",
    "idle_to_first_step_s": "idle -> first step",
}


def startup_frame(rows: list[NodeStartupRow], started: float | None) -> pd.DataFrame:
    """One row per node that reached a first step (``startup.csv``): run, block, node,
    ``first_step_at_s`` (since the campaign's first start), then the seconds of each phase:
    ``queued_s`` (block submitted -> running), ``worker_start_s`` (running -> the node's
    worker registered), ``rank_start_s`` (worker -> its rank joined the job),
    ``first_step_s`` (joined -> first step), ``idle_to_first_step_s`` (the node seen idle ->
    first step, blank where the driver did not see it go idle); blank where a stamp is
    missing."""
    records = [
        {
            "run": r.run,
            "block": r.block,
            "node": r.node,
            "first_step_at_s": r.first_step - started if started is not None else None,
            **r.seconds(),
        }
        for r in rows
    ]
    return pd.DataFrame(records, columns=STARTUP_COLUMNS)


def startup_medians(rows: list[NodeStartupRow]) -> dict[str, tuple[float, int] | None]:
    """Per phase (``queued_s`` ... ``idle_to_first_step_s``): the median seconds and how many
    nodes had the phase stamped; None for a phase no node had."""
    out: dict[str, tuple[float, int] | None] = {}
    for phase in PHASE_NAMES:
        values = [v for r in rows if (v := r.seconds()[phase]) is not None]
        out[phase] = (statistics.median(values), len(values)) if values else None
    return out


def summary_lines(store: CampaignStore) -> list[str]:
    """What the end of a run says about the site's node-time and the start-ups: the harvest
    and training fractions (training counted in steps, beside the share given to jobs), and
    the median seconds of each start-up phase."""
    spent = node_time(store)
    lines = []
    harvest, training = spent.harvest_fraction, spent.training_fraction
    if spent.harvested > 0 and harvest is not None:
        text = f"node-time: harvested {harvest:.0%} of idle; "
        if training is None:
            text += "training in steps not counted (samples from before steps were counted)"
        else:
            text += f"training (in steps) {training:.1%} of harvested"
        text += f", nodes given to jobs {spent.assigned / spent.harvested:.1%}"
        if spent.unmeasured > 0 and training is not None:
            share = spent.unmeasured / spent.harvested
            text += f" (steps not counted in {share:.0%} of the harvested node-time)"
        lines.append(text)
    rows = store.node_startups()
    if rows:
        medians = startup_medians(rows)
        parts = [
            f"{PHASE_NAMES[phase]} {value[0]:.1f} s"
            for phase, value in medians.items()
            if value is not None and phase != "idle_to_first_step_s"
        ]
        text = f"start-up, median of {len(rows)} node(s): " + ", ".join(parts)
        idle = medians["idle_to_first_step_s"]
        if idle is not None:
            text += f"; idle -> first step {idle[0]:.1f} s (n={idle[1]})"
        lines.append(text)
    return lines


def write_results(store: CampaignStore, output: Path) -> list[Path]:
    """Write the table and the pictures into ``output``; the paths written. Each file is
    written on its own: one that cannot be (a folder in its place, a full disk) is named in one
    warning at the end, and the others are still written."""
    frame = results_frame(store)
    out = _Outputs(output)
    csv = output / "results.csv"
    out.write(csv, lambda: frame.to_csv(csv, index=False))
    parquet = output / "results.parquet"
    out.write(parquet, lambda: frame.to_parquet(parquet, index=False))
    from parsl_malleable.campaign.plots import plot_curves, plot_gantt, plot_nodes

    started = store.started_at or 0.0
    order = [row.name for row in store.jobs()]  # fixes each job's colour in both pictures
    gantt = output / "gantt.png"
    out.write(gantt, lambda: plot_gantt(store.job_samples(), started, gantt, jobs=order))
    out.add(output / "metrics", lambda: write_metrics(store, output, out.failed))
    out.add(output / "tensorboard", lambda: write_event_files(store, output))  # if installed
    spec = store.metric_spec()
    names = store.metric_names()
    shown = spec[0] if spec else (names[0] if names else None)
    if shown is not None:
        series = store.metric_series(shown)
        if series:
            jobs = [row.name for row in store.jobs()]
            curves = output / "curves.png"
            out.write(curves, lambda: plot_curves(series, shown, jobs, curves))
    spent = node_time(store)
    nodes = output / "nodes.png"
    out.write(
        nodes,
        lambda: plot_nodes(
            store.site_samples(),
            started,
            spent.harvest_fraction,
            nodes,
            training=spent.training_fraction,
        ),
    )
    startup = output / "startup.csv"
    # Written even when no node reached a step: the folder always says what start-up cost.
    table = startup_frame(store.node_startups(), store.started_at)
    out.write(startup, lambda: write_private_bytes(startup, table.to_csv(index=False).encode()))
    out.warn()
    return out.written


__all__ = [
    "PHASE_NAMES",
    "STARTUP_COLUMNS",
    "NodeTime",
    "assigned_fraction",
    "harvest_fraction",
    "node_time",
    "results_frame",
    "startup_frame",
    "startup_medians",
    "summary_lines",
    "training_fraction",
    "write_metrics",
    "write_results",
]
