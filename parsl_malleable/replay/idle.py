"""Per-node idle timelines the replay harvests: the Summit trace, or any simulated job trace."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from parsl_malleable.errors import TraceFormatError
from parsl_malleable.sim.trace_replay import SimResult, node_name
from parsl_malleable.traces.idle import read_idle_intervals


@dataclass(frozen=True)
class IdleTimeline:
    """Idle intervals ``[start, end)`` of integer nodes ``0..len(names)-1``, seen in ``[t0, t1]``.

    An interval that reaches ``t1`` is cut there (the replay ends; nothing is known after it).
    ``overlaps_merged`` counts input intervals that overlapped an earlier one of their node and
    were merged into it (each idle node-second is counted once); :meth:`build` also says so
    in ``source``, which the replay prints and stores with its results.
    """

    names: tuple[str, ...]
    node: np.ndarray
    start: np.ndarray
    end: np.ndarray
    t0: float
    t1: float
    source: str = ""
    overlaps_merged: int = 0

    @classmethod
    def build(
        cls,
        names: tuple[str, ...],
        node: np.ndarray,
        start: np.ndarray,
        end: np.ndarray,
        source: str = "",
        t0: float | None = None,
        t1: float | None = None,
    ) -> IdleTimeline:
        """Clip to ``[t0, t1]`` (default: the intervals' own span), drop empty intervals and
        merge touching ones of one node (a node idle on both sides of an instant never left).

        Overlapping intervals of one node (a damaged or concatenated file) are merged too, also
        when they chain (``[0, 200)``, ``[50, 100)``, ``[150, 300)`` is 300 s, not 350 s); they
        are counted in ``overlaps_merged`` and named in ``source``.
        """
        start = np.asarray(start, dtype=float)
        end = np.asarray(end, dtype=float)
        node = np.asarray(node, dtype=np.int64)
        lo = float(start.min()) if t0 is None else t0
        hi = float(end.max()) if t1 is None else t1
        start, end = np.maximum(start, lo), np.minimum(end, hi)
        keep = end > start
        node, start, end = node[keep], start[keep], end[keep]
        order = np.lexsort((start, node))
        node, start, end = node[order], start[order], end[order]
        # the latest end so far on each node: an interval may reach past its next neighbour
        reach = pd.Series(end).groupby(node).cummax().to_numpy()
        same = node[1:] == node[:-1]
        joined = np.zeros(len(node), dtype=bool)
        joined[1:] = same & (start[1:] <= reach[:-1])
        overlaps = int(np.count_nonzero(same & (start[1:] < reach[:-1])))
        if joined.any():
            end = np.maximum.reduceat(end, np.flatnonzero(~joined))
            node, start = node[~joined], start[~joined]
        if overlaps:
            source += f" ({overlaps:,} overlapping idle intervals merged)"
        return cls(names, node, start, end, lo, hi, source, overlaps)

    @property
    def nodes(self) -> int:
        """Nodes of the machine (idle at some time or not)."""
        return len(self.names)

    def idle_node_seconds(self) -> float:
        """Node-seconds idle in the whole timeline."""
        return float((self.end - self.start).sum())

    def window(self, t0: float, t1: float) -> IdleTimeline:
        """The part of the timeline inside ``[t0, t1]`` (keeping ``overlaps_merged``)."""
        cut = IdleTimeline.build(self.names, self.node, self.start, self.end, self.source, t0, t1)
        return replace(cut, overlaps_merged=self.overlaps_merged)

    def first_nodes(self, count: int) -> IdleTimeline:
        """Only nodes ``0..count-1`` (FreeTrain's replayer evaluates node subsets this way)."""
        keep = self.node < count
        return IdleTimeline(
            self.names[:count],
            self.node[keep],
            self.start[keep],
            self.end[keep],
            self.t0,
            self.t1,
            self.source,
            self.overlaps_merged,
        )


def as_blocks(timeline: IdleTimeline, walltime_s: float) -> IdleTimeline:
    """``timeline`` as the live provider serves it: every idle interval cut into blocks of at
    most ``walltime_s`` seconds, back to back (a hole longer than a block's walltime is held by
    one block after another; each is a new start for the job on it). The pieces of one interval
    touch, so they are not merged again (``IdleTimeline.build`` would join them)."""
    if not walltime_s > 0:
        raise ValueError(f"walltime_s must be > 0; got {walltime_s}")
    pieces = np.ceil((timeline.end - timeline.start) / walltime_s).astype(np.int64)
    first = np.repeat(np.cumsum(pieces) - pieces, pieces)
    k = np.arange(int(pieces.sum())) - first  # the piece's index within its interval
    start = np.repeat(timeline.start, pieces) + k * walltime_s
    end = np.minimum(start + walltime_s, np.repeat(timeline.end, pieces))
    return replace(
        timeline,
        node=np.repeat(timeline.node, pieces),
        start=start,
        end=end,
        source=f"{timeline.source} (blocks of at most {walltime_s:g} s)",
    )


def load_idle_intervals(path: str | Path) -> IdleTimeline:
    """``node,idle_start,idle_end`` rows (plain or gzip CSV, Unix seconds), as in the Summit
    trace, read by :func:`~parsl_malleable.traces.idle.read_idle_intervals`; nodes are numbered
    in order of first appearance."""
    frame = read_idle_intervals(path)
    if frame.empty:
        raise TraceFormatError(Path(path), None, "no idle interval")
    node, names = pd.factorize(frame["node"])
    return IdleTimeline.build(
        tuple(names),
        node,
        frame["idle_start"].to_numpy(),
        frame["idle_end"].to_numpy(),
        source=Path(path).name,
    )


def idle_from_sim(result: SimResult, source: str = "") -> IdleTimeline:
    """The idle intervals of a simulated schedule (clipped to its statistics window)."""
    node, start, end = result.idle_arrays()
    names = tuple(node_name(i, result.nodes) for i in range(result.nodes))
    if not len(node):
        raise TraceFormatError(source or "simulation", None, "the schedule has no idle node")
    return IdleTimeline.build(names, node, start, end, source=source)


__all__ = ["IdleTimeline", "as_blocks", "idle_from_sim", "load_idle_intervals"]
