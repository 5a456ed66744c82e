"""The pictures of a campaign: nodes per job over time, the site's nodes over time, and the
learning curves (a reported metric against the step, per job)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: the driver may run on a login node with no display
import matplotlib.pyplot as plt

from parsl_malleable.campaign.sample import SiteSample, stepping_nodes

JobSample = tuple[float, int, str, int, int, float | None, str]

# One hue per job, not tab20's dark and light pairs (two jobs in shades of one hue read as
# one): tab10 with its brown (a darker red) and grey (no hue) swapped for an indigo and a sea
# green; any two of the ten are at least 19 degrees of hue apart. Past ten jobs the colours
# come round again with another line style (curves) and hatch (Gantt bars).
JOB_COLOURS = (
    "#1f77b4",  # blue
    "#ff7f0e",  # orange
    "#2ca02c",  # green
    "#d62728",  # red
    "#9467bd",  # purple
    "#e377c2",  # pink
    "#bcbd22",  # olive
    "#3b4cc0",  # indigo
    "#20a070",  # sea green
    "#17becf",  # cyan
)
LINE_STYLES = ("-", "--", ":", "-.")
HATCHES = ("", "//", "..", "xx")


def job_style(index: int) -> tuple[str, str, str]:
    """The ``(colour, line style, hatch)`` of the campaign's ``index``-th job (from 0): a hue
    of its own among the first ten, then the same hues with the next line style and hatch."""
    if index < 0:
        raise ValueError(f"job index {index}: must be 0 or more")
    colour = JOB_COLOURS[index % len(JOB_COLOURS)]
    turn = index // len(JOB_COLOURS)
    return colour, LINE_STYLES[turn % len(LINE_STYLES)], HATCHES[turn % len(HATCHES)]


def job_places(jobs: Sequence[str], drawn: Iterable[str]) -> dict[str, int]:
    """The index of each job ``drawn`` for :func:`job_style`: its place among the campaign's
    ``jobs``, so that a job has the same colour in every picture; a job not listed there (a
    folder's older campaign) after them, by name."""
    order = list(dict.fromkeys(jobs))
    order += sorted(set(drawn) - set(order))
    return {job: i for i, job in enumerate(order)}


def _intervals(times: Sequence[float], runs: Sequence[int], default: float) -> list[float]:
    """How long each sample stands for: until the next sample of the same run."""
    out = []
    for i, t in enumerate(times):
        nxt = i + 1
        if nxt < len(times) and runs[nxt] == runs[i]:
            out.append(times[nxt] - t)
        else:
            out.append(default)
    return out


def plot_gantt(
    samples: Sequence[JobSample], started: float, path: Path, jobs: Sequence[str] = ()
) -> Path:
    """Which job trained on which node when: one row per node, one colour per job (``jobs``:
    the campaign's jobs in order, which fixes each job's colour as in :func:`plot_curves`)."""
    by_time: dict[tuple[float, int], list[tuple[str, str]]] = defaultdict(list)
    for t, run, job, _nodes, _world, _rate, names in samples:
        by_time[(t, run)].append((job, names))
    keys = sorted(by_time)
    lengths = _intervals([k[0] for k in keys], [k[1] for k in keys], 1.0)
    bars: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for (t, _run), dt in zip(keys, lengths, strict=True):
        for job, names in by_time[(t, _run)]:
            for node in filter(None, names.split(",")):
                bars[(node, job)].append((t - started, dt))
    nodes = sorted({node for node, _ in bars})
    places = job_places(jobs, {job for _, job in bars})
    shown = sorted({job for _, job in bars}, key=places.__getitem__)
    fig, ax = plt.subplots(figsize=(10, 1.2 + 0.45 * max(1, len(nodes))))
    for (node, job), spans in bars.items():
        colour, _, hatch = job_style(places[job])
        ax.broken_barh(
            _merge(spans),
            (nodes.index(node) - 0.4, 0.8),
            facecolor=colour,
            edgecolor="white" if hatch else colour,  # the hatch is drawn in the edge colour
            hatch=hatch,
            label=job,
        )
    _run_starts(ax, [k for k in keys], started)
    ax.set_xlim(left=0)
    ax.set_yticks(range(len(nodes)), nodes)
    ax.set_xlabel("seconds since the campaign started")
    ax.set_title("nodes per job (training ranks)")
    handles = {h.get_label(): h for h in ax.get_children() if h.get_label() in shown}
    if handles:
        ax.legend(
            [handles[j] for j in shown if j in handles],
            [j for j in shown if j in handles],
            loc="upper left",
            bbox_to_anchor=(1.01, 1),
            fontsize="small",
        )
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    finally:  # a failed save (a folder in its place) must not keep the figure open
        plt.close(fig)
    return path


def _merge(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Join touching (start, length) spans so the bar is drawn once."""
    out: list[list[float]] = []
    for start, length in sorted(spans):
        if out and start <= out[-1][0] + out[-1][1] + 1e-6:
            out[-1][1] = max(out[-1][1], start + length - out[-1][0])
        else:
            out.append([start, length])
    return [(s, n) for s, n in out]


def _run_starts(ax: plt.Axes, keys: Sequence[tuple[float, int]], started: float) -> None:
    seen: set[int] = set()
    for t, run in keys:
        if run not in seen:
            if seen:
                ax.axvline(t - started, color="grey", linestyle="--", linewidth=1)
                ax.text(t - started, ax.get_ylim()[1], f" run {run}", va="bottom", fontsize=8)
            seen.add(run)


def plot_curves(
    series: dict[str, list[tuple[int, float]]], name: str, jobs: Sequence[str], path: Path
) -> Path:
    """Metric ``name`` against the step, one line per job in ``series`` (NaN and infinities
    left out of the line); ``jobs``: the campaign's jobs in order, which fixes each job's
    colour."""
    places = job_places(jobs, series)
    fig, ax = plt.subplots(figsize=(10, 4))
    for job in sorted(series, key=places.__getitem__):
        points = [(s, v) for s, v in series[job] if math.isfinite(v)]
        if points:
            steps, values = zip(*points, strict=True)
            colour, style, _ = job_style(places[job])
            ax.plot(steps, values, color=colour, linestyle=style, label=job, linewidth=1.2)
    ax.set_xlabel("step")
    ax.set_ylabel(name)
    ax.set_title(f"{name} per job (as reported; each step from the committed timeline)")
    if ax.get_lines():
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    finally:  # a failed save (a folder in its place) must not keep the figure open
        plt.close(fig)
    return path


# A sample stands for the time until the next one (1 s apart). Farther apart than this, or in
# another run, nobody sampled in between: a dead or stopped driver, drawn as a gap.
GAP_S = 10.0
NODE_COLOURS = ["#9e9e9e", "#2e7d32", "#a5d6a7", "#cfd8dc", "#e8f5e9", "#ffcc80"]
NODE_LABELS = [
    "native jobs",
    "harvested: in training steps",
    "harvested: ranks, no step (starting, rescaling, draining)",
    "harvested: ranks, steps not counted",
    "harvested: no job",
    "idle",
]
UNCOUNTED = 3  # the layer of samples written before steps were counted: labelled only if any


def node_segments(samples: Sequence[SiteSample], gap_s: float = GAP_S) -> list[list[SiteSample]]:
    """``samples`` cut where no driver sampled: at a new run, or a pause longer than ``gap_s``
    (the time between a killed driver and its resume knows nothing of the site)."""
    segments: list[list[SiteSample]] = []
    for sample in samples:
        last = segments[-1][-1] if segments else None
        if last is None or sample[1] != last[1] or sample[0] - last[0] > gap_s:
            segments.append([sample])
        else:
            segments[-1].append(sample)
    return segments


def _segment_end(segment: Sequence[SiteSample]) -> float:
    """Where the segment's last sample stops standing: one sample interval after it."""
    if len(segment) < 2:
        return segment[-1][0] + 1.0
    steps = sorted(b[0] - a[0] for a, b in pairwise(segment))
    return segment[-1][0] + steps[len(steps) // 2]


def draw_nodes(ax: plt.Axes, samples: Sequence[SiteSample], started: float) -> list[Any]:
    """Stack the site's nodes on ``ax``, one stack per stretch a driver sampled (gaps stay
    empty); the artists drawn."""
    drawn: list[Any] = []
    previous_end: float | None = None
    labels = list(NODE_LABELS)
    if all(s[7] is not None for s in samples):
        labels[UNCOUNTED] = "_nolegend_"  # every sample counted steps: no such layer to name
    for i, segment in enumerate(node_segments(samples)):
        if previous_end is not None and segment[0][0] - started > previous_end:
            ax.axvspan(
                previous_end,
                segment[0][0] - started,
                facecolor="none",
                edgecolor="#d0d0d0",
                hatch="//",
                linewidth=0,
                label="no driver ran" if i == 1 else "_nolegend_",
            )
        end = _segment_end(segment) - started
        previous_end = end
        t = [s[0] - started for s in segment] + [end]
        # Nodes in steps are a mean over each interval; ranks can step on a node the
        # controller has just taken back (until their commit), so no layer goes below zero.
        stepping = stepping_nodes(segment)
        rows: list[list[float]] = [[], [], [], [], [], []]
        for sample, nodes in zip(segment, stepping, strict=True):
            assigned = float(sample[5])
            counted = min(assigned, nodes) if nodes is not None else 0.0
            rows[0].append(float(sample[3]))
            rows[1].append(counted)
            rows[2].append(assigned - counted if nodes is not None else 0.0)
            rows[UNCOUNTED].append(assigned if nodes is None else 0.0)
            rows[4].append(float(sample[4] - sample[5]))
            rows[5].append(float(sample[6]))
        drawn += ax.stackplot(
            t,
            *[row + row[-1:] for row in rows],  # step="post": the last value lasts to `end`
            labels=labels if i == 0 else ["_nolegend_"] * len(labels),
            colors=NODE_COLOURS,
            step="post",
        )
    return drawn


def plot_nodes(
    samples: Sequence[SiteSample],
    started: float,
    fraction: float | None,
    path: Path,
    *,
    training: float | None = None,
) -> Path:
    """Stacked nodes over time: native; harvested in training steps, holding ranks that made
    no step, held by no job; idle; blank where no driver ran (between a killed run and its
    resume). ``fraction`` (the harvest fraction) and ``training`` (node-seconds in steps /
    harvested) go in the title when known."""
    fig, ax = plt.subplots(figsize=(10, 3.6))
    if samples:
        draw_nodes(ax, samples, started)
        ax.set_ylim(0, max(s[2] for s in samples))
        ax.set_xlim(left=0)
        _run_starts(ax, [(s[0], s[1]) for s in samples], started)
    shares = [f"harvest fraction {fraction:.0%}"] if fraction is not None else []
    if training is not None:
        shares.append(f"in training steps {training:.0%} of harvested")
    share = f"\n({', '.join(shares)})" if shares else ""  # its own line: the legend takes room
    ax.set_title("the site's nodes over time" + share)
    ax.set_xlabel("seconds since the campaign started")
    ax.set_ylabel("nodes")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    finally:  # a failed save (a folder in its place) must not keep the figure open
        plt.close(fig)
    return path


__all__ = [
    "GAP_S",
    "JOB_COLOURS",
    "draw_nodes",
    "job_places",
    "job_style",
    "node_segments",
    "plot_curves",
    "plot_gantt",
    "plot_nodes",
]
