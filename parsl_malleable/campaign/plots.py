"""The two pictures of a campaign: nodes per job over time, and the site's nodes over time."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: the driver may run on a login node with no display
import matplotlib.pyplot as plt

JobSample = tuple[float, int, str, int, int, float | None, str]
SiteSample = tuple[float, int, int, int, int, int, int]


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


def plot_gantt(samples: Sequence[JobSample], started: float, path: Path) -> Path:
    """Which job trained on which node when: one row per node, one colour per job."""
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
    jobs = sorted({job for _, job in bars})
    colours = plt.get_cmap("tab20")
    fig, ax = plt.subplots(figsize=(10, 1.2 + 0.45 * max(1, len(nodes))))
    for (node, job), spans in bars.items():
        ax.broken_barh(
            _merge(spans),
            (nodes.index(node) - 0.4, 0.8),
            color=colours(jobs.index(job) % 20),
            label=job,
        )
    _run_starts(ax, [k for k in keys], started)
    ax.set_xlim(left=0)
    ax.set_yticks(range(len(nodes)), nodes)
    ax.set_xlabel("seconds since the campaign started")
    ax.set_title("nodes per job (training ranks)")
    handles = {h.get_label(): h for h in ax.get_children() if h.get_label() in jobs}
    if handles:
        ax.legend(
            [handles[j] for j in jobs if j in handles],
            [j for j in jobs if j in handles],
            loc="upper left",
            bbox_to_anchor=(1.01, 1),
            fontsize="small",
        )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
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


def plot_nodes(
    samples: Sequence[SiteSample], started: float, fraction: float | None, path: Path
) -> Path:
    """Stacked nodes over time: native, training, harvested but not training, idle."""
    fig, ax = plt.subplots(figsize=(10, 3.6))
    if samples:
        t = [s[0] - started for s in samples]
        native = [s[3] for s in samples]
        training = [s[5] for s in samples]
        spare = [s[4] - s[5] for s in samples]
        idle = [s[6] for s in samples]
        ax.stackplot(
            t,
            native,
            training,
            spare,
            idle,
            labels=["native jobs", "harvested: training", "harvested: not training", "idle"],
            colors=["#9e9e9e", "#2e7d32", "#a5d6a7", "#ffcc80"],
            step="post",
        )
        ax.set_ylim(0, max(s[2] for s in samples))
        ax.set_xlim(left=0)
        _run_starts(ax, [(s[0], s[1]) for s in samples], started)
    share = f" (harvest fraction {fraction:.0%})" if fraction is not None else ""
    ax.set_title("the site's nodes over time" + share)
    ax.set_xlabel("seconds since the campaign started")
    ax.set_ylabel("nodes")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


__all__ = ["plot_gantt", "plot_nodes"]
