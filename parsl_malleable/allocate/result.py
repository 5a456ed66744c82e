"""Outputs of the allocator: the allocation and the blocks to request."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Allocation:
    """Nodes per job decided by :func:`parsl_malleable.allocate.allocate`.

    ``nodes[j]`` is the new count of job ``j``, ``node_ids[j]`` the node ids it holds (its kept
    current nodes first, then new ones), ``added``/``released`` the ids it gains/loses.
    ``objective`` is the model's objective value (for ``greedy``: the same objective evaluated
    on the greedy allocation). ``solver`` is the solver that produced the answer (``cbc``,
    ``highs`` or ``greedy``), ``status`` its status text, ``fallback`` whether the greedy rule
    replaced a failed or timed-out solve, ``horizon_s`` the planning horizon used.
    """

    nodes: dict[str, int]
    node_ids: dict[str, tuple[str, ...]]
    added: dict[str, tuple[str, ...]]
    released: dict[str, tuple[str, ...]]
    objective: float
    solver: str
    status: str
    fallback: bool
    horizon_s: float
    build_s: float = 0.0
    solve_s: float = 0.0
    message: str = ""
    node_window: dict[str, float] = field(default_factory=dict)
    expired: tuple[str, ...] = ()

    @property
    def total_nodes(self) -> int:
        """Nodes used by all jobs together."""
        return sum(self.nodes.values())


@dataclass(frozen=True)
class BlockRequest:
    """One block to request from the batch scheduler: ``nodes`` nodes for ``walltime_s``.

    ``job`` is the training job the block grows (empty for a pool request), ``node_ids`` the
    nodes it should land on when known (for a node list), ``window_s`` the predicted idle time
    the walltime was derived from.
    """

    nodes: int
    walltime_s: float
    job: str = ""
    node_ids: tuple[str, ...] = ()
    window_s: float = 0.0
