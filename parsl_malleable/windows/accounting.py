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
    # what an early yield costs beyond the lost work (the training job's scale-down, the poll
    # that delays the arriving native job); only the expected-harvest chooser uses it, the
    # accounting counts yields separately
    yield_penalty: float = 0.0

    def shortest(self) -> float:
        """The shortest predicted length that gets a block."""
        return max(self.min_block, self.startup)


class IdleTimeline:
    """Per-node idle intervals ``[start, end)`` of a replay, seen through ``[t0, t1]``.

    Nodes are integer ids. Intervals are clipped to the evaluation period; one that reaches
    ``t1`` is *censored*: the replay does not say how much longer it would have lasted, so a
    block cut there is not counted as over-predicted.
    """

    def __init__(
        self,
        node: np.ndarray,
        start: np.ndarray,
        end: np.ndarray,
        t0: float,
        t1: float,
    ) -> None:
        if not t1 > t0:
            raise ValueError(f"empty evaluation period [{t0}, {t1}]")
        start = np.maximum(np.asarray(start, dtype=float), t0)
        end = np.minimum(np.asarray(end, dtype=float), t1)
        keep = end > start
        node = np.asarray(node, dtype=np.int64)[keep]
        start, end = start[keep], end[keep]
        order = np.lexsort((start, node))
        self.t0, self.t1 = float(t0), float(t1)
        self.node = node[order]
        self.start = start[order]
        self.end = end[order]
        # one sorted key per interval: node id plus the start as a fraction of the period,
        # so a single searchsorted finds every queried node's interval at once
        self._scale = 1.0 / (self.t1 - self.t0 + 1.0)
        self._key = self.node + (self.start - self.t0) * self._scale

    def remaining(self, nodes: np.ndarray, t: float) -> np.ndarray:
        """Seconds each of ``nodes`` stays idle after ``t`` (0 where it is busy at ``t``)."""
        nodes = np.asarray(nodes, dtype=np.int64)
        if not len(self._key):
            return np.zeros(len(nodes))
        i = np.searchsorted(self._key, nodes + (t - self.t0) * self._scale, side="right") - 1
        i = np.maximum(i, 0)
        inside = (i >= 0) & (self.node[i] == nodes) & (self.start[i] <= t) & (self.end[i] > t)
        return np.where(inside, self.end[i] - t, 0.0)

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


class PolicyState:
    """Which nodes hold a block, and until when; and every block placed so far."""

    def __init__(self, n_nodes: int) -> None:
        self.block_until = np.full(n_nodes, -math.inf)
        self._predicted: list[np.ndarray] = []
        self._actual: list[np.ndarray] = []
        self._censored: list[np.ndarray] = []

    def free(self, nodes: np.ndarray, t: float) -> np.ndarray:
        """Which of ``nodes`` hold no block at ``t``."""
        return self.block_until[nodes] <= t

    def place(
        self,
        nodes: np.ndarray,
        t: float,
        lengths: np.ndarray,
        timeline: IdleTimeline,
        costs: BlockCosts,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Submit blocks of ``lengths`` at ``t`` on those of ``nodes`` that are idle, hold no
        block and have a prediction of at least :meth:`BlockCosts.shortest`.

        Returns ``(nodes, times)`` of the blocks that end while their node is still idle: the
        provider sees its block finish and decides again then.
        """
        nodes = np.asarray(nodes, dtype=np.int64)
        lengths = np.asarray(lengths, dtype=float)
        actual = timeline.remaining(nodes, t)
        ok = self.free(nodes, t) & (lengths >= costs.shortest()) & (actual > 0)
        nodes, lengths, actual = nodes[ok], lengths[ok], actual[ok]
        self._predicted.append(lengths)
        self._actual.append(actual)
        self._censored.append(t + actual >= timeline.t1)
        self.block_until[nodes] = t + np.minimum(lengths, actual)
        early = lengths < actual
        return nodes[early], t + lengths[early]

    def blocks(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(predicted, actual, censored)`` of every block placed."""
        if not self._predicted:
            return np.empty(0), np.empty(0), np.empty(0, dtype=bool)
        return (
            np.concatenate(self._predicted),
            np.concatenate(self._actual),
            np.concatenate(self._censored),
        )

    def summary(self, costs: BlockCosts) -> dict:
        """:func:`block_harvest` of every block placed."""
        predicted, actual, censored = self.blocks()
        return block_harvest(predicted, actual, costs, censored)
