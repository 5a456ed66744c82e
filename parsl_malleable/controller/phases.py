"""The phases of a block's life, as the controller sees them, and the time its nodes train.

Every block goes through the same phases (:class:`BlockPhase`), each stamped with wall-clock
time the first time it happens: ``submitted`` and ``running`` (from the provider's book: the
scheduler's own start time), ``worker`` (every rank slot of a node has an agent connected),
``joined`` (a rank asked its job's coordinator to join, its model and data built),
``first_step`` (the first group with that rank finished a step), ``last_step`` (the rank left,
finished or was lost) and ``ended`` (the provider saw the scheduler job end). The per-node phases
(``worker`` to ``last_step``) name the node; a node that hosts ranks of several jobs in turn
keeps its first ``joined``/``first_step`` and its latest ``last_step``.

Training time is counted from the coordinators' epochs: an epoch trains from its first step
(``resumed``) to the next membership event of its job (the next ``formed``, ``dissolved``,
``finished``), so a rescale's pause is not counted as training.
"""

from __future__ import annotations

import statistics
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class BlockPhase(StrEnum):
    """One step of a block's life, in the order they happen."""

    SUBMITTED = "submitted"
    RUNNING = "running"
    WORKER = "worker"
    JOINED = "joined"
    FIRST_STEP = "first_step"
    LAST_STEP = "last_step"
    ENDED = "ended"


PHASE_ORDER: tuple[BlockPhase, ...] = tuple(BlockPhase)
NODE_PHASES = frozenset(
    {BlockPhase.WORKER, BlockPhase.JOINED, BlockPhase.FIRST_STEP, BlockPhase.LAST_STEP}
)
# Ends of an epoch's training: the job's membership changed, or it is over.
_EPOCH_ENDS = frozenset({"formed", "dissolved", "finished", "aborted"})


@dataclass(frozen=True)
class PhaseEvent:
    """``phase`` of ``block`` (the controller's block key) at ``time``; per-node phases name the
    ``node`` and the training ``job``."""

    block: str
    phase: BlockPhase
    time: float
    node: str = ""
    job: str = ""
    why: str = ""  # for ``last_step``: how the rank's training there ended (left, lost: ...)


@dataclass(frozen=True)
class MemberPlace:
    """Where one rank (a coordinator member) ran: block key, node name, job."""

    block: str
    node: str
    job: str


class PhaseLog:
    """Every block's phase events, thread-safe; at most ``limit`` events are kept (oldest
    blocks dropped first) so a driver that runs for weeks does not grow without bound."""

    def __init__(self, limit: int = 100_000) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._events: dict[tuple[str, BlockPhase, str], PhaseEvent] = {}
        self._training: dict[tuple[str, str], float] = {}  # (block, node) -> seconds
        self._first_steps = 0  # FIRST_STEP events kept (read every controller tick)

    def record(
        self,
        block: str,
        phase: BlockPhase,
        time: float,
        node: str = "",
        job: str = "",
        why: str = "",
    ) -> bool:
        """Stamp ``phase``; the first stamp wins, except ``last_step`` (the latest wins).
        Returns whether the log changed."""
        key = (block, phase, node if phase in NODE_PHASES else "")
        with self._lock:
            old = self._events.get(key)
            if old is not None and (phase is not BlockPhase.LAST_STEP or old.time >= time):
                return False
            self._first_steps += old is None and phase is BlockPhase.FIRST_STEP
            self._events[key] = PhaseEvent(block, phase, time, key[2], job, why)
            if len(self._events) > self.limit:
                self._drop_oldest_block()
            return True

    def add_training(self, block: str, node: str, seconds: float) -> None:
        """Count ``seconds`` of training steps on ``node`` of ``block``."""
        with self._lock:
            self._training[block, node] = self._training.get((block, node), 0.0) + seconds

    def events(self, block: str | None = None) -> list[PhaseEvent]:
        """The events (of one block, or all), in time order (phase order breaks ties)."""
        with self._lock:
            chosen = [e for e in self._events.values() if block is None or e.block == block]
        return sorted(chosen, key=lambda e: (e.time, PHASE_ORDER.index(e.phase)))

    def training_s(self, block: str | None = None) -> float:
        """Node-seconds spent in training steps (on one block, or all)."""
        with self._lock:
            return sum(s for (b, _), s in self._training.items() if block is None or b == block)

    def startups(self) -> list[NodeStartup]:
        """One row per node that reached its first step (in the order of their first steps):
        the time of each phase before it."""
        block_phase: dict[tuple[str, BlockPhase], float] = {}
        node_phase: dict[tuple[str, str], dict[BlockPhase, float]] = {}
        for e in self.events():
            if e.phase in NODE_PHASES:
                node_phase.setdefault((e.block, e.node), {})[e.phase] = e.time
            else:
                block_phase[e.block, e.phase] = e.time
        rows = [
            NodeStartup(
                block=block,
                node=node,
                submitted=block_phase.get((block, BlockPhase.SUBMITTED)),
                running=block_phase.get((block, BlockPhase.RUNNING)),
                worker=stamps.get(BlockPhase.WORKER),
                joined=stamps.get(BlockPhase.JOINED),
                first_step=stamps[BlockPhase.FIRST_STEP],
            )
            for (block, node), stamps in node_phase.items()
            if BlockPhase.FIRST_STEP in stamps
        ]
        return sorted(rows, key=lambda r: r.first_step)

    def first_steps(self) -> int:
        """How many nodes have reached a first step (cheap: to notice a new one)."""
        with self._lock:
            return self._first_steps

    def _drop_oldest_block(self) -> None:
        first = min(self._events.values(), key=lambda e: e.time).block
        for key in [k for k in self._events if k[0] == first]:
            self._first_steps -= key[1] is BlockPhase.FIRST_STEP
            del self._events[key]
        for pair in [k for k in self._training if k[0] == first]:
            del self._training[pair]


@dataclass(frozen=True)
class NodeStartup:
    """When one node of a block got through each phase up to its first training step."""

    block: str
    node: str
    submitted: float | None
    running: float | None
    worker: float | None
    joined: float | None
    first_step: float

    def gaps(self) -> dict[str, float | None]:
        """Seconds spent in each phase: submitted->running, running->worker, worker->joined,
        joined->first step (None where a stamp is missing)."""
        marks = [self.submitted, self.running, self.worker, self.joined, self.first_step]
        names = ["submit->running", "running->worker", "worker->joined", "joined->first step"]
        return {
            name: (b - a) if a is not None and b is not None else None
            for name, a, b in zip(names, marks, marks[1:], strict=False)
        }


class EpochReader:
    """Reads one job's coordinator events as they come and turns them into phase events.

    ``places`` maps the job's member ids to where they run (the controller fills it when it
    orders a rank). Call :meth:`feed` with the events not yet fed, in order.
    """

    def __init__(self, job: str, log: PhaseLog, places: Mapping[str, MemberPlace]) -> None:
        self.job = job
        self.log = log
        self.places = places
        self.fed = 0  # how many coordinator events were fed so far
        self._epoch_members: dict[int, list[str]] = {}
        self._training: tuple[list[str], float] | None = None  # members, first step time
        self._lost: set[str] = set()  # members the coordinator marked lost

    def feed(self, events: Iterable[dict[str, Any]]) -> None:
        """Take the coordinator events that follow the ones already fed."""
        for event in events:
            self.fed += 1
            kind, when = str(event.get("event")), float(event.get("time", 0.0))
            if kind == "finished" and self._training is not None:
                # Training is over: every rank of the last group stepped until now.
                for m in self._training[0]:
                    if (p := self.places.get(m)) is not None:
                        self.log.record(p.block, BlockPhase.LAST_STEP, when, p.node, self.job)
            if kind in _EPOCH_ENDS:
                self._close_epoch(when)
            member = str(event.get("member", ""))
            place = self.places.get(member)
            if kind == "formed":
                self._epoch_members[int(event["epoch"])] = [str(m) for m in event["members"]]
            elif kind == "resumed":
                members = self._epoch_members.pop(int(event["epoch"]), [])
                self._training = (members, when)
                for m in members:
                    if (p := self.places.get(m)) is not None:
                        self.log.record(p.block, BlockPhase.FIRST_STEP, when, p.node, self.job)
            elif kind == "joined" and place is not None:
                self.log.record(place.block, BlockPhase.JOINED, when, place.node, self.job)
            if kind in ("left", "lost", "evicted") and place is not None:
                if member in self._lost:
                    continue  # a lost rank sent away when it woke: it trained no more since
                if kind == "lost":
                    self._lost.add(member)
                why = f"{kind}: {event['why']}" if event.get("why") else kind
                self.log.record(place.block, BlockPhase.LAST_STEP, when, place.node, self.job, why)

    def flush(self, now: float) -> None:
        """Count the running epoch's training up to ``now`` (and go on counting from there)."""
        if self._training is not None:
            members, _ = self._training
            self._close_epoch(now)
            self._training = (members, now)

    def _close_epoch(self, when: float) -> None:
        if self._training is None:
            return
        members, start = self._training
        self._training = None
        nodes = {(p.block, p.node) for m in members if (p := self.places.get(m)) is not None}
        for block, node in nodes:
            self.log.add_training(block, node, max(0.0, when - start))


def rescale_pauses(epochs: Iterable[Mapping[str, Any]]) -> list[tuple[str, float]]:
    """``(kind, seconds)`` for each epoch after the first of one job's coordinator history:
    how long the job stood still, from the previous epoch's last step (``progress_at``; its
    forming if unknown) to this one's first; ``up`` when it has more ranks than the one before,
    ``down`` when fewer (same size: ``swap``)."""
    pauses = []
    previous: Mapping[str, Any] | None = None
    for epoch in epochs:
        resumed = epoch.get("resumed_at")
        if previous is not None and resumed is not None:
            since = previous.get("progress_at") or epoch.get("formed_at")
            size, before = int(epoch["world_size"]), int(previous["world_size"])
            kind = "up" if size > before else "down" if size < before else "swap"
            if since is not None:
                pauses.append((kind, float(resumed) - float(since)))
        if resumed is not None:
            previous = epoch
    return pauses


def percentile(values: list[float], q: float) -> float:
    """The ``q``-quantile (0-1) of ``values`` by linear interpolation (``statistics``)."""
    if len(values) == 1:
        return values[0]
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    index = min(98, max(0, round(q * 100) - 1))
    return cuts[index]


__all__ = [
    "NODE_PHASES",
    "PHASE_ORDER",
    "BlockPhase",
    "EpochReader",
    "MemberPlace",
    "NodeStartup",
    "PhaseEvent",
    "PhaseLog",
    "percentile",
    "rescale_pauses",
]
