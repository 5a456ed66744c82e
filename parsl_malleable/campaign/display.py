"""The live view of a running campaign and the summary of a campaign folder (rich tables)."""

from __future__ import annotations

import io
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from parsl_malleable.campaign.store import JobProgress, JobRow, MetricSummary


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


def live_status(row: JobRow, now: dict[str, Any] | None, progress: JobProgress | None) -> str:
    """What the live view calls job ``row`` now. A job submitted to this run is stored as
    ``running`` until it ends; holding no node it trains nowhere: ``paused`` once it has
    committed a step (it waits for nodes to go on), ``waiting`` before; ``starting`` while the
    nodes it was given have no rank up yet. Done, failed and waiting jobs as stored."""
    if row.status != "running":
        return row.status
    now = now or {}
    if not now.get("nodes"):
        return "paused" if progress is not None else "waiting"
    return "running" if now.get("world") else "starting"


# The order of the live view's counts; the first three are always said, the others when seen.
LIVE_STATUSES = ("done", "running", "waiting", "starting", "paused", "failed")
_WHY = {
    "waiting": "waiting: no node given yet",
    "starting": "starting: nodes given, ranks not up yet",
    "paused": "paused: trained, holds no node now (waits for one to go on)",
}


def status_counts(statuses: Sequence[str]) -> str:
    """``2 done, 1 running, 3 waiting, 1 paused``: the rows' statuses counted, so that the
    title and the rows agree."""
    counts = Counter(statuses)
    shown = [s for s in LIVE_STATUSES if counts[s] or s in LIVE_STATUSES[:3]]
    shown += sorted(s for s in counts if s not in LIVE_STATUSES)
    return ", ".join(f"{counts[s]} {s}" for s in shown)


def site_caption(site: Any, harvest: float | None, training: float | None) -> str:
    """``nodes: 2 native, 12 harvested (10 with ranks, 8.4 stepping), 1 idle of 15; harvest
    fraction 75%, in training steps 61% of harvested``: ``site`` a
    :class:`~.sample.SiteCounts` (None before the first snapshot); "with ranks" counts the
    nodes given to jobs, starting ranks included, "stepping" the mean number of nodes in
    training steps over the last sample interval."""
    if site is None:
        text = "nodes: waiting for the first snapshot"
    else:
        stepping = (
            f"{site.stepping:.1f} stepping" if site.stepping is not None else "steps not counted"
        )
        text = (
            f"nodes: {site.native} native, {site.harvested} harvested ({site.assigned} with "
            f"ranks, {stepping}), {site.idle} idle of {site.total}"
        )
    shares = [f"harvest fraction {harvest:.0%}"] if harvest is not None else []
    if training is not None:
        shares.append(f"in training steps {training:.0%} of harvested")
    return text + (f"; {', '.join(shares)}" if shares else "")


def live_table(runner: Any, width: int | None = None) -> Table:
    """Jobs done/running/waiting, nodes now, samples/s per job, harvest fraction; fitted to
    ``width`` columns (see :func:`fitted_table`) when given."""
    rows: list[JobRow] = runner.store.jobs()
    progress = runner.store.progress()
    statuses = [live_status(r, runner.last_jobs.get(r.name), progress.get(r.name)) for r in rows]
    site = runner.last_site
    fraction = runner.harvest_fraction
    # A stand-in runner (a notebook's, a test's) may not count steps: then none is said.
    training = getattr(runner, "training_fraction", None)
    title = (
        f"run {runner.run}  {time.time() - runner.started:5.0f} s  jobs: {status_counts(statuses)}"
    )
    caption = site_caption(site, fraction, training)
    why = [text for status, text in _WHY.items() if status in statuses]
    if why:
        caption += "\n" + "; ".join(why)
    metric = runner.campaign.metric
    # The latest report of the campaign's metric per job (the column is named after it).
    latest = runner.store.metric_summary(metric.name, None) if metric is not None else {}
    columns = ["job", "status", "nodes", "ranks", "samples/s", "progress", "node-h"]
    columns += [metric.name] if metric is not None else []
    columns.append("result")
    cells = []
    for row, status in zip(rows, statuses, strict=True):
        now = runner.last_jobs.get(row.name, {})
        result = row.result or {}
        reported = latest.get(row.name)
        line = [
            row.name,
            status,
            _fmt(now.get("nodes")),
            _fmt(now.get("world")),
            _fmt(now.get("rate"), ".0f"),
            progress_text(row, progress.get(row.name)),
            f"{row.node_seconds / 3600:.3f}",
        ]
        if metric is not None:
            line.append(_fmt(reported.final if reported else None, ".4g"))
        value = next((v for k, v in result.items() if "acc" in k), None)
        line.append(_fmt(value, ".3f") if isinstance(value, float) else _fmt(value))
        cells.append(line)
    return fitted_table(
        title,
        caption,
        columns,
        cells,
        width=width,
        optional=LIVE_OPTIONAL,
        left=("job", "status"),
        hint="a wider terminal shows them",
    )


# Dropped in this order when the table would not fit the terminal (least useful first).
LIVE_OPTIONAL = ("ranks", "node-h", "samples/s", "result")
STATUS_OPTIONAL = ("resumed at", "rescales", "runs", "node-h", "warnings")


_PADDING = 2  # a column's cell padding, one space each side
_MEASURE = Console(file=io.StringIO(), width=10_000)  # measures words; prints nothing


def _span(texts: Sequence[Text]) -> tuple[int, int]:
    """The column's (fewest, most) terminal cells of content: its longest word, its longest line."""
    measured = [Measurement.get(_MEASURE, _MEASURE.options, t) for t in texts]
    return max(m.minimum for m in measured), max(m.maximum for m in measured)


def _share(spans: Sequence[tuple[int, int]], room: int) -> list[int]:
    """Column widths within ``room`` cells: each its longest word, then whole lines to the
    columns that need the fewest more cells first, so that as few columns as can wrap (rich
    alone would shrink the widest column first, below its longest word)."""
    widths = [low for low, _ in spans]
    left = room - sum(widths)
    for i in sorted(range(len(spans)), key=lambda i: spans[i][1] - spans[i][0]):
        more = min(left, spans[i][1] - widths[i])
        widths[i] += more
        left -= more
    return widths


def fitted_table(
    title: str,
    caption: str | None,
    columns: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    width: int | None,
    optional: Sequence[str],
    left: Sequence[str] = (),
    hint: str = "",
) -> Table:
    """A table of ``rows`` under ``columns`` that fits ``width`` terminal columns without
    cutting a word to ``…``: every column at least as wide as its longest word, lines wrapped
    at spaces; the ``optional`` columns are left out, in their order, until that fits, and the
    caption says which. Where even that is too wide, words fold onto the next line. ``left``:
    the columns justified left (the others right); cells are plain text, not rich markup."""
    texts = [[Text(column), *(Text(row[i]) for row in rows)] for i, column in enumerate(columns)]
    spans = [_span(column) for column in texts]
    keep = list(range(len(columns)))
    dropped: list[str] = []
    widths: list[int] | None = None
    while width is not None:
        room = width - (len(keep) + 1) - _PADDING * len(keep)  # borders, padding
        if sum(spans[i][1] for i in keep) <= room:
            break
        if sum(spans[i][0] for i in keep) <= room:
            widths = _share([spans[i] for i in keep], room)
            break
        places = [columns.index(c) for c in optional if c in columns]
        drop = next((i for i in places if i in keep), None)
        if drop is None:
            break
        keep.remove(drop)
        dropped.append(columns[drop])
    note = ""
    if dropped:
        note = f"left out at {width} columns: {', '.join(dropped)}" + (f" ({hint})" if hint else "")
    table = Table(title=title, caption="\n".join(t for t in (caption, note) if t) or None)
    for n, i in enumerate(keep):
        table.add_column(
            columns[i],
            justify="left" if columns[i] in left else "right",
            overflow="fold",  # not ellipsis: what does not fit goes on, on the next line
            width=widths[n] if widths else None,
        )
    for r in range(len(rows)):
        table.add_row(*(texts[i][r + 1] for i in keep))
    return table


def best_text(best: tuple[str, MetricSummary] | None, metric: tuple[str, str] | None) -> str:
    """``best so far: lr0.05 acc=0.9733 at step 420 (max)``; what is known without one."""
    if metric is None:
        return "best: no metric declared (the campaign's metric: {name: ..., direction: ...})"
    name, direction = metric
    if best is None:
        return f"best so far: none ({name} not reported yet, or only NaN or infinite)"
    job, summary = best
    return f"best so far: {job} {name}={summary.best:.4g} at step {summary.best_step} ({direction})"


def status_table(
    rows: list[JobRow],
    meta: dict[str, str | None],
    progress: dict[str, JobProgress] | None = None,
    best: str | None = None,
    width: int | None = None,
) -> Table:
    """A summary of a campaign folder, live or not; ``progress`` per job
    (:meth:`~.store.CampaignStore.progress`) fills the progress column; ``best``
    (:func:`best_text`) is its caption; fitted to ``width`` columns (:func:`fitted_table`)
    when given."""
    progress = progress or {}
    counts = {
        s: sum(1 for r in rows if r.status == s)
        for s in ("done", "pruned", "failed", "running", "waiting")
    }
    ended = ", ".join(
        f"{counts[s]} {s}" for s in ("pruned", "failed") if counts[s]
    )  # only when a search pruned, or a job failed
    title = (
        f"{meta.get('campaign_file') or 'campaign'}: {meta.get('runs') or 0} run(s), "
        f"last {meta.get('state')}; jobs: {counts['done']} done, "
        + (f"{ended}, " if ended else "")
        + f"{counts['running']} unfinished, {counts['waiting']} waiting"
    )
    columns = [
        "job",
        "status",
        "progress",
        "node-h",
        "rescales",
        "runs",
        "resumed at",
        "result",
        "warnings",
    ]
    cells = []
    for row in rows:
        result = row.result or {}
        metric = next((f"{k}={v:.3f}" for k, v in result.items() if "acc" in k), "")
        cells.append(
            [
                row.name,
                row.status,
                progress_text(row, progress.get(row.name)),
                f"{row.node_seconds / 3600:.3f}",
                str(row.rescales),
                str(row.submissions),
                _fmt(row.resumed_from_step),
                metric or (row.error or "")[:60],
                str(len(row.warnings)) if row.warnings else "",
            ]
        )
    return fitted_table(
        title,
        best,
        columns,
        cells,
        width=width,
        optional=STATUS_OPTIONAL,
        left=columns,
        hint="`status --json` has them",
    )


__all__ = [
    "best_text",
    "fitted_table",
    "live_status",
    "live_table",
    "progress_text",
    "site_caption",
    "status_counts",
    "status_table",
]
