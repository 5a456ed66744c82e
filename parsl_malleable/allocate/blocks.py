"""Block sizing: turn an allocation and the predicted windows into block requests.

A block is ``nodes x walltime``. Its walltime is the predicted window minus a safety margin
(so the block ends before the node is needed back), rounded down to the scheduler's
granularity. A block shorter than its minimum useful length (start-up plus rescale costs) is
not requested: the job would spend it all getting ready.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from parsl_malleable.allocate.errors import AllocationInputError
from parsl_malleable.allocate.result import Allocation, BlockRequest
from parsl_malleable.allocate.spec import NodeWindow, TrainingJob


def _walltime(window_s: float, safety_margin_s: float, granularity_s: float) -> float:
    usable = window_s - safety_margin_s
    return math.floor(usable / granularity_s) * granularity_s if usable > 0 else 0.0


def _check(safety_margin_s: float, granularity_s: float, max_nodes_per_block: int | None) -> None:
    if safety_margin_s < 0:
        raise AllocationInputError(f"safety_margin_s must be >= 0, got {safety_margin_s}")
    if granularity_s <= 0:
        raise AllocationInputError(f"granularity_s must be > 0, got {granularity_s}")
    if max_nodes_per_block is not None and max_nodes_per_block < 1:
        raise AllocationInputError(f"max_nodes_per_block must be >= 1, got {max_nodes_per_block}")


def _split(
    nodes: Sequence[str], walltime: float, window: float, job: str, limit: int | None
) -> list[BlockRequest]:
    step = limit or len(nodes)
    return [
        BlockRequest(len(chunk), walltime, job, tuple(chunk), window)
        for chunk in (nodes[i : i + step] for i in range(0, len(nodes), step))
    ]


def size_blocks(
    allocation: Allocation,
    *,
    jobs: Iterable[TrainingJob] = (),
    startup_s: float = 60.0,
    min_useful_s: float | None = None,
    safety_margin_s: float = 60.0,
    granularity_s: float = 60.0,
    max_nodes_per_block: int | None = None,
) -> list[BlockRequest]:
    """Blocks for the nodes each job gains in ``allocation`` (nodes it keeps have blocks).

    Added nodes of a job with the same walltime share a block. The minimum useful length is
    ``min_useful_s`` if given, else ``startup_s`` plus the job's scale-up and scale-down costs
    (when ``jobs`` are given), else ``startup_s``.
    """
    _check(safety_margin_s, granularity_s, max_nodes_per_block)
    costs: Mapping[str, float] = {job.name: job.scale_up_cost + job.scale_down_cost for job in jobs}
    blocks: list[BlockRequest] = []
    for name, added in allocation.added.items():
        useful = min_useful_s if min_useful_s is not None else startup_s + costs.get(name, 0.0)
        groups: dict[float, list[str]] = defaultdict(list)
        windows: dict[float, float] = {}
        for node in added:
            window = allocation.node_window.get(node, allocation.horizon_s)
            walltime = _walltime(window, safety_margin_s, granularity_s)
            groups[walltime].append(node)
            windows[walltime] = min(window, windows.get(walltime, window))
        for walltime in sorted(groups, reverse=True):
            if walltime >= useful and walltime > 0:
                blocks.extend(
                    _split(groups[walltime], walltime, windows[walltime], name, max_nodes_per_block)
                )
    return blocks


def size_blocks_for_demand(
    demand: int,
    windows: Sequence[NodeWindow],
    *,
    min_useful_s: float,
    safety_margin_s: float = 60.0,
    granularity_s: float = 60.0,
    max_nodes_per_block: int | None = None,
) -> list[BlockRequest]:
    """Blocks for ``demand`` nodes of any job, taken from the longest windows first."""
    _check(safety_margin_s, granularity_s, max_nodes_per_block)
    if demand < 0:
        raise AllocationInputError(f"demand must be >= 0 nodes, got {demand}")
    blocks: list[BlockRequest] = []
    left = demand
    for window in sorted(windows, key=lambda w: -w.remaining_s):
        walltime = _walltime(window.remaining_s, safety_margin_s, granularity_s)
        if left == 0 or walltime < min_useful_s or walltime <= 0:
            break
        take = list(window.nodes[:left])
        left -= len(take)
        if take:
            blocks.extend(_split(take, walltime, window.remaining_s, "", max_nodes_per_block))
    return blocks
