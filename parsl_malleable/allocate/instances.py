"""Reproducible allocation instances built from the shared FreeTrain/BFTrainer data.

Used by tests and ``benchmarks/bench_allocate.py``: real scaling curves and costs, node windows
drawn from the Summit idle-interval trace, and a current allocation in which some jobs already
run.
"""

from __future__ import annotations

import csv
import math
import random
from dataclasses import dataclass, replace
from pathlib import Path

from parsl_malleable.allocate.spec import NodeWindow, TrainingJob
from parsl_malleable.errors import TraceFormatError
from parsl_malleable.traces._io import open_text


@dataclass(frozen=True)
class Instance:
    """Inputs of one ``allocate`` call."""

    jobs: list[TrainingJob]
    free_nodes: list[str]
    windows: list[NodeWindow]


def summit_remaining_windows(path: str | Path, count: int, seed: int = 0) -> list[float]:
    """``count`` remaining idle times (s) seen at a random moment in the Summit trace.

    An idle node observed at a random time sits in an interval chosen with probability
    proportional to its length, at a uniform point inside it.
    """
    path = Path(path)
    lengths: list[float] = []
    try:
        with open_text(path, newline="") as handle:  # plain or gzip, whatever the name says
            reader = csv.DictReader(handle)
            for line, row in enumerate(reader, start=2):
                try:
                    lengths.append(float(row["idle_end"]) - float(row["idle_start"]))
                except (KeyError, TypeError, ValueError) as exc:
                    raise TraceFormatError(path, line, f"bad idle interval: {exc}") from exc
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise TraceFormatError(path, None, f"cannot read: {exc}") from None
    if not any(span > 0 for span in lengths):
        raise TraceFormatError(path, None, "no idle interval longer than 0 s: nothing to draw from")
    if not all(math.isfinite(span) and span >= 0 for span in lengths):
        bad = next(i for i, span in enumerate(lengths) if not (math.isfinite(span) and span >= 0))
        raise TraceFormatError(path, bad + 2, "idle_end must be finite and >= idle_start")
    rng = random.Random(seed)  # noqa: S311 - reproducible sampling, not security
    picked = rng.choices(lengths, weights=lengths, k=count)
    return [rng.uniform(0.0, span) for span in picked]


def make_instance(
    jobs: list[TrainingJob],
    n_nodes: int,
    remaining: list[float] | None = None,
    *,
    running_fraction: float = 0.5,
    seed: int = 0,
) -> Instance:
    """``n_nodes`` nodes; about ``running_fraction`` of them held by the first jobs.

    ``remaining`` gives each node's window (nodes without one get no window); windows are
    grouped per distinct whole minute so that the predictor-style input stays small.
    """
    rng = random.Random(seed)  # noqa: S311 - reproducible sampling, not security
    nodes = [f"n{i:05d}" for i in range(n_nodes)]
    order = nodes[:]
    rng.shuffle(order)
    budget = int(n_nodes * running_fraction)
    out: list[TrainingJob] = []
    taken = 0
    for job in jobs:
        size = rng.randint(job.min_nodes, job.max_nodes)
        if taken + size <= budget:
            out.append(replace(job, current_nodes=tuple(order[taken : taken + size])))
            taken += size
        else:
            out.append(job)
    windows: list[NodeWindow] = []
    if remaining is not None:
        groups: dict[int, list[str]] = {}
        for node, span in zip(nodes, remaining, strict=False):
            groups.setdefault(int(span // 60), []).append(node)
        windows = [NodeWindow(tuple(g), 60.0 * m) for m, g in sorted(groups.items())]
    return Instance(out, order[taken:], windows)
