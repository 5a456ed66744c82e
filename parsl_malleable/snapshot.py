"""A scheduler snapshot, independent of the scheduler that produced it.

The Slurm, PBS and emulated adapters (:mod:`parsl_malleable.schedulers`) and the simulator
replay (:mod:`parsl_malleable.windows.replay_snapshots`) fill it; the window planner, the
provider and the campaign sampler read it. It sits at the bottom of the package and imports
nothing from it, so the schedulers, which produce it, need not import the windows package, which
consumes it. All times are float seconds on one clock (Unix seconds for live schedulers, trace
seconds for the simulator); ``Snapshot.now`` is the moment it was taken.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class NodeState(StrEnum):
    """What the scheduler says a node is doing."""

    IDLE = "idle"
    ALLOCATED = "allocated"
    DOWN = "down"
    DRAINED = "drained"
    RESERVED = "reserved"


@dataclass(frozen=True)
class Node:
    """One compute node."""

    name: str
    state: NodeState
    # The partitions (Slurm) or queues (PBS) whose jobs may run on the node.
    partitions: tuple[str, ...] = ()
    features: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunningJob:
    """A job holding nodes now. ``time_limit`` is seconds of walltime; None when unlimited."""

    job_id: str
    nodes: tuple[str, ...]
    start: float
    time_limit: float | None
    partition: str = ""
    user: str = ""
    ours: bool = False  # a block submitted by parsl-malleable
    name: str = ""  # the job's name (blocks of ours carry their provider's tag in it)


@dataclass(frozen=True)
class PendingJob:
    """A queued job. The order of ``Snapshot.pending`` is the scheduler's priority order.

    ``allowed_nodes``: the names of the nodes the job may ever run on; None (the default): any
    node. The PBS adapter fills it (``schedulers/pbs.py``, ``AllowedVnodes``): the vnodes its
    queue may use that take one of its ``select`` chunks, None when that is every vnode. The
    Slurm adapter does not fill it yet (a Slurm job is planned on any node, whatever its
    partition), nor do the emulated site and the simulator replay. The window planner places
    the job only on these nodes: it never plans the job on a node the job cannot use, and so
    sees which nodes the job waits for. Names that are not usable nodes of the snapshot are
    ignored; a job with fewer usable allowed nodes than it asks for is skipped as one that can
    never start.
    """

    job_id: str
    num_nodes: int
    time_limit: float | None
    submit: float
    partition: str = ""
    user: str = ""
    expected_start: float | None = None  # what the scheduler itself predicts, when it says
    ours: bool = False
    name: str = ""
    allowed_nodes: frozenset[str] | None = None


@dataclass(frozen=True)
class Reservation:
    """An advance reservation or maintenance window that takes ``nodes`` in [start, end)."""

    name: str
    nodes: tuple[str, ...]
    start: float
    end: float
    maintenance: bool = False


@dataclass
class Snapshot:
    """Everything the planner needs to know about a machine at one instant."""

    now: float
    nodes: list[Node]
    running: list[RunningJob] = field(default_factory=list)
    pending: list[PendingJob] = field(default_factory=list)
    reservations: list[Reservation] = field(default_factory=list)
    backfill: str = "easy"  # "easy" or "conservative": how the site's scheduler plans
    default_time_limit: float | None = None  # the partition's limit for jobs that give none
    # Where a job that names no partition (Slurm) or queue (PBS) goes, when the scheduler
    # says; None: unknown. ``Node.partitions`` lists the partitions or queues that may run
    # jobs on each node.
    default_partition: str | None = None

    def idle_nodes(self) -> list[str]:
        """Names of nodes in state IDLE, in snapshot order."""
        return [n.name for n in self.nodes if n.state is NodeState.IDLE]
