"""A pruned search replayed: an Optuna study's trials trained on an idle-node timeline.

Each trial is a replay job (FreeTrain's ShuffleNet job of :func:`.scenario.hpo_sweep`: its
measured throughput at 1-64 nodes and its pauses) of ``epochs x samples_per_epoch`` samples.
At every epoch's end (a mark of the replay, :class:`~.engine.Marks`) it reports its config's
learning curve (:mod:`.curves`) plus noise, and the search decides exactly as a campaign does
live: the reports go to ``observe`` of the search, whose pruner may stop the trial; a pruned
trial ends at once and its nodes are free. The search is any object with the methods of
``campaign/search.py``'s ``SearchRun`` (:class:`TrialSearch`); ``campaign/search_memory.py``'s
``memory_search`` opens one over an in-memory study. (This module cannot import the campaign
part, a peer in the layer table of docs/architecture.md: whoever runs a sweep passes it in.)

**Nodes by promise.** After every report the sweep gives the controller each live trial's
promise, as the live runner does (``campaign/runner.py``, ``_revalue_trials``): its priority
becomes the promise's weight, and it may grow only where the promise says so
(``ControllerCore.revalue``; a search with ``hold_back`` off, the default, lets every trial
grow). A search with ``nodes_by_promise`` off gives every trial the same weight, and
``scavenger`` has no controller to tell.

**Asking.** Every trial is asked when the sweep is submitted, in trial-number order, so the
policies compared train the same configs in the same order (a seeded random sampler gives the
same parameters however the asks are spread in time; a sampler that learns from results, TPE,
would not). Admission is then the policy's: ``freetrain``'s cap, ``ours``'s allocator, the
scavenger's first come, first served queue.

**Time to the best model.** ``best``: the best true value (no noise) any trial of the sweep
reaches within ``epochs`` epochs, which is what the full sweep without pruning finds. The time
to the best model is from the sweep's submit to the first epoch's end at which some trial's
true value is within ``within`` (1 %) of ``best``: when a model that good first exists. It is
judged on the true curve so that a lucky noisy report does not count; None if the search
pruned every config that good before it got there.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, Protocol

from pydantic import Field

from parsl_malleable.controller.core import ControllerCore
from parsl_malleable.elastic.metric_book import MetricRecord
from parsl_malleable.errors import ConfigError
from parsl_malleable.inputs import Number, WholeCount, boundary
from parsl_malleable.replay.bounds import best_node_rate
from parsl_malleable.replay.curves import CurveFamily, LearningCurve
from parsl_malleable.replay.engine import Replay
from parsl_malleable.replay.idle import IdleTimeline
from parsl_malleable.replay.policies import (
    REPLAY_MIP_NODE_LIMIT,
    REPLAY_TIME_LIMIT_S,
    make_policy,
)
from parsl_malleable.replay.result import ReplayResult
from parsl_malleable.replay.scavenger import scavenger_replay
from parsl_malleable.replay.workload import ReplayJob


class PromiseLike(Protocol):
    """A trial's worth to the allocator (``campaign/promise.py``'s ``Promise``)."""

    @property
    def weight(self) -> float: ...

    @property
    def grow(self) -> bool: ...


class MetricLike(Protocol):
    """The search's metric (``campaign/spec.py``'s ``MetricSpec``)."""

    @property
    def name(self) -> str: ...


class TrialSearch(Protocol):
    """What a sweep needs of a search: the methods of ``campaign/search.py``'s ``SearchRun``."""

    @property
    def metric(self) -> MetricLike: ...

    def ask(self) -> tuple[int, tuple[str, Any, dict[str, Any]]]: ...

    def observe(self, number: int, job: str, records: Iterable[MetricRecord]) -> object | None: ...

    def promises(self) -> Mapping[int, PromiseLike]: ...

    def finish(self, number: int, final: float | None, failed: bool) -> str: ...


@boundary(ConfigError)
class SweepSetup:
    """A sweep: ``trials`` trials of ``epochs`` epochs of ``samples_per_epoch`` samples, each
    a copy of ``template`` (curve, sizes, pauses) submitted at ``submit``; their learning
    curves from ``family``; the best model is judged ``within`` of the best."""

    trials: Annotated[WholeCount, Field(ge=1)]
    template: ReplayJob
    submit: Number
    epochs: Annotated[WholeCount, Field(ge=1)] = 27
    samples_per_epoch: Annotated[Number, Field(gt=0)] = 1.3e6
    family: CurveFamily = field(default_factory=CurveFamily)
    within: Annotated[Number, Field(ge=0, lt=1)] = 0.01


@dataclass
class Trial:
    """One trial: its config and curve, its reports ``(time, epoch, reported, true)``, and
    how it ended (``state``: waiting, running, done, pruned)."""

    number: int
    name: str
    params: dict[str, Any]
    curve: LearningCurve
    reports: list[tuple[float, int, float, float]] = field(default_factory=list)
    state: str = "waiting"
    ended: float | None = None


class SweepMarks:
    """The replay's marks for a sweep: an epoch's end reports, and the search decides."""

    def __init__(self, search: TrialSearch, setup: SweepSetup, trials: list[Trial]) -> None:
        self.search = search
        self.setup = setup
        self.trials = {t.name: t for t in trials}
        self.by_number = {t.number: t.name for t in trials}
        self.core: ControllerCore | None = None  # set for a policy with a controller
        self.revalued = 0  # promises the core took as a change

    def next_mark(self, job: str) -> float:
        """Samples at the trial's next epoch's end (inf: it reported its last epoch)."""
        epoch = len(self.trials[job].reports) + 1
        return epoch * self.setup.samples_per_epoch if epoch <= self.setup.epochs else math.inf

    def reached(self, job: str, now: float) -> bool:
        """An epoch's end: report, let the pruner decide (True: pruned), give the promises."""
        trial = self.trials[job]
        epoch = len(trial.reports) + 1
        value = self.setup.family.report(trial.curve, trial.number, epoch)
        trial.reports.append((now, epoch, value, trial.curve.value(epoch)))
        trial.state = "running"
        record = MetricRecord(step=epoch, time=now, values={self.search.metric.name: value})
        pruned = self.search.observe(trial.number, job, [record]) is not None
        if pruned:
            trial.state, trial.ended = "pruned", now
        elif epoch == self.setup.epochs:
            self.search.finish(trial.number, value, failed=False)
            trial.state, trial.ended = "done", now
        self._revalue(now)
        return pruned

    def _revalue(self, now: float) -> None:
        if self.core is None:
            return
        for number, promise in self.search.promises().items():
            name = self.by_number.get(number)
            if name is not None and self.core.revalue(
                name, now, priority=promise.weight, grow=promise.grow
            ):
                self.revalued += 1


@dataclass(frozen=True)
class SweepResult:
    """A sweep's figures under one policy (times in seconds from the sweep's submit)."""

    policy: str
    trials: list[Trial]
    best: float
    within: float
    time_to_best_s: float | None
    search_s: float | None
    node_seconds: dict[str, float]
    samples: float
    upper_bound: float
    idle_node_seconds: float
    revalued: int
    replay: ReplayResult

    def count(self, state: str) -> int:
        """Trials that ended ``state`` (done, pruned) or are still ``waiting``/``running``."""
        return sum(t.state == state for t in self.trials)

    @property
    def best_found(self) -> float:
        """The best true value any trial reached at a report."""
        return max((r[3] for t in self.trials for r in t.reports), default=math.nan)

    @property
    def node_hours(self) -> float:
        """Node-hours the trials held."""
        return sum(self.node_seconds.values()) / 3600

    @property
    def pruned_node_hours(self) -> float:
        """Node-hours held by trials that were pruned."""
        pruned = {t.name for t in self.trials if t.state == "pruned"}
        return sum(s for n, s in self.node_seconds.items() if n in pruned) / 3600

    @property
    def of_upper(self) -> float:
        """Samples trained over the upper bound of the sweep's span (idle node-seconds from
        submit to the end, at the best per-node rate: replay/bounds.py)."""
        return self.samples / self.upper_bound if self.upper_bound > 0 else math.nan

    def summary(self) -> dict[str, Any]:
        """The figures of the benchmark's table, as plain values."""
        hours = {"time_to_best_h": self.time_to_best_s, "search_h": self.search_s}
        return {
            "policy": self.policy,
            **{k: None if v is None else v / 3600 for k, v in hours.items()},
            "best": self.best,
            "best_found": self.best_found,
            "done": self.count("done"),
            "pruned": self.count("pruned"),
            "unfinished": len(self.trials) - self.count("done") - self.count("pruned"),
            "node_hours": self.node_hours,
            "pruned_node_hours": self.pruned_node_hours,
            "samples": self.samples,
            "upper_bound": self.upper_bound,
            "of_upper": self.of_upper,
            "harvested": sum(self.node_seconds.values()) / self.idle_node_seconds
            if self.idle_node_seconds
            else math.nan,
            "revalued": self.revalued,
            "decisions": self.replay.decisions,
            "wall_s": self.replay.wall_s,
        }


def ask_trials(search: TrialSearch, setup: SweepSetup) -> tuple[list[Trial], list[ReplayJob]]:
    """Ask the sweep's trials of ``search``: each one's config and curve, and its job."""
    trials, jobs = [], []
    samples = setup.epochs * setup.samples_per_epoch
    for _ in range(setup.trials):
        number, (name, _, params) = search.ask()
        trials.append(Trial(number, name, params, setup.family.curve(params)))
        jobs.append(replace(setup.template, name=name, samples=samples, submit=setup.submit))
    return trials, jobs


def _time_to_best(trials: list[Trial], target: float, submit: float) -> float | None:
    reached = [r[0] for t in trials for r in t.reports if r[3] >= target]
    return min(reached) - submit if reached else None


def sweep_replay(
    timeline: IdleTimeline,
    make_search: Callable[[], TrialSearch],
    setup: SweepSetup,
    policy: str,
    *,
    max_jobs: int | None = None,
    label: str | None = None,
    seed: int = 0,
    time_limit_s: float = REPLAY_TIME_LIMIT_S,
    mip_node_limit: int | None = REPLAY_MIP_NODE_LIMIT,
) -> SweepResult:
    """Replay the sweep ``setup`` under ``policy`` (``scavenger``: one-node jobs of a
    preemptable partition; else a policy of :func:`.policies.make_policy` with the
    ``weighted`` objective, so that promises weigh) with at most ``max_jobs`` trials admitted
    at a time (None: every trial a candidate). ``make_search`` opens a fresh search; its
    trials are asked at once; ``mip_node_limit`` and ``time_limit_s``: each decision's solver
    limits (:func:`.policies.make_policy`: the node limit makes the sweep repeat exactly; a
    wall-clock limit that binds makes it depend on the machine's speed)."""
    search = make_search()
    trials, jobs = ask_trials(search, setup)
    marks = SweepMarks(search, setup, trials)
    if policy == "scavenger":
        stopped: dict[str, float] = {}
        result = scavenger_replay(timeline, jobs, marks=marks, stopped=stopped)
    else:
        replay = Replay(
            timeline,
            jobs,
            make_policy(
                policy,
                objective="weighted",
                time_limit_s=time_limit_s,
                mip_node_limit=mip_node_limit,
            ),
            max_jobs=max_jobs,
            seed=seed,
            marks=marks,
        )
        marks.core = replay.core
        result = replay.run()
    end = result.t1
    target = max(t.curve.best(setup.epochs) for t in trials) * (1 - setup.within)
    ended = [t.ended for t in trials]
    span = timeline.window(setup.submit, max(end, setup.submit))
    idle = span.idle_node_seconds()
    return SweepResult(
        policy=label or policy,
        trials=trials,
        best=max(t.curve.best(setup.epochs) for t in trials),
        within=setup.within,
        time_to_best_s=_time_to_best(trials, target, setup.submit),
        search_s=None if None in ended else max(e for e in ended if e is not None) - setup.submit,
        node_seconds={j.name: j.node_seconds for j in result.jobs},
        samples=result.trained,
        upper_bound=idle * best_node_rate(jobs),
        idle_node_seconds=idle,
        revalued=marks.revalued,
        replay=result,
    )


__all__ = [
    "SweepMarks",
    "SweepResult",
    "SweepSetup",
    "Trial",
    "TrialSearch",
    "ask_trials",
    "sweep_replay",
]
