"""Plain data the controller's decision code works on: jobs, nodes, decisions and actions.

Nothing here knows about time sources, sockets or Parsl: the live controller and the replay fill
these from their own worlds and read the actions back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from pydantic import Field, StrictBool, StrictStr

from parsl_malleable.allocate.curve import ScalingCurve
from parsl_malleable.errors import ConfigError
from parsl_malleable.inputs import Number, WholeCount, boundary

# The one home of a job's size and weight defaults: JobSpec, @malleable_app and a campaign's
# job entries read them here. JOB_MAX_NODES is no cap of the job's own: the site's limits and the
# allocator size it.
JOB_MIN_NODES = 1
JOB_MAX_NODES = 1024
JOB_PRIORITY = 1.0


@boundary(ConfigError)
class JobSpec:
    """A training job as the controller schedules it.

    ``min_nodes``/``max_nodes`` bound its size whenever it runs (it may also get none);
    ``priority`` weighs its samples in the ``weighted`` objective; ``curve`` is its scalability
    curve in samples/s per node count if the user knows it (else the profiler learns it);
    ``scale_up_s``/``scale_down_s`` are its rescale pauses if the user knows them (else the
    profiler's measurements); ``samples`` is how many samples it must train in all, if known
    (the ``completion`` objective needs it); jobs with the same ``family`` (the same model and
    batch size, as in a hyperparameter sweep) share throughput measurements and rescale pauses,
    so each family is profiled once; ``grow`` False keeps it at the nodes it holds (or its
    minimum, to start): a search's trial that its pruner is about to stop
    (:mod:`parsl_malleable.campaign.promise`).
    """

    name: Annotated[StrictStr, Field(min_length=1)]
    min_nodes: Annotated[WholeCount, Field(ge=1)] = JOB_MIN_NODES
    max_nodes: WholeCount = JOB_MAX_NODES
    priority: Annotated[Number, Field(gt=0)] = JOB_PRIORITY
    curve: ScalingCurve | None = None
    scale_up_s: Annotated[Number, Field(ge=0)] | None = None
    scale_down_s: Annotated[Number, Field(ge=0)] | None = None
    samples: Annotated[Number, Field(gt=0)] | None = None
    family: StrictStr | None = None
    grow: StrictBool = True

    @property
    def profile_key(self) -> str:
        """Name under which the profiler keeps this job's measurements."""
        return f"family:{self.family}" if self.family else self.name

    def __post_init__(self) -> None:
        if self.min_nodes > self.max_nodes:
            raise ConfigError(
                f"job {self.name!r}: need 1 <= min_nodes <= max_nodes; got "
                f"min_nodes={self.min_nodes}, max_nodes={self.max_nodes}"
            )


@dataclass
class NodeState:
    """One node that can host ranks, as the controller sees it.

    ``block_id`` is the block holding it; ``job`` the job whose ranks run there now (set when
    the start is ordered, cleared when every rank there has left); ``leaving`` is set once those
    ranks have been asked to leave.
    """

    node_id: str
    block_id: str
    name: str
    job: str | None = None
    leaving: bool = False
    ready_since: float = 0.0


@dataclass
class BlockState:
    """One block: its deadline (wall-clock end, None if unknown) and whether it must be left."""

    block_id: str
    deadline: float | None = None
    yielding: bool = False
    reason: str = ""


@dataclass(frozen=True)
class StartRanks:
    """Order: run ranks of ``job`` on ``node`` (the node is free)."""

    job: str
    node: str


@dataclass(frozen=True)
class DrainRanks:
    """Order: the ranks of ``job`` on ``node`` leave at their next commit."""

    job: str
    node: str
    reason: str


Action = StartRanks | DrainRanks


@dataclass(frozen=True)
class JobTerms:
    """One job's part of a decision: nodes before and after, and the curve values used."""

    before: int
    after: int
    rate_before: float
    rate_after: float
    curve_source: str


@dataclass(frozen=True)
class Decision:
    """One allocation: which node goes to which job, why, and what it cost to find.

    ``owner`` maps every usable node to its job (nodes absent stay free); ``terms`` gives each
    job the allocator considered its node counts and curve values (``waiting`` jobs were left
    out by admission: they get no node); ``objective``, ``solver``, ``status`` come from the
    allocator; ``seconds`` is the wall time of the whole decision.
    """

    number: int
    time: float
    reason: str
    owner: dict[str, str]
    terms: dict[str, JobTerms]
    objective: float
    solver: str
    status: str
    seconds: float
    usable_nodes: int
    fallback: bool = False
    message: str = ""
    changes: dict[str, tuple[int, int]] = field(default_factory=dict)
    waiting: int = 0

    def nodes_of(self, job: str) -> list[str]:
        """Nodes given to ``job``."""
        return [n for n, j in self.owner.items() if j == job]

    def summary(self) -> str:
        """One line: each job's change and the objective."""
        parts = [
            f"{name} {t.before}->{t.after}"
            for name, t in sorted(self.terms.items())
            if t.before or t.after
        ]
        runs = ", ".join(parts) or "no job runs"
        waiting = f"; {self.waiting} jobs wait" if self.waiting else ""
        return (
            f"decision {self.number} ({self.reason}): {runs}{waiting}; "
            f"{self.usable_nodes} usable nodes; objective {self.objective:.4g} "
            f"({self.solver} {self.status}, {self.seconds * 1e3:.0f} ms)"
        )


__all__ = [
    "Action",
    "BlockState",
    "Decision",
    "DrainRanks",
    "JobSpec",
    "JobTerms",
    "NodeState",
    "StartRanks",
]
