"""``ControllerCore``: the controller's state machine, with time and I/O left outside.

Inputs are events, each stamped with the caller's clock: blocks appear, change (deadline,
yield) and go; nodes become ready (their ranks' hosts are connected) or are lost; jobs arrive
and end; ranks report throughput and rescale pauses; ranks on a node have left. ``step(now)``
turns that state into orders (:class:`StartRanks`, :class:`DrainRanks`), making a new
:class:`Decision` when something changed (debounced) and enforcing the latest one:

* a node runs the ranks of at most one job; it moves to another job only after every rank of
  the first has left it (at a commit), so two jobs never hold a node at the same time;
* nodes of a block that yields, or whose deadline is less than ``drain_margin_s`` away, are
  not usable: their ranks are drained at once and nothing new starts there.

The live controller (:mod:`.live`) feeds it from Parsl and the provider; the replay feeds it
from a simulated clock. Both run exactly this code.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import field
from typing import Annotated, Any

from pydantic import Field

from parsl_malleable.controller.model import (
    Action,
    BlockState,
    Decision,
    DrainRanks,
    JobSpec,
    NodeState,
    StartRanks,
)
from parsl_malleable.controller.policy import PolicySettings, decide
from parsl_malleable.errors import ConfigError
from parsl_malleable.inputs import Number, Period, boundary
from parsl_malleable.profile.profiler import ScalabilityProfiler

logger = logging.getLogger(__name__)

WindowSource = Callable[[Sequence[str], float], Mapping[str, float]]
"""Predicted seconds each of the given nodes stays idle after ``now`` (missing: unknown)."""


@boundary(ConfigError)
class CoreSettings:
    """Timing of decisions: wait ``debounce_s`` after the last event (at most ``max_delay_s``
    after the first) before deciding; re-decide every ``redecide_s`` once new throughput has
    been measured (``inf``: never; the replay decides at events only); drain a block's ranks
    ``drain_margin_s`` before its deadline."""

    debounce_s: Annotated[Number, Field(ge=0)] = 0.2
    max_delay_s: Annotated[Number, Field(ge=0)] = 2.0
    redecide_s: Period = 30.0
    drain_margin_s: Annotated[Number, Field(ge=0)] = 30.0
    policy: PolicySettings = field(default_factory=PolicySettings)


class ControllerCore:
    """Blocks + jobs + curves -> decisions -> orders. See the module docstring.

    ``windows`` predicts how long nodes stay usable where their block has no deadline (or a
    later one): a node whose block may be taken back at any time (a preemptable block, an
    idle-node trace) still gets a planning window.
    """

    def __init__(
        self, settings: CoreSettings | None = None, windows: WindowSource | None = None
    ) -> None:
        self.settings = settings or CoreSettings()
        self.windows = windows
        policy = self.settings.policy
        self.profiler = ScalabilityProfiler(
            default_scale_up_s=policy.scale_up_s, default_scale_down_s=policy.scale_down_s
        )
        self.jobs: dict[str, JobSpec] = {}
        self.nodes: dict[str, NodeState] = {}
        self.blocks: dict[str, BlockState] = {}
        self.decisions: list[Decision] = []
        self._dirty: list[str] = []
        self._first_dirty: float | None = None
        self._last_event = 0.0
        self._new_measurements = False
        self._revalued = False  # a job's priority or growth changed since the last decision
        self.progress: dict[str, float] = {}
        self.skipped = 0  # node events that needed no new decision (see _same_as_last)
        self._last_usable: set[str] | None = None
        self._last_jobs: set[str] = set()

    # ------------------------------------------------------------------ inputs

    def add_job(self, spec: JobSpec, now: float) -> None:
        """A training job wants nodes."""
        if spec.name in self.jobs:
            raise ConfigError(f"a job named {spec.name!r} is already registered")
        self.jobs[spec.name] = spec
        self._touch(now, f"job {spec.name} arrived")

    def revalue(self, name: str, now: float, *, priority: float, grow: bool) -> bool:
        """Job ``name``'s worth changed (a search's trial passed a rung, or will be pruned at
        its next one): its ``priority`` and whether it may ``grow``. Whether anything changed
        (then the next decision is made afresh)."""
        spec = self.jobs.get(name)
        if spec is None or (spec.priority, spec.grow) == (priority, grow):
            return False
        self.jobs[name] = dataclasses.replace(spec, priority=priority, grow=grow)
        self._revalued = True
        self._touch(now, f"job {name} revalued")
        return True

    def end_job(self, name: str, now: float) -> None:
        """A job finished or failed: its nodes are free once its ranks have gone."""
        if self.jobs.pop(name, None) is not None:
            self.progress.pop(name, None)
            self._touch(now, f"job {name} ended")

    def block_update(
        self,
        block_id: str,
        now: float,
        *,
        deadline: float | None = None,
        yielding: bool = False,
        reason: str = "",
    ) -> None:
        """A block appeared or changed: its deadline, or that it must be left now."""
        block = self.blocks.setdefault(block_id, BlockState(block_id))
        changed = block.deadline != deadline or (yielding and not block.yielding)
        block.deadline = deadline
        if yielding and not block.yielding:
            block.yielding, block.reason = True, reason or "block yields"
        if changed:
            self._touch(now, f"block {block_id} {'yields' if block.yielding else 'updated'}")

    def block_gone(self, block_id: str, now: float) -> None:
        """A block ended: its nodes are gone."""
        self.blocks.pop(block_id, None)
        for node in [n for n in self.nodes.values() if n.block_id == block_id]:
            self.node_gone(node.node_id, now)

    def node_ready(self, node_id: str, block_id: str, now: float, name: str = "") -> None:
        """A node can host ranks (every rank slot on it is connected and free)."""
        if node_id in self.nodes:
            return
        self.blocks.setdefault(block_id, BlockState(block_id))
        self.nodes[node_id] = NodeState(node_id, block_id, name or node_id, ready_since=now)
        self._touch(now, f"node {name or node_id} ready")

    def node_gone(self, node_id: str, now: float) -> None:
        """A node was lost (killed, block ended): whatever ran there is gone."""
        node = self.nodes.pop(node_id, None)
        if node is not None:
            self._touch(now, f"node {node.name} lost")

    def ranks_left(self, node_id: str, now: float) -> None:
        """Every rank on ``node_id`` has left its job: the node is free."""
        node = self.nodes.get(node_id)
        if node is not None:
            # No new decision: the last one already counted a leaving node as free.
            node.job, node.leaving = None, False

    def report_throughput(self, job: str, nodes: int, samples_per_s: float) -> None:
        """``job`` trained ``samples_per_s`` on ``nodes`` nodes."""
        if job in self.jobs and nodes >= 1 and samples_per_s > 0:
            self.profiler.record(self.jobs[job].profile_key, nodes, samples_per_s)
            self._new_measurements = True

    def report_progress(self, job: str, samples: float) -> None:
        """``job`` has trained ``samples`` samples in all (the ``completion`` objective)."""
        if job in self.jobs and samples >= 0:
            self.progress[job] = samples

    def report_rescale(self, job: str, kind: str, seconds: float) -> None:
        """A rescale of ``job`` (``up``, ``down`` or ``start``) paused it ``seconds``."""
        if job in self.jobs and seconds >= 0:
            self.profiler.record_rescale(self.jobs[job].profile_key, kind, seconds)

    # ------------------------------------------------------------------ output

    def step(self, now: float) -> list[Action]:
        """Decide if due, then return the orders that bring nodes to the latest decision."""
        self._expire(now)
        if self._decision_due(now):
            self._decide(now)
        return self._enforce(now)

    def next_due(self, now: float) -> float | None:
        """When the next decision falls due if nothing else happens (None: not before an event).

        A clock that jumps from event to event (the replay) sleeps until then.
        """
        times = []
        if self._first_dirty is not None:
            times.append(self._dirty_due())
        elif self._new_measurements and self.decisions:
            times.append(self._redecide_due())
        margin = self.settings.drain_margin_s
        times.extend(
            b.deadline - margin
            for b in self.blocks.values()
            if b.deadline is not None and not b.yielding
        )
        return max(now, min(times)) if times else None

    def usable(self, node: NodeState, now: float) -> bool:
        """Whether new work may go to ``node`` (its block neither yields nor ends soon)."""
        block = self.blocks.get(node.block_id)
        if block is None or block.yielding:
            return False
        return block.deadline is None or now < block.deadline - self.settings.drain_margin_s

    def holdings(self) -> dict[str, list[str]]:
        """Nodes each job runs on now (leaving ones included)."""
        held: dict[str, list[str]] = {name: [] for name in self.jobs}
        for node in self.nodes.values():
            if node.job is not None:
                held.setdefault(node.job, []).append(node.node_id)
        return held

    def state(self) -> dict[str, Any]:
        """Jobs with their nodes and measured throughput, and the last decision."""
        held = self.holdings()
        last = self.decisions[-1] if self.decisions else None
        jobs = {}
        for name, spec in self.jobs.items():
            measured = self.profiler.measured(spec.profile_key)
            jobs[name] = {
                "nodes": len(held.get(name, [])),
                "node_names": sorted(self.nodes[n].name for n in held.get(name, [])),
                "min_nodes": spec.min_nodes,
                "max_nodes": spec.max_nodes,
                "priority": spec.priority,
                "target": len(last.nodes_of(name)) if last else 0,
                "throughput": {n: round(m, 3) for n, (m, _, _) in measured.items()},
            }
        return {
            "jobs": jobs,
            "nodes": len(self.nodes),
            "free_nodes": sum(1 for n in self.nodes.values() if n.job is None),
            "last_decision": last.summary() if last else None,
            "decisions": len(self.decisions),
        }

    # --------------------------------------------------------------- internals

    def _touch(self, now: float, why: str) -> None:
        self._dirty.append(why)
        self._last_event = now
        if self._first_dirty is None:
            self._first_dirty = now

    def _dirty_due(self) -> float:
        """When the pending events are decided (there are some). ``next_due`` and ``step``
        both use this one expression, so a jumping clock lands exactly on it."""
        assert self._first_dirty is not None
        return min(
            self._last_event + self.settings.debounce_s,
            self._first_dirty + self.settings.max_delay_s,
        )

    def _redecide_due(self) -> float:
        """When new measurements are decided on (there is a decision). One expression for
        ``next_due`` and ``step``: ``now - last >= redecide_s`` can be false at ``now = last +
        redecide_s`` by rounding, and a jumping clock would then land there forever."""
        return self.decisions[-1].time + self.settings.redecide_s

    def _expire(self, now: float) -> None:
        margin = self.settings.drain_margin_s
        for block in self.blocks.values():
            if block.deadline is not None and not block.yielding and now >= block.deadline - margin:
                block.yielding, block.reason = True, "deadline near"
                self._touch(now, f"block {block.block_id} near its deadline")

    def _decision_due(self, now: float) -> bool:
        if self._first_dirty is None:
            stale = bool(self.decisions) and now >= self._redecide_due()
            if self._new_measurements and stale:
                self._touch(now, "new throughput measurements")
                return True
            return False
        return now >= self._dirty_due()

    def _decide(self, now: float) -> None:
        reasons = list(dict.fromkeys(self._dirty))
        more = f" (+{len(reasons) - 3} more)" if len(reasons) > 3 else ""
        reason = "; ".join(reasons[:3]) + more
        # New curves or weights move the optimum even where no node or holding changed.
        new_terms = self._new_measurements or self._revalued
        self._dirty, self._first_dirty, self._new_measurements = [], None, False
        self._revalued = False
        # Nodes whose ranks are leaving are free for this decision: they will be soon.
        usable = {
            node.node_id: self._remaining(node, now)
            for node in self.nodes.values()
            if self.usable(node, now)
        }
        if self.windows is not None and usable:
            predicted = self.windows(list(usable), now)
            for node_id, seconds in predicted.items():
                known = usable.get(node_id)
                if node_id in usable and (known is None or seconds < known):
                    usable[node_id] = seconds
        holdings: dict[str, list[str]] = {name: [] for name in self.jobs}
        for node_id in usable:
            node = self.nodes[node_id]
            if node.job in holdings and not node.leaving:
                holdings[node.job].append(node_id)
        if not new_terms and self._same_as_last(holdings, set(usable)):
            self.skipped += 1
            return
        decision = decide(
            number=len(self.decisions) + 1,
            now=now,
            reason=reason,
            jobs=list(self.jobs.values()),
            holdings=holdings,
            remaining=usable,
            profiler=self.profiler,
            settings=self.settings.policy,
            progress=self.progress,
        )
        self.decisions.append(decision)
        self._last_usable = set(usable)
        self._last_jobs = set(self.jobs)
        logger.info("%s", decision.summary())
        for name, (before, after) in decision.changes.items():
            terms = decision.terms[name]
            logger.info(
                "job %s: %d -> %d nodes (%s curve: %.3g -> %.3g samples/s)",
                name,
                before,
                after,
                terms.curve_source,
                terms.rate_before,
                terms.rate_after,
            )

    def _same_as_last(self, holdings: dict[str, list[str]], usable: set[str]) -> bool:
        """Whether the last decision is still the answer: every job holds exactly what it was
        given, nodes that left were given to nobody, and nodes that came could go to nobody
        (every job is at its maximum). Removing an unused option or adding one no job may take
        leaves the optimum where it was, so solving again would repeat it; a node event of
        this kind is most of a large idle pool's events. Not used with the ``completion``
        objective, whose weights move with every job's progress."""
        if not self.decisions or self.settings.policy.objective == "completion":
            return False
        last = self.decisions[-1]
        given: dict[str, set[str]] = {name: set() for name in self.jobs}
        for node, job in last.owner.items():
            if job not in given:
                return False  # a job ended: its nodes are to be shared out
            given[job].add(node)
        if self._last_jobs != set(self.jobs):
            return False  # a job arrived
        if any(set(holdings[name]) != given[name] for name in self.jobs):
            return False
        before = self._last_usable
        self._last_usable = usable
        if before is None or (before - usable) & set(last.owner):
            return False
        if usable - before:
            return all(len(holdings[n]) == spec.max_nodes for n, spec in self.jobs.items())
        return True

    def _remaining(self, node: NodeState, now: float) -> float | None:
        block = self.blocks.get(node.block_id)
        if block is None or block.deadline is None:
            return None
        return block.deadline - self.settings.drain_margin_s - now

    def _enforce(self, now: float) -> list[Action]:
        owner = self.decisions[-1].owner if self.decisions else {}
        actions: list[Action] = []
        for node in self.nodes.values():
            usable = self.usable(node, now)
            target = owner.get(node.node_id) if usable else None
            if target is not None and target not in self.jobs:
                target = None
            if node.job is not None:
                if node.job != target and not node.leaving:
                    node.leaving = True
                    why = self._why_leave(node, usable, target)
                    actions.append(DrainRanks(node.job, node.node_id, why))
            elif target is not None:
                node.job = target
                actions.append(StartRanks(target, node.node_id))
        return actions

    def _why_leave(self, node: NodeState, usable: bool, target: str | None) -> str:
        if not usable:
            block = self.blocks.get(node.block_id)
            return block.reason if block is not None else "block gone"
        if node.job not in self.jobs:
            return "job ended"
        return f"given to {target}" if target else "not in the allocation"


__all__ = ["ControllerCore", "CoreSettings"]
