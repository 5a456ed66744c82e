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
* ``nodes.png``: the site's nodes over time: native, harvested and training, harvested but idle
  for training, idle; the harvest fraction is harvested / (harvested + idle) node-seconds.
"""

from __future__ import annotations

from collections import Counter
from itertools import pairwise
from pathlib import Path
from typing import Any

import pandas as pd

from parsl_malleable.campaign.store import CampaignStore, MetricSummary
from parsl_malleable.campaign.tensorboard_events import write_event_files
from parsl_malleable.private_files import private_dir, write_private_bytes


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


def write_metrics(store: CampaignStore, output: Path) -> list[Path]:
    """``metrics/<job>.csv`` for every job that reported: one row per step (``step``, ``time``,
    ``run``, then the metrics, NaN where NaN was reported); private files in a private
    folder. The paths written."""
    rows = store.metrics()
    if not rows:
        return []
    folder = private_dir(output / "metrics", what="metrics folder")
    frame = pd.DataFrame(rows)
    written = []
    for job, part in frame.groupby("job", sort=False):
        path = folder / f"{job}.csv"
        table = part.drop(columns="job").dropna(axis="columns", how="all")
        write_private_bytes(path, table.to_csv(index=False).encode())
        written.append(path)
    return written


def harvest_fraction(store: CampaignStore) -> float | None:
    """Harvested / (harvested + idle) node-seconds over every sample of every run."""
    samples = store.site_samples()
    harvested = idle = 0.0
    for a, b in pairwise(samples):
        if a[1] != b[1]:
            continue  # the gap between two runs is no sample interval
        dt = b[0] - a[0]
        harvested += a[4] * dt
        idle += a[6] * dt
    total = harvested + idle
    return harvested / total if total > 0 else None


def training_fraction(store: CampaignStore) -> float | None:
    """Training / harvested node-seconds over every sample of every run: how much of the
    node-time held in blocks had a job's ranks on it (start-up, drains and nodes no job
    wanted are the rest)."""
    samples = store.site_samples()
    harvested = training = 0.0
    for a, b in pairwise(samples):
        if a[1] != b[1]:
            continue
        dt = b[0] - a[0]
        harvested += a[4] * dt
        training += a[5] * dt
    return training / harvested if harvested > 0 else None


def write_results(store: CampaignStore, output: Path) -> list[Path]:
    """Write the table and the pictures into ``output``; the paths written."""
    frame = results_frame(store)
    csv = output / "results.csv"
    frame.to_csv(csv, index=False)
    written = [csv]
    parquet = output / "results.parquet"
    frame.to_parquet(parquet, index=False)
    written.append(parquet)
    from parsl_malleable.campaign.plots import plot_curves, plot_gantt, plot_nodes

    started = store.started_at or 0.0
    order = [row.name for row in store.jobs()]  # fixes each job's colour in both pictures
    written.append(plot_gantt(store.job_samples(), started, output / "gantt.png", jobs=order))
    written += write_metrics(store, output)
    written += write_event_files(store, output)  # when tensorboard is installed
    spec = store.metric_spec()
    names = store.metric_names()
    shown = spec[0] if spec else (names[0] if names else None)
    if shown is not None:
        series = store.metric_series(shown)
        if series:
            jobs = [row.name for row in store.jobs()]
            written.append(plot_curves(series, shown, jobs, output / "curves.png"))
    written.append(
        plot_nodes(store.site_samples(), started, harvest_fraction(store), output / "nodes.png")
    )
    return written


__all__ = ["harvest_fraction", "results_frame", "write_metrics", "write_results"]
