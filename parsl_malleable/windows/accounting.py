"""What a block-per-prediction harvesting policy would have earned, and what an oracle would.

Model (see ``docs/windows.md``): at each decision time, every idle node that holds no block
gets a block of the predicted length ``L`` when ``L >= min_block``. The block starts at once,
occupies the node until ``min(L, A)`` where ``A`` is how long the node actually stayed idle,
and yields to the native job when ``A < L`` (over-prediction). Blocks yield, so harvesting never
delays a native job in this model: the replay is the same with and without blocks.

Per block: ``harvest = duration - startup - lost``, where ``lost`` is the work since the last
commit (``useful mod commit_interval``, ``useful = max(duration - startup, 0)``) and is charged
only when the block was cut short. A block that dies during its start-up harvests a negative
amount: many short blocks are not free. The oracle knows ``A`` and places one block per idle
interval longer than the start-up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class BlockCosts:
    """Costs charged to every block, in seconds of node time."""

    startup: float = 60.0
    commit_interval: float = 60.0
    min_block: float = 0.0  # shortest block worth submitting; at least the start-up

    def shortest(self) -> float:
        """The shortest predicted length that gets a block."""
        return max(self.min_block, self.startup)


class IdleTimeline:
    """Per-node idle intervals ``[start, end)`` of a replay, seen through ``[t0, t1]``.

    Intervals are clipped to the evaluation period; one that reaches ``t1`` is *censored*: the
    replay does not say how much longer it would have lasted, so a block cut there is not
    counted as over-predicted.
    """

    def __init__(
        self,
        node: np.ndarray,
        start: np.ndarray,
        end: np.ndarray,
        t0: float = -math.inf,
        t1: float = math.inf,
    ) -> None:
        start = np.maximum(np.asarray(start, dtype=float), t0)
        end = np.minimum(np.asarray(end, dtype=float), t1)
        keep = end > start
        node = np.asarray(node).astype(str)[keep]
        start, end = start[keep], end[keep]
        order = np.lexsort((start, node))
        self.t0, self.t1 = t0, t1
        self.node = node[order]
        self.start = start[order]
        self.end = end[order]
        names, first = np.unique(self.node, return_index=True)
        bounds = [*first.tolist(), len(self.node)]
        self._slices = {
            str(name): (bounds[i], bounds[i + 1]) for i, name in enumerate(names.tolist())
        }

    def remaining(self, node: str, t: float) -> float:
        """Seconds node ``node`` stays idle after ``t`` (0 when it is busy at ``t``)."""
        lo, hi = self._slices.get(node, (0, 0))
        if lo == hi:
            return 0.0
        i = lo + int(np.searchsorted(self.start[lo:hi], t, side="right")) - 1
        if i < lo or self.end[i] <= t:
            return 0.0
        return float(self.end[i] - t)

    def lengths(self) -> np.ndarray:
        """Lengths of all (clipped) idle intervals."""
        return self.end - self.start


def block_harvest(
    predicted: np.ndarray,
    actual: np.ndarray,
    costs: BlockCosts,
    censored: np.ndarray | None = None,
) -> dict:
    """Account blocks of length ``predicted`` on windows that lasted ``actual`` (arrays);
    ``censored`` marks windows cut by the end of the evaluation period, not by a native job."""
    predicted = np.asarray(predicted, dtype=float)
    actual = np.asarray(actual, dtype=float)
    duration = np.minimum(predicted, actual)
    over = actual < predicted
    if censored is not None:
        over &= ~np.asarray(censored, dtype=bool)
    useful = np.maximum(duration - costs.startup, 0.0)
    lost = np.where(over, np.mod(useful, costs.commit_interval), 0.0)
    harvest = duration - costs.startup - lost
    return {
        "blocks": len(predicted),
        "over_predicted": int(over.sum()),
        "node_seconds": float(duration.sum()),
        "lost": float(lost.sum()),
        "startup": float(np.minimum(duration, costs.startup).sum()),
        "harvest": float(harvest.sum()),
    }


def oracle_harvest(lengths: np.ndarray, costs: BlockCosts) -> float:
    """Node-seconds an oracle harvests: one block per idle interval longer than the start-up."""
    lengths = np.asarray(lengths, dtype=float)
    useful = lengths[lengths > costs.startup] - costs.startup
    return float(useful.sum())


@dataclass
class PolicyState:
    """Which nodes hold a block, and until when; and every block placed so far."""

    block_until: dict[str, float]
    predicted: list[float]
    actual: list[float]
    censored: list[bool]

    @classmethod
    def empty(cls) -> PolicyState:
        """No blocks yet."""
        return cls(block_until={}, predicted=[], actual=[], censored=[])

    def free(self, node: str, t: float) -> bool:
        """Whether ``node`` holds no block at ``t``."""
        return self.block_until.get(node, -math.inf) <= t

    def place(
        self, node: str, t: float, length: float, timeline: IdleTimeline, costs: BlockCosts
    ) -> None:
        """Submit a block of ``length`` on ``node`` at ``t`` if it is long enough."""
        if not length >= costs.shortest():
            return
        actual = timeline.remaining(node, t)
        if actual <= 0:
            return
        self.predicted.append(length)
        self.actual.append(actual)
        self.censored.append(t + actual >= timeline.t1)
        self.block_until[node] = t + min(length, actual)

    def summary(self, costs: BlockCosts) -> dict:
        """:func:`block_harvest` of every block placed."""
        return block_harvest(
            np.array(self.predicted), np.array(self.actual), costs, np.array(self.censored)
        )
