"""Predicted idle windows, grouped so that each group can become one block."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Window:
    """Idle nodes that stay idle together from ``start`` until ``end``.

    ``confidence`` is the estimated probability that *every* node of the group is still idle
    at ``end`` taken one node at a time (the smallest of the nodes' probabilities). ``end`` is
    ``math.inf`` when no known job needs the nodes (the predictor caps it at its horizon).
    """

    nodes: tuple[str, ...]
    start: float
    end: float
    confidence: float

    @property
    def length(self) -> float:
        """Seconds from ``start`` to ``end``."""
        return self.end - self.start


def group_windows(
    names: Sequence[str],
    lengths: np.ndarray,
    samples: np.ndarray | None,
    start: float,
    *,
    rel_tol: float = 0.1,
    abs_tol: float = 300.0,
    min_length: float = 0.0,
) -> list[Window]:
    """Group nodes whose window lengths are close, shortest first.

    A group collects nodes whose length is within ``abs_tol + rel_tol * shortest`` of its
    shortest member, and gets that shortest length, so no node of the group is promised more
    than its own prediction. ``samples`` (``(k, len(names))`` sampled lengths) give each group's
    confidence; without them confidence is 1. Nodes shorter than ``min_length`` are left out.
    """
    lengths = np.asarray(lengths, dtype=float)
    order = np.argsort(lengths, kind="stable")
    windows: list[Window] = []
    i = 0
    while i < len(order):
        first = lengths[order[i]]
        if first < min_length:
            i += 1
            continue
        limit = first + abs_tol + rel_tol * first if math.isfinite(first) else math.inf
        j = i
        while j < len(order) and lengths[order[j]] <= limit:
            j += 1
        members = order[i:j]
        if samples is not None and samples.shape[0]:
            confidence = float(np.min(np.mean(samples[:, members] >= first, axis=0)))
        else:
            confidence = 1.0
        windows.append(
            Window(
                nodes=tuple(names[k] for k in members),
                start=start,
                end=float(start + first),
                confidence=confidence,
            )
        )
        i = j
    return windows
