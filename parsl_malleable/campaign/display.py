"""The live view of a running campaign and the summary of a campaign folder (rich tables)."""

from __future__ import annotations

import time
from typing import Any

from rich.table import Table

from parsl_malleable.campaign.store import JobProgress, JobRow


def _fmt(value: Any, spec: str = "") -> str:
    if value is None:
        return "-"
    return format(value, spec) if spec else str(value)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def progress_text(row: JobRow, progress: JobProgress | None) -> str:
    """``1200/3000 (40%) ETA 2 min``: steps done (of ``total_steps`` when the campaign gives
    it), and the time left at the recent step rate; a finished job its step count."""
    total = row.spec.get("total_steps")
    if row.status in ("done", "failed"):
        steps = (row.result or {}).get("steps", progress.step if progress else None)
        return f"{steps} steps" if isinstance(steps, int) else "-"
    if progress is None:
        return "-"
    if not isinstance(total, int):
        rate = f", {progress.steps_per_s:.1f}/s" if progress.steps_per_s else ""
        return f"step {progress.step}{rate}"
    done = min(progress.step, total)
    text = f"{done}/{total} ({done / total:.0%})"
    eta = progress.eta_s(total)
    if eta is not None:
        text += f" ETA {_duration(eta)}"
    elif row.status == "running":
        text += " ETA ?"
    return text


def live_table(runner: Any) -> Table:
    """Jobs done/running/waiting, nodes now, samples/s per job, harvest fraction."""
    rows: list[JobRow] = runner.store.jobs()
    counts = {s: sum(1 for r in rows if r.status == s) for s in ("done", "running", "waiting")}
    failed = sum(1 for r in rows if r.status == "failed")
    site = runner.last_site
    fraction = runner.harvest_fraction
    title = (
        f"run {runner.run}  {time.time() - runner.started:5.0f} s  "
        f"jobs: {counts['done']} done, {counts['running']} running, {counts['waiting']} waiting"
        + (f", {failed} failed" if failed else "")
    )
    caption = (
        f"nodes: {site.native} native, {site.harvested} harvested ({site.training} training), "
        f"{site.idle} idle of {site.total}"
        if site
        else "nodes: waiting for the first snapshot"
    ) + (f"; harvest fraction {fraction:.0%}" if fraction is not None else "")
    table = Table(title=title, caption=caption, expand=False)
    for column in ("job", "status", "nodes", "ranks", "samples/s", "progress", "node-h", "result"):
        table.add_column(column, justify="left" if column in ("job", "status") else "right")
    progress = runner.store.progress()
    for row in rows:
        now = runner.last_jobs.get(row.name, {})
        result = row.result or {}
        metric = next((v for k, v in result.items() if "acc" in k), None)
        table.add_row(
            row.name,
            row.status,
            _fmt(now.get("nodes")),
            _fmt(now.get("world")),
            _fmt(now.get("rate"), ".0f"),
            progress_text(row, progress.get(row.name)),
            f"{row.node_seconds / 3600:.3f}",
            _fmt(metric, ".3f") if isinstance(metric, float) else _fmt(metric),
        )
    return table


def status_table(
    rows: list[JobRow],
    meta: dict[str, str | None],
    progress: dict[str, JobProgress] | None = None,
) -> Table:
    """A summary of a campaign folder, live or not; ``progress`` per job
    (:meth:`~.store.CampaignStore.progress`) fills the progress column."""
    progress = progress or {}
    counts = {s: sum(1 for r in rows if r.status == s) for s in ("done", "running", "waiting")}
    title = (
        f"{meta.get('campaign_file') or 'campaign'}: {meta.get('runs') or 0} run(s), "
        f"last {meta.get('state')}; jobs: {counts['done']} done, {counts['running']} unfinished, "
        f"{counts['waiting']} waiting"
    )
    table = Table(title=title)
    for column in (
        "job",
        "status",
        "progress",
        "node-h",
        "rescales",
        "runs",
        "resumed at",
        "result",
        "warnings",
    ):
        table.add_column(column)
    for row in rows:
        result = row.result or {}
        metric = next((f"{k}={v:.3f}" for k, v in result.items() if "acc" in k), "")
        table.add_row(
            row.name,
            row.status,
            progress_text(row, progress.get(row.name)),
            f"{row.node_seconds / 3600:.3f}",
            str(row.rescales),
            str(row.submissions),
            _fmt(row.resumed_from_step),
            metric or (row.error or "")[:60],
            str(len(row.warnings)) if row.warnings else "",
        )
    return table


__all__ = ["live_table", "progress_text", "status_table"]
