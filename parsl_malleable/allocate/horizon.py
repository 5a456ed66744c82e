"""Group nodes into horizon classes by how long their idle window is predicted to last.

The allocator plans over segments ``[0, d_1], [d_1, d_2], ..., [d_{S-1}, d_S]`` where
``d_1 < ... < d_S`` are the (conservative) window lengths of the classes: a node of class ``b``
is usable in segments ``1..b`` only.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from parsl_malleable.allocate.errors import AllocationInputError
from parsl_malleable.allocate.spec import NodeWindow, TrainingJob


@dataclass(frozen=True)
class HorizonClasses:
    """Nodes bucketed by remaining window.

    ``ends[b]`` is the end (seconds from now) of class ``b``, increasing; ``free[b]`` the free
    node ids of class ``b``; ``held[job][b]`` the ids job holds in class ``b``; ``remaining``
    each usable node's predicted window (capped at the horizon); ``gone`` maps each job to held
    nodes whose window has already ended (they are treated as lost).
    """

    ends: tuple[float, ...]
    free: tuple[tuple[str, ...], ...]
    held: dict[str, tuple[tuple[str, ...], ...]]
    remaining: dict[str, float]
    gone: dict[str, tuple[str, ...]]

    @property
    def horizon_s(self) -> float:
        """Length of the whole plan (the longest class)."""
        return self.ends[-1] if self.ends else 0.0

    @property
    def lengths(self) -> tuple[float, ...]:
        """Length of each segment."""
        if not self.ends:
            return ()
        starts = (0.0, *self.ends[:-1])
        return tuple(e - s for s, e in zip(starts, self.ends, strict=True))

    def capacity(self, b: int) -> int:
        """All nodes (free and held) in class ``b``."""
        return len(self.free[b]) + sum(len(h[b]) for h in self.held.values())


def _remaining_by_node(
    windows: Iterable[NodeWindow], default_s: float, nodes: Iterable[str]
) -> dict[str, float]:
    remaining: dict[str, float] = {}
    for window in windows:
        for node in window.nodes:
            # A node listed in two windows keeps the shorter one: the conservative reading.
            remaining[node] = min(window.remaining_s, remaining.get(node, window.remaining_s))
    return {node: remaining.get(node, default_s) for node in nodes}


# Candidate class ends tried by the search: more is slower (quadratic) and gains little, since
# a node's planned stay is rounded down to the nearest candidate at most.
MAX_CANDIDATES = 256


def _candidates(values: np.ndarray) -> np.ndarray:
    """Distinct window lengths, thinned to evenly spaced ranks when there are too many."""
    distinct = np.unique(values)
    if len(distinct) <= MAX_CANDIDATES:
        return distinct
    ranks = np.linspace(0, len(values) - 1, MAX_CANDIDATES).round().astype(int)
    return np.unique(np.sort(values)[ranks])


def _class_ends(values: Sequence[float], max_classes: int) -> list[float]:
    """At most ``max_classes`` class ends that keep the most planned node-seconds.

    A node is planned to stay until the largest end at or below its window, so every end is
    some node's window and choosing them is a small dynamic programme over the sorted
    candidates: ``best[k][i]`` is the most node-seconds nodes with windows ``>= c[i]`` can keep
    with ``k`` ends, the first at ``c[i]``. Equal-population groups (the earlier rule) planned a
    whole class to its shortest member: with Summit's heavy-tailed windows, a 1.5 s window set
    the end of a quarter of the nodes that stayed up to 7 minutes.
    """
    if not values:
        return []
    array = np.asarray(values, dtype=float)
    distinct = np.unique(array)
    if len(distinct) <= max_classes:
        return distinct.tolist()
    cand = _candidates(array)
    # at_least[i]: nodes whose window reaches candidate i
    at_least = len(array) - np.searchsorted(np.sort(array), cand, side="left")
    size = len(cand)
    later = np.triu(np.ones((size, size), dtype=bool), k=1)  # later[i, j]: j > i
    gain = cand[:, None] * (at_least[:, None] - at_least[None, :])  # c_i kept until c_j
    best = cand * at_least  # one end, at candidate i
    choice = []
    for _ in range(max_classes - 1):
        total = np.where(later, gain + best[None, :], -np.inf)
        nxt = np.argmax(total, axis=1)
        keep = total[np.arange(size), nxt] > best
        choice.append(np.where(keep, nxt, -1))
        best = np.where(keep, total[np.arange(size), nxt], best)
    first = int(np.argmax(best))
    ends, i = [float(cand[first])], first
    for step in reversed(choice):
        if step[i] < 0:
            break
        i = int(step[i])
        ends.append(float(cand[i]))
    return ends


def classify(
    jobs: Sequence[TrainingJob],
    free_nodes: Sequence[str],
    windows: Iterable[NodeWindow],
    *,
    default_window_s: float,
    max_horizon_s: float,
    max_classes: int,
) -> HorizonClasses:
    """Bucket free and held nodes into at most ``max_classes`` horizon classes.

    A node's class end is the shortest window in its class (a node is never assumed to stay
    longer than predicted); the ends are chosen to keep the most planned node-seconds, and free
    nodes shorter than the first end are left out of the plan. Windows are capped at
    ``max_horizon_s``. Nodes without a window stay ``default_window_s``.
    """
    if max_classes < 1:
        raise AllocationInputError(f"max_classes must be >= 1, got {max_classes}")
    if max_horizon_s <= 0 or default_window_s <= 0:
        raise AllocationInputError("max_horizon_s and default_window_s must be > 0")
    owner: dict[str, str] = {}
    for job in jobs:
        for node in job.current_nodes:
            if node in owner:
                raise AllocationInputError(
                    f"node {node!r} is held by both job {owner[node]!r} and job {job.name!r}"
                )
            owner[node] = job.name
    free = list(dict.fromkeys(free_nodes))
    if len(free) != len(free_nodes):
        raise AllocationInputError("free_nodes lists a node twice")
    for node in free:
        if node in owner:
            raise AllocationInputError(
                f"node {node!r} is free but also held by job {owner[node]!r}"
            )
    every = [*free, *owner]
    remaining = {
        n: min(r, max_horizon_s)
        for n, r in _remaining_by_node(windows, default_window_s, every).items()
    }
    usable = {n: r for n, r in remaining.items() if r > 0}
    ends = _class_ends(list(usable.values()), max_classes)
    held_nodes = set(owner)
    if ends and any(r < ends[0] for n, r in usable.items() if n in held_nodes):
        # A job's node is never dropped from the plan for being short: an extra class ends
        # with the shortest such window (the job shrinks then, not now).
        ends.insert(0, min(r for r in usable.values()))
    # Nodes whose window ends before the first class are left out of the plan (they stay free).
    usable = {n: r for n, r in usable.items() if ends and r >= ends[0]}

    def class_of(r: float) -> int:
        return bisect.bisect_right(ends, r) - 1

    node_class = {n: class_of(r) for n, r in usable.items()}

    def bucket(nodes: Iterable[str]) -> tuple[tuple[str, ...], ...]:
        groups: list[list[str]] = [[] for _ in ends]
        for node in nodes:
            if node in node_class:
                groups[node_class[node]].append(node)
        return tuple(tuple(g) for g in groups)

    # The class end is its shortest member, so a node's planned stay never exceeds its window.
    grouped = bucket(every)
    ends = [min(usable[n] for n in g) for g in grouped]
    held = {job.name: bucket(job.current_nodes) for job in jobs}
    gone = {
        job.name: tuple(n for n in job.current_nodes if n not in usable)
        for job in jobs
        if any(n not in usable for n in job.current_nodes)
    }
    return HorizonClasses(tuple(ends), bucket(free), held, usable, gone)
