"""How many nodes the provider should hold: Parsl's slots, or a controller's decision.

The coupling to training jobs is one callable, ``demand(context) -> total nodes``. Without one
the provider fills every waiting Parsl slot with up to ``max_nodes_per_block`` nodes. With one
(for example :func:`allocator_demand`, which asks
:func:`~parsl_malleable.allocate.allocate` how many nodes the registered training jobs can use
in the predicted windows), it holds what the callable says. Either way the site profile's
``max_harvested_nodes`` caps the total.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from parsl_malleable.allocate.api import allocate
from parsl_malleable.allocate.spec import NodeWindow, TrainingJob
from parsl_malleable.harvest.ledger import BlockInfo
from parsl_malleable.snapshot import Snapshot
from parsl_malleable.windows.window import Window


@dataclass(frozen=True)
class DemandContext:
    """What a demand callable sees at one poll.

    ``windows``: the idle windows blocks could go into now; ``blocks``: our live blocks;
    ``held_nodes``: nodes those blocks hold or have asked for; ``node_cap``: the profile's cap.
    """

    snapshot: Snapshot
    windows: Sequence[Window]
    blocks: Sequence[BlockInfo]
    held_nodes: int
    node_cap: int


DemandFn = Callable[[DemandContext], int]


def allocator_demand(
    jobs: Callable[[], Sequence[TrainingJob]], **allocate_options: Any
) -> DemandFn:
    """A demand callable that asks the allocator how many nodes ``jobs()`` can use.

    ``jobs`` returns the training jobs registered now (each with the nodes it holds as
    ``current_nodes``); the answer is the total node count of the allocation, over the nodes
    our blocks hold plus the idle windows. ``allocate_options`` go to
    :func:`~parsl_malleable.allocate.allocate` (``objective``, ``solver``, ``time_limit``...).
    """

    def demand(ctx: DemandContext) -> int:
        current = list(jobs())
        if not current:
            return 0
        held = {n for job in current for n in job.current_nodes}
        free = [n for w in ctx.windows for n in w.nodes if n not in held]
        windows = [NodeWindow.ending_at(w.nodes, w.end, ctx.snapshot.now) for w in ctx.windows]
        for block in ctx.blocks:
            if block.deadline is not None:
                windows.append(NodeWindow.ending_at(block.nodes, block.deadline, ctx.snapshot.now))
        result = allocate(current, free, windows, node_cap=ctx.node_cap, **allocate_options)
        return result.total_nodes

    return demand


__all__ = ["DemandContext", "DemandFn", "allocator_demand"]
