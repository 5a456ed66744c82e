"""The decision: usable nodes + jobs + curves -> which node goes to which job.

A pure function of its inputs (no clock, no I/O), so the live controller and the replay make
the same decision from the same state. Curves come from the user, else from the profiler's
measurements with an optimistic bonus where it is unsure (so that unmeasured sizes get tried),
else from a prior of linear scaling. ``curve_model="points"`` is MalleTrain's model instead:
the measured points joined by straight lines, taken at face value.

Objectives are the allocator's, plus ``completion``: each job's samples weighted by its priority
over the samples it has left (relative to the mean), so that jobs near their end are finished
first, as shortest-remaining-first does for the mean completion time.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Annotated, Literal

from pydantic import Field, StrictBool

from parsl_malleable.allocate.api import allocate
from parsl_malleable.allocate.curve import ScalingCurve
from parsl_malleable.allocate.objectives import check_objective
from parsl_malleable.allocate.settings import SOLVE_DEFAULTS, PauseRate
from parsl_malleable.allocate.solve import check_solver
from parsl_malleable.allocate.spec import NodeWindow, TrainingJob
from parsl_malleable.controller.admission import admit
from parsl_malleable.controller.model import Decision, JobSpec, JobTerms
from parsl_malleable.errors import ConfigError
from parsl_malleable.inputs import Number, WholeCount, boundary
from parsl_malleable.profile.design import size_grid
from parsl_malleable.profile.points import points_curve
from parsl_malleable.profile.profiler import ScalabilityProfiler


@boundary(ConfigError)
class PolicySettings:
    """How decisions are made.

    ``objective``/``solver``/``time_limit_s``/``gap_rel`` go to the allocator;
    ``mip_node_limit`` caps the branch-and-bound nodes of each solve (None: no cap, the solve
    ends at ``time_limit_s`` or the gap, as live decisions do): with one thread, a decision is
    then the same on any machine under any load, and ``time_limit_s`` is only a safety net
    (the replay's mode, :mod:`parsl_malleable.replay.policies`);
    ``default_window_s`` is the window of a node whose block has no known end;
    ``max_horizon_s`` caps the plan;
    ``scale_up_s``/``scale_down_s`` are the rescale pauses assumed until the profiler has
    measured some; ``explore_kappa`` is the optimism (in standard errors) given to sizes the
    profiler is unsure of; ``prior_rate`` is the samples/s per node assumed for a job nothing is
    known about (default: the mean one-node rate of the jobs measured so far, else 1);
    ``curve_model`` is ``gp`` (the profiler's model) or ``points`` (MalleTrain's);
    ``charge_start=False`` plans as FreeTrain does, with no pause for a job started from 0 nodes;
    ``pause_rate`` is the rate a rescale's pause costs: ``after`` it (every rank pauses, the
    joining ones too, as the runtime does) or ``before`` it (FreeTrain's model, which prices
    growing a one-node job to 29 nodes at one node's pause);
    ``completion_decay`` is the weight ratio between consecutive jobs of the ``completion``
    objective (see :func:`completion_weights`); ``threads`` is the solver's thread count (one:
    the models have a few hundred columns, and HiGHS's thread pool made each solve of a Summit
    replay 1.6 times slower on two cores; ``None`` lets the solver choose); ``max_running`` is
    the user's limit on jobs that run at once (``None``: the allocator decides how many, see
    :mod:`.admission`); ``max_waiting`` is how many waiting jobs one decision offers the
    allocator (:mod:`.admission`); above ``milp_max_jobs`` considered jobs a decision uses the
    allocator's greedy rule instead of the MILP (``None``: never), because building and solving
    a pulp model of a few hundred jobs took longer than the events it answers.
    """

    objective: str = SOLVE_DEFAULTS.objective
    solver: str = SOLVE_DEFAULTS.solver
    time_limit_s: Annotated[Number, Field(gt=0)] = SOLVE_DEFAULTS.time_limit_s
    mip_node_limit: Annotated[WholeCount, Field(ge=0)] | None = SOLVE_DEFAULTS.mip_node_limit
    gap_rel: Annotated[Number, Field(ge=0, lt=1)] = SOLVE_DEFAULTS.gap_rel
    default_window_s: Annotated[Number, Field(gt=0)] = SOLVE_DEFAULTS.default_window_s
    max_horizon_s: Annotated[Number, Field(gt=0)] = SOLVE_DEFAULTS.max_horizon_s
    max_classes: Annotated[WholeCount, Field(ge=1)] = SOLVE_DEFAULTS.max_classes
    scale_up_s: Annotated[Number, Field(ge=0)] = 5.0
    scale_down_s: Annotated[Number, Field(ge=0)] = 2.0
    explore_kappa: Annotated[Number, Field(ge=0)] = 1.0
    profiler: StrictBool = True
    prior_rate: Annotated[Number, Field(gt=0)] | None = None
    curve_model: Literal["gp", "points"] = "gp"
    charge_start: StrictBool = SOLVE_DEFAULTS.charge_start
    pause_rate: PauseRate = SOLVE_DEFAULTS.pause_rate
    completion_decay: Annotated[Number, Field(gt=0, le=1)] = 0.5
    threads: Annotated[WholeCount, Field(ge=1)] | None = SOLVE_DEFAULTS.threads
    max_running: Annotated[WholeCount, Field(ge=1)] | None = None
    max_waiting: Annotated[WholeCount, Field(ge=1)] | None = None
    milp_max_jobs: Annotated[WholeCount, Field(ge=1)] | None = 128

    def __post_init__(self) -> None:
        if self.objective != "completion":
            check_objective(self.objective)
        check_solver(self.solver)


def _profiled(spec: JobSpec, profiler: ScalabilityProfiler) -> ScalingCurve:
    """The profiler's curve for ``spec`` on its grid only: a breakpoint at every size measured
    so far (up to max_nodes of them) doubled the MILP's binaries and its solve time for a curve
    that is the same smooth model between grid points."""
    return profiler.curve(spec.profile_key, spec.max_nodes, size_grid(spec.max_nodes))


def job_curve(
    spec: JobSpec,
    profiler: ScalabilityProfiler,
    settings: PolicySettings,
    prior_rate: float,
) -> tuple[ScalingCurve, str]:
    """The curve the allocator uses for ``spec`` and where it came from."""
    if spec.curve is not None:
        return spec.curve, "user"
    key = spec.profile_key
    if settings.curve_model == "points" and settings.profiler:
        measured = profiler.measured(key)
        return points_curve(measured, spec.max_nodes, prior_rate), (
            "points" if measured else "prior"
        )
    if settings.profiler and profiler.measured(key):
        return _profiled(spec, profiler).shifted(settings.explore_kappa), "profiled"
    # Linear scaling from zero: the prior never claims a size is worse than another.
    return ScalingCurve((0, spec.max_nodes), (0.0, prior_rate * spec.max_nodes)), "prior"


def reference_rate(
    jobs: Sequence[JobSpec], profiler: ScalabilityProfiler, settings: PolicySettings
) -> float:
    """Samples/s per node assumed for a job with no curve and no measurement."""
    if settings.prior_rate is not None:
        return settings.prior_rate
    rates = []
    seen_keys: set[tuple[str, int]] = set()
    for spec in jobs:
        if spec.curve is not None:
            rates.append(spec.curve(1))
            continue
        key = (spec.profile_key, spec.max_nodes)
        if key in seen_keys:
            continue  # a family counts once, however many of its jobs wait
        seen_keys.add(key)
        if settings.profiler and profiler.measured(spec.profile_key):
            # The curve is cached until the job's next sample; a fresh model prediction per
            # job and decision was a sixth of a replay's time.
            rates.append(_profiled(spec, profiler)(1))
    rates = [r for r in rates if r > 0]
    return sum(rates) / len(rates) if rates else 1.0


# Jobs ranked beyond this share the last weight: their order matters little (they get what is
# left) and weights of decay**40 would be lost in the solver's tolerances.
COMPLETION_RANKS = 8


def completion_weights(
    jobs: Sequence[JobSpec],
    progress: Mapping[str, float],
    unit_rates: Mapping[str, float],
    decay: float,
) -> dict[str, float]:
    """``completion`` weights: shortest remaining work first, as a soft priority.

    Jobs are ranked by remaining work (samples left over their one-node rate; ties in the order
    given, which is arrival order; unknown totals last) and the job of rank ``k`` weighs
    ``priority * decay**k``. The top job then grows while a node adds more to it than ``decay``
    times what it would add to the next one: jobs finish one after another, each at a size
    that still scales, instead of all together at the end (a weight per samples left alone
    keeps equal jobs equal, and they all finish late).
    """

    def work(spec: JobSpec) -> float:
        if spec.samples is None:
            return math.inf
        left = max(spec.samples - progress.get(spec.name, 0.0), 0.0)
        rate = unit_rates.get(spec.name, 0.0)
        return left / rate if rate > 0 else math.inf

    order = sorted(range(len(jobs)), key=lambda i: (work(jobs[i]), i))
    return {
        jobs[i].name: jobs[i].priority * decay ** min(rank, COMPLETION_RANKS)
        for rank, i in enumerate(order)
    }


def _rescale_cost(spec: JobSpec, profiler: ScalabilityProfiler, kind: str) -> float:
    given = spec.scale_up_s if kind == "up" else spec.scale_down_s
    return given if given is not None else profiler.rescale_cost(spec.profile_key, kind)


def _windows(remaining: Mapping[str, float | None]) -> list[NodeWindow]:
    by_length: dict[float, list[str]] = defaultdict(list)
    for node, seconds in remaining.items():
        if seconds is not None:
            by_length[round(max(0.0, seconds))].append(node)
    return [NodeWindow(tuple(nodes), length) for length, nodes in by_length.items()]


def _solver_for(settings: PolicySettings, jobs: int) -> str:
    """The MILP's solver, or the greedy rule for a decision over ``milp_max_jobs`` jobs."""
    too_many = settings.milp_max_jobs is not None and jobs > settings.milp_max_jobs
    return "greedy" if too_many and settings.solver in ("highs", "cbc") else settings.solver


def decide(
    *,
    number: int,
    now: float,
    reason: str,
    jobs: Sequence[JobSpec],
    holdings: Mapping[str, Sequence[str]],
    remaining: Mapping[str, float | None],
    profiler: ScalabilityProfiler,
    settings: PolicySettings,
    progress: Mapping[str, float] | None = None,
) -> Decision:
    """Allocate the usable nodes (``remaining``: node -> seconds its window has left, None if
    unknown) to ``jobs``; ``holdings`` are the usable nodes each job runs on now;
    ``progress`` the samples each job has trained (for the ``completion`` objective)."""
    began = time.perf_counter()
    prior = reference_rate(jobs, profiler, settings)
    cache: dict[tuple[object, ...], tuple[ScalingCurve, str]] = {}

    def curve_of(spec: JobSpec) -> tuple[ScalingCurve, str]:
        # Jobs of one family share their curve: computed once per decision, not per job.
        key = (spec.profile_key, spec.max_nodes, id(spec.curve) if spec.curve else None)
        if key not in cache:
            cache[key] = job_curve(spec, profiler, settings, prior)
        return cache[key]

    objective = settings.objective
    weights = {spec.name: spec.priority for spec in jobs}
    if objective == "completion":
        unit = {spec.name: curve_of(spec)[0](1) for spec in jobs}
        weights = completion_weights(jobs, progress or {}, unit, settings.completion_decay)
        objective = "weighted"

    def interchangeable(spec: JobSpec) -> tuple[object, ...]:
        user = (spec.curve.nodes, spec.curve.throughput) if spec.curve is not None else None
        return (
            spec.profile_key,
            user,
            spec.min_nodes,
            spec.max_nodes,
            weights[spec.name],
            spec.scale_up_s,
            spec.scale_down_s,
            spec.grow,
        )

    running = {name for name, held in holdings.items() if any(n in remaining for n in held)}
    jobs, waiting = admit(
        jobs,
        running,
        len(remaining),
        interchangeable,
        max_running=settings.max_running,
        max_waiting=settings.max_waiting,
    )
    sources: dict[str, str] = {}
    curves: dict[str, ScalingCurve] = {}
    for spec in jobs:
        curves[spec.name], sources[spec.name] = curve_of(spec)
    training: list[TrainingJob] = []
    kept: set[str] = set()
    held_count: dict[str, int] = {}
    for spec in jobs:
        curve = curves[spec.name]
        held = tuple(n for n in holdings.get(spec.name, ()) if n in remaining)
        held_count[spec.name] = len(held)
        # A job below its minimum (a node was lost) is planned afresh: its nodes are free.
        current = held if spec.min_nodes <= len(held) <= spec.max_nodes else ()
        kept.update(current)
        # A job that may not grow keeps what it holds (or starts at its minimum).
        largest = spec.max_nodes if spec.grow else max(spec.min_nodes, len(current))
        training.append(
            TrainingJob(
                name=spec.name,
                min_nodes=spec.min_nodes,
                max_nodes=largest,
                curve=curve,
                scale_up_cost=_rescale_cost(spec, profiler, "up"),
                scale_down_cost=_rescale_cost(spec, profiler, "down"),
                weight=weights[spec.name],
                current_nodes=current,
            )
        )
    free = [n for n in remaining if n not in kept]
    result = allocate(
        training,
        free,
        _windows(remaining),
        objective=objective,
        solver=_solver_for(settings, len(training)),
        time_limit=settings.time_limit_s,
        gap_rel=settings.gap_rel,
        default_window_s=settings.default_window_s,
        max_horizon_s=settings.max_horizon_s,
        max_classes=settings.max_classes,
        charge_start=settings.charge_start,
        pause_rate=settings.pause_rate,
        threads=settings.threads,
        mip_node_limit=settings.mip_node_limit,
    )
    owner = {node: name for name, ids in result.node_ids.items() for node in ids}
    terms: dict[str, JobTerms] = {}
    changes: dict[str, tuple[int, int]] = {}
    for job in training:
        before = held_count[job.name]
        after = result.nodes.get(job.name, 0)
        terms[job.name] = JobTerms(
            before, after, job.curve(before), job.curve(after), sources[job.name]
        )
        if before != after:
            changes[job.name] = (before, after)
    return Decision(
        number=number,
        time=now,
        reason=reason,
        owner=owner,
        terms=terms,
        objective=result.objective,
        solver=result.solver,
        status=result.status,
        seconds=time.perf_counter() - began,
        usable_nodes=len(remaining),
        fallback=result.fallback,
        message=result.message,
        changes=changes,
        waiting=waiting,
    )


__all__ = ["PolicySettings", "completion_weights", "decide", "job_curve", "reference_rate"]
