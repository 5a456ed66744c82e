"""``allocate``: decide how many (and which) idle nodes each training job gets."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence, Sized
from typing import TypedDict

import pulp

from parsl_malleable.allocate.assign import assign_nodes
from parsl_malleable.allocate.count_model import build_count_model
from parsl_malleable.allocate.equal import equal_counts
from parsl_malleable.allocate.errors import AllocationInputError, AllocationSolverError
from parsl_malleable.allocate.evaluate import objective_value
from parsl_malleable.allocate.greedy import greedy_counts
from parsl_malleable.allocate.horizon import HorizonClasses, classify
from parsl_malleable.allocate.objectives import check_objective
from parsl_malleable.allocate.options import AllocateOptions, check_node_count
from parsl_malleable.allocate.result import Allocation
from parsl_malleable.allocate.settings import SOLVE_DEFAULTS, PauseRate
from parsl_malleable.allocate.solve import check_solver, solve_problem, start_violation
from parsl_malleable.allocate.spec import NodeWindow, TrainingJob
from parsl_malleable.inputs import validated

log = logging.getLogger(__name__)


class PauseOptions(TypedDict):
    """How pauses are charged, passed alike to the model, the greedy rule and the evaluation."""

    charge_start: bool
    shrink_pauses: bool
    pause_rate: PauseRate


def check_counts(
    jobs: Sequence[TrainingJob],
    counts: dict[str, list[int]],
    classes: HorizonClasses,
    node_cap: int | None,
) -> str:
    """Why ``counts`` break a constraint, or ``""`` if they are feasible."""
    for b in range(len(classes.ends)):
        used = sum(counts[job.name][b] for job in jobs)
        if used > classes.capacity(b):
            return f"class {b}: {used} nodes used, {classes.capacity(b)} exist"
    total = 0
    for job in jobs:
        row = counts[job.name]
        held = [len(h) for h in classes.held[job.name]]
        n = sum(row)
        total += n
        if any(v < 0 for v in row) or (n and not job.min_nodes <= n <= job.max_nodes):
            return f"job {job.name}: {n} nodes outside {{0}} or [{job.min_nodes}, {job.max_nodes}]"
        grows = all(x >= c for x, c in zip(row, held, strict=True))
        shrinks = all(x <= c for x, c in zip(row, held, strict=True))
        if not (grows or shrinks):
            return f"job {job.name}: would migrate (drops some current nodes and adds others)"
    if node_cap is not None and total > node_cap:
        return f"{total} nodes used, above the node cap {node_cap}"
    return ""


# Solvers meet their optimum within feasibility tolerances (~1e-6 relative): a greedy value
# that much above it is the same value, not a better start the solver failed to keep.
SAME_VALUE_REL = 1e-6


def _below(value: float, greedy_value: float) -> bool:
    """Whether the solver's ``value`` is really worse than the greedy one (not just rounding)."""
    return greedy_value > value + SAME_VALUE_REL * max(1.0, abs(value), abs(greedy_value))


def _lost_start(
    problem: pulp.LpProblem, start: dict[pulp.LpVariable, float], limit: float | None
) -> str:
    """Why a solver given the greedy start returned nothing, or something worse than it."""
    broken = start_violation(problem, start)
    if broken:
        return f"the greedy start is not feasible in the model ({broken})"
    # The start satisfies every row, so the solver never kept it: it ran out of time first
    # (CBC 2.10 also reports "Infeasible", or crashes, when its preprocessing is cut short).
    within = f" ({limit:g} s limit)" if limit is not None else ""
    return f"the greedy start is feasible; the solver stopped before using it{within}"


def _stop_useless_jobs(
    jobs: Sequence[TrainingJob], counts: dict[str, list[int]]
) -> tuple[dict[str, list[int]], list[str]]:
    """Give 0 nodes to jobs whose curve is 0 at every allowed size (and name them).

    Such nodes add nothing to any objective, so a solver may leave them there or not; holding
    nodes for no samples is the wrong answer either way. Dropping them to 0 keeps feasibility
    (a shrink to the empty subset) and the objective value (their score is 0 either way).
    """
    useless = [
        job.name
        for job in jobs
        if sum(counts[job.name])
        and not any(rate > 0 for _, rate in job.curve.breakpoints(job.min_nodes, job.max_nodes))
    ]
    fixed = {name: ([0] * len(row) if name in useless else row) for name, row in counts.items()}
    return fixed, useless


def allocate(
    jobs: Sequence[TrainingJob],
    free_nodes: Sequence[str],
    windows: Iterable[NodeWindow] = (),
    *,
    objective: str = SOLVE_DEFAULTS.objective,
    solver: str | pulp.LpSolver = SOLVE_DEFAULTS.solver,
    time_limit: float = SOLVE_DEFAULTS.time_limit_s,
    node_cap: int | None = None,
    default_window_s: float = SOLVE_DEFAULTS.default_window_s,
    max_horizon_s: float = SOLVE_DEFAULTS.max_horizon_s,
    max_classes: int = SOLVE_DEFAULTS.max_classes,
    gap_rel: float = SOLVE_DEFAULTS.gap_rel,
    charge_start: bool = SOLVE_DEFAULTS.charge_start,
    shrink_pauses: bool = True,
    pause_rate: PauseRate = SOLVE_DEFAULTS.pause_rate,
    warm_start: bool = True,
    fallback: bool = True,
    threads: int | None = SOLVE_DEFAULTS.threads,
    mip_node_limit: int | None = SOLVE_DEFAULTS.mip_node_limit,
) -> Allocation:
    """Nodes per training job for the next horizon.

    ``free_nodes`` are idle nodes no job holds; jobs' ``current_nodes`` are also reallocatable
    (each job keeps a subset of its nodes or keeps them all and adds). ``windows`` give each
    node's predicted remaining idle time (nodes without one stay ``default_window_s``); the
    plan covers up to ``max_horizon_s`` in at most ``max_classes`` horizon classes.
    ``objective`` is ``throughput``, ``weighted``, ``speedup`` or ``maxmin``; ``node_cap`` caps
    the nodes used (every solver keeps to it: the greedy rule shrinks running jobs when they
    hold more). Free and held nodes together may not exceed ``options.MAX_NODES``. ``solver``
    is ``cbc``, ``highs``, ``greedy`` or a configured ``pulp.LpSolver`` (then ``time_limit``
    and ``gap_rel`` are its own business); ``equal`` shares the nodes equally and ignores the
    curves (a baseline, see ``allocate/equal.py``). If the solver fails or hits ``time_limit``
    without an incumbent, the greedy rule is used and ``fallback`` is set in the result (with
    ``fallback=False`` an ``AllocationSolverError`` is raised instead).
    ``charge_start=False`` drops the start-up cost of jobs at 0 nodes (FreeTrain's model);
    ``pause_rate`` is the rate a rescale's pause is lost at: ``before`` it (FreeTrain's model)
    or ``after`` it (every rank pauses, the joining ones too, as the elastic runtime does);
    ``shrink_pauses=False`` drops the pause when a class of nodes ends (faster, see
    docs/allocate.md). ``warm_start`` runs the greedy rule first and gives its allocation to
    the solver as a starting incumbent (a value for every variable of the model); a solver
    answer worse than it is replaced by it, and ``message`` says why the solver lost it.
    ``mip_node_limit`` caps the solver's branch-and-bound nodes (HiGHS ``mip_max_nodes``, CBC
    ``maxNodes``; None: no cap): with ``threads=1`` the answer is then the same on any machine,
    and ``time_limit`` is only a safety net. A solve stopped at the node limit keeps its
    incumbent (``status`` feasible) like one stopped at the time limit; one that the time limit
    stops although a node limit was given is logged as a warning, and its ``message`` says so
    (:func:`~parsl_malleable.allocate.solve.hit_wall_clock`).
    """
    check_objective(objective)
    if isinstance(solver, str):
        check_solver(solver)
    held = sum(len(job.current_nodes) for job in jobs)
    if isinstance(free_nodes, Sized):
        # Before validation copies them: a count far above any machine is a mistake to refuse.
        check_node_count(len(free_nodes), held)
    checked = validated(
        AllocateOptions,
        AllocationInputError,
        free_nodes=free_nodes,
        time_limit=time_limit,
        gap_rel=gap_rel,
        default_window_s=default_window_s,
        max_horizon_s=max_horizon_s,
        max_classes=max_classes,
        node_cap=node_cap,
        threads=threads,
        mip_node_limit=mip_node_limit,
    )
    free_nodes, node_cap = checked.free_nodes, checked.node_cap
    check_node_count(len(free_nodes), held)
    time_limit, gap_rel = checked.time_limit, checked.gap_rel
    mip_node_limit = checked.mip_node_limit
    names = [job.name for job in jobs]
    if len(set(names)) != len(names):
        raise AllocationInputError("two jobs have the same name")
    windows = list(windows)
    classes = classify(
        jobs,
        free_nodes,
        windows,
        default_window_s=default_window_s,
        max_horizon_s=max_horizon_s,
        max_classes=max_classes,
    )
    build_s = solve_s = 0.0
    used_solver = solver if isinstance(solver, str) else type(solver).__name__
    status, message, fell_back = "", "", False
    counts: dict[str, list[int]] | None = None
    value = 0.0
    options = PauseOptions(
        charge_start=charge_start, shrink_pauses=shrink_pauses, pause_rate=pause_rate
    )
    greedy: dict[str, list[int]] | None = None
    greedy_value = 0.0

    def run_greedy() -> None:
        nonlocal greedy, greedy_value, solve_s
        began = time.perf_counter()
        greedy = greedy_counts(jobs, classes, objective=objective, node_cap=node_cap, **options)
        greedy_value = objective_value(jobs, greedy, classes, objective, **options)
        solve_s += time.perf_counter() - began

    if solver == "equal":
        began = time.perf_counter()
        counts = equal_counts(jobs, classes, node_cap=node_cap)
        value = objective_value(jobs, counts, classes, objective, **options)
        solve_s = time.perf_counter() - began
        status = "heuristic"
    elif solver != "greedy" and jobs and classes.ends:
        began = time.perf_counter()
        model = build_count_model(jobs, classes, objective=objective, node_cap=node_cap, **options)
        build_s = time.perf_counter() - began
        if warm_start:
            run_greedy()
        start = model.start_values(greedy) if greedy is not None else None
        outcome = solve_problem(
            model.problem,
            solver,
            time_limit=time_limit,
            gap_rel=gap_rel,
            threads=threads,
            start=start,
            node_limit=mip_node_limit,
        )
        solve_s += outcome.seconds
        if outcome.time_limited and mip_node_limit is not None:
            # The node limit was asked for so that the answer would not depend on the
            # machine's speed; this one does, which whoever compares runs must hear about.
            log.warning(
                "allocator: %s hit its %g s wall-clock limit before its node limit (%d): "
                "this answer depends on the machine's speed",
                used_solver,
                time_limit,
                mip_node_limit,
            )
        status, message = outcome.status, outcome.message
        rejected = False
        if outcome.has_solution:
            counts = model.counts()
            problem = check_counts(jobs, counts, classes, node_cap)
            if problem:
                counts, status, message = None, "failed", f"solution rejected: {problem}"
                rejected = True
            else:
                value = float(model.problem.objective.value() or 0.0)
        if counts is not None and greedy is not None and _below(value, greedy_value):
            # Stopped early with an incumbent worse than the start it was given. The stop's own
            # note is kept: it may say that the wall-clock limit bound.
            below = f"incumbent {value:.6g} below the greedy {greedy_value:.6g}"
            counts, message = None, f"{message}; {below}" if message else below
        if counts is None and start is not None and not rejected:
            limit = time_limit if isinstance(solver, str) else None  # else the solver's own
            message = f"{message}; {_lost_start(model.problem, start, limit)}"
        if counts is None:
            if not fallback:
                raise AllocationSolverError(f"{used_solver}: {message or status}")
            log.warning(
                "allocator: %s %s (%s); using the greedy rule", used_solver, status, message
            )
            fell_back = True
        elif status == "feasible":
            log.info("allocator: %s stopped early, keeping its best incumbent", used_solver)
    if counts is None:
        if greedy is None:
            run_greedy()
        assert greedy is not None
        counts, value = greedy, greedy_value
        used_solver = "greedy"
        status = status if fell_back else "heuristic"
    broken = check_counts(jobs, counts, classes, node_cap)
    if broken:
        # The rules promise these constraints (the node cap included): never return otherwise.
        raise AllocationSolverError(f"{used_solver}: answer breaks a constraint: {broken}")
    counts, idle_jobs = _stop_useless_jobs(jobs, counts)
    if idle_jobs:
        note = f"zero throughput at every size, given 0 nodes: {', '.join(idle_jobs)}"
        message = f"{message}; {note}" if message else note
    node_ids, added, released = assign_nodes(jobs, counts, classes)
    return Allocation(
        nodes={name: len(ids) for name, ids in node_ids.items()},
        node_ids=node_ids,
        added=added,
        released=released,
        objective=value,
        solver=used_solver,
        status=status,
        fallback=fell_back,
        horizon_s=classes.horizon_s,
        build_s=build_s,
        solve_s=solve_s,
        message=message,
        node_window=dict(classes.remaining),
        expired=tuple(n for nodes in classes.gone.values() for n in nodes),
    )
