"""Run a pulp model with CBC or HiGHS under a work or time limit and report what came back.

A solve stopped by its wall-clock limit depends on how fast the machine ran it (the same replay
trained different samples beside two busy loops); a limit on branch-and-bound nodes
(``node_limit``: HiGHS ``mip_max_nodes``, CBC ``maxNodes``), single-threaded, stops at the same
point on any machine. With one, the wall-clock limit is only a safety net, and a solve it stops
says so in its outcome (``time_limited``) and in its message (:data:`WALL_CLOCK_STOP`).
"""

from __future__ import annotations

import math
import os
import threading
import time
import warnings
from dataclasses import dataclass
from typing import cast

import numpy as np
import pulp

from parsl_malleable.allocate.errors import AllocationInputError

SOLVERS = ("cbc", "highs", "greedy", "equal")


def check_solver(name: str) -> str:
    """Return ``name`` if it is a known solver, else raise naming the choices."""
    if name not in SOLVERS:
        raise AllocationInputError(f"solver {name!r} is not one of {', '.join(SOLVERS)}")
    return name


# Said in the message of every solve its wall-clock limit stopped: callers that asked for a
# deterministic solve (a node limit) count these to report that the machine's speed mattered.
WALL_CLOCK_STOP = "stopped by its wall-clock limit"


def hit_wall_clock(message: str) -> bool:
    """Whether an allocation or decision ``message`` says a solve hit its wall-clock limit."""
    return WALL_CLOCK_STOP in message


@dataclass(frozen=True)
class SolveOutcome:
    """``status``: optimal, feasible (stopped early with an incumbent), or failed;
    ``time_limited``: the wall-clock limit stopped the solve (with or without an incumbent)."""

    status: str
    has_solution: bool
    seconds: float
    message: str = ""
    time_limited: bool = False


_banner_lock = threading.Lock()
_banner_shown = False


def _swallow_highs_banner() -> None:
    """Make the process's first ``highspy.Highs()`` with stdout pointed at /dev/null.

    HiGHS prints its banner once per process when the first model is created, before pulp can
    set ``output_flag``; in a campaign it would land in the middle of the live view.
    """
    global _banner_shown
    with _banner_lock:
        if _banner_shown:
            return
        _banner_shown = True
        try:
            import highspy
        except ImportError:
            return  # pulp says itself that HiGHS is not available

        saved = os.dup(1)
        try:
            with open(os.devnull, "wb") as null:
                os.dup2(null.fileno(), 1)
                highspy.Highs()
        finally:
            os.dup2(saved, 1)
            os.close(saved)


# HiGHS keeps one thread pool per calling thread (its executor handle is thread-local), sized
# by that thread's first solve: a later solve on the same thread asking for another thread
# count fails at once ("Not Solved"), and a reset on one thread does not touch another's. The
# count each thread's pool was built for is kept beside it and the pool rebuilt when a solve on
# that thread asks for another.
_pool = threading.local()


def _match_thread_pool(threads: int | None) -> None:
    built_for = getattr(_pool, "threads", "unset")
    if built_for != "unset" and built_for != threads:
        import highspy

        highspy.Highs.resetGlobalScheduler(True)
    _pool.threads = threads


class _StartedHiGHS(pulp.HiGHS):
    """pulp's HiGHS plus a MIP start, and the statuses pulp 3.3 does not map.

    pulp numbers the HiGHS columns in the order of ``lp.variables()`` and stores the number in
    ``var.index`` (``buildSolverModel``), so the start is passed by those numbers, once the
    model is built. A complete start is checked and kept as the incumbent at once; a partial
    one makes HiGHS solve a sub-MIP (at most ``mip_max_start_nodes``) to complete it first.
    """

    def __init__(
        self, start: dict[pulp.LpVariable, float], threads: int | None = None, **options: object
    ) -> None:
        _swallow_highs_banner()
        super().__init__(threads=threads, **options)
        self.start = start
        self.pool_threads = threads
        self.report = ""
        self.time_limited = False

    def callSolver(self, lp: pulp.LpProblem) -> None:
        import highspy

        _match_thread_pool(self.pool_threads)
        given = [(v.index, self.start[v]) for v in lp.variables() if v in self.start]
        if given:
            index = np.array([i for i, _ in given], dtype=np.int32)
            value = np.array([x for _, x in given], dtype=np.float64)
            lp.solverModel.setSolution(len(index), index, value)
        lp.solverModel.run()
        highs = lp.solverModel
        nodes = highs.getInfo().mip_node_count
        self.time_limited = highs.getModelStatus() == highspy.HighsModelStatus.kTimeLimit
        self.report = (
            f"HiGHS {highs.modelStatusToString(highs.getModelStatus()).lower()} after "
            f"{nodes} nodes and {highs.getRunTime():.3f} s"
        )

    def findSolutionValues(self, lp: pulp.LpProblem) -> tuple[int, int]:
        try:
            return cast(tuple[int, int], super().findSolutionValues(lp))
        except KeyError:
            # pulp 3.3 has no entry for kSolutionLimit (node and solution limits) or
            # kMemoryLimit: read them as a stop with or without an incumbent. The values are
            # already assigned by then (the status is looked up last).
            info = lp.solverModel.getInfo()
            if info.primal_solution_status == FEASIBLE_SOLUTION:
                return pulp.LpStatusOptimal, pulp.LpSolutionIntegerFeasible
            return pulp.LpStatusNotSolved, pulp.LpSolutionNoSolutionFound


# HiGHS's primal_solution_status for a feasible point (kSolutionStatusFeasible).
FEASIBLE_SOLUTION = 2


def start_violation(
    problem: pulp.LpProblem, start: dict[pulp.LpVariable, float], tol: float = 1e-6
) -> str:
    """The first bound or constraint ``start`` breaks (by more than ``tol``), or ``""``.

    Explains why a solver dropped a start: a missing value, a broken bound, or a row.
    """
    for var in problem.variables():
        if var not in start:
            return f"no start value for {var.name}"
        value = start[var]
        low = -math.inf if var.lowBound is None else var.lowBound
        high = math.inf if var.upBound is None else var.upBound
        if not low - tol <= value <= high + tol:
            return f"{var.name} = {value:g} outside [{low:g}, {high:g}]"
    for number, row in enumerate(problem.constraints()):
        # A constraint stores ``lhs - rhs`` (constant included) and its sense against 0.
        activity = float(row.constant) + sum(c * start[v] for v, c in row.items())
        scale = tol * max(1.0, abs(float(row.constant)))
        if (
            (row.sense == pulp.LpConstraintLE and activity > scale)
            or (row.sense == pulp.LpConstraintGE and activity < -scale)
            or (row.sense == pulp.LpConstraintEQ and abs(activity) > scale)
        ):
            return f"constraint {row.name or number} ({row.sense:+d}) off by {activity:g}"
    return ""


def make_solver(
    name: str,
    time_limit: float,
    gap_rel: float,
    threads: int | None = None,
    start: dict[pulp.LpVariable, float] | None = None,
    node_limit: int | None = None,
) -> pulp.LpSolver:
    """The pulp solver object for ``cbc`` or ``highs``.

    ``node_limit`` caps the branch-and-bound nodes (HiGHS ``mip_max_nodes``, CBC ``maxNodes``;
    0: the root only): with ``threads=1`` the solve then stops at the same point however
    loaded the machine is, as long as ``time_limit`` does not bind first.
    """
    if time_limit <= 0:
        raise AllocationInputError(f"time_limit must be > 0 seconds, got {time_limit}")
    if node_limit is not None and node_limit < 0:
        raise AllocationInputError(f"node_limit must be >= 0, got {node_limit}")
    if name == "cbc":
        with warnings.catch_warnings():
            # pulp 3.3 announces PULP_CBC_CMD's removal in 4.0; it is the CBC bundled here.
            warnings.simplefilter("ignore", DeprecationWarning)
            for var, value in (start or {}).items():
                var.setInitialValue(value)
            return pulp.PULP_CBC_CMD(
                msg=False,
                timeLimit=time_limit,
                gapRel=gap_rel,
                threads=threads,
                warmStart=bool(start),
                maxNodes=node_limit,
            )
    if name == "highs":
        work: dict[str, object] = {} if node_limit is None else {"mip_max_nodes": node_limit}
        return _StartedHiGHS(
            start or {}, msg=False, timeLimit=time_limit, gapRel=gap_rel, threads=threads, **work
        )
    check_solver(name)
    raise AssertionError(f"solver {name!r} is listed in SOLVERS but has no branch here")


def solve_problem(
    problem: pulp.LpProblem,
    name: str | pulp.LpSolver,
    *,
    time_limit: float,
    gap_rel: float,
    threads: int | None = None,
    start: dict[pulp.LpVariable, float] | None = None,
    node_limit: int | None = None,
) -> SolveOutcome:
    """Solve ``problem`` in place; never raises for solver trouble (it is reported instead).

    ``start`` gives the values of a known feasible allocation (every variable, see
    ``CountModel.start_values``): the solver starts from it (CBC ``mipstart``, HiGHS
    ``setSolution``). ``node_limit``: see :func:`make_solver`.
    """
    if isinstance(name, str):
        solver = make_solver(name, time_limit, gap_rel, threads, start, node_limit)
    else:
        solver = name
    # not `start`: that is the MIP start passed in
    began = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            problem.solve(solver)
    except (pulp.PulpSolverError, OSError) as exc:
        return SolveOutcome("failed", False, time.perf_counter() - began, str(exc))
    seconds = time.perf_counter() - began
    # What HiGHS says it did (status, nodes, time): the reason for an early stop.
    detail = getattr(solver, "report", "")
    note = f" ({detail})" if detail else ""
    # HiGHS names the stop; CBC's status line is gone with pulp's temporary files, so a CBC
    # solve that ran its whole limit is taken as stopped by it. (A solver passed in configured
    # has its own limit, unknown here.)
    timed = getattr(solver, "time_limited", None)
    by_clock = isinstance(name, str) and seconds >= time_limit
    limited = bool(timed) if timed is not None else by_clock
    clock = f"{WALL_CLOCK_STOP} ({time_limit:g} s)"
    if problem.sol_status == pulp.LpSolutionOptimal:
        return SolveOutcome("optimal", True, seconds)
    if problem.sol_status == pulp.LpSolutionIntegerFeasible:
        if limited:
            message = f"{clock}{note}"
        elif node_limit is not None:
            message = f"stopped at the node limit ({node_limit}) or gap{note}"
        else:
            message = f"stopped at the time limit or gap{note}"
        return SolveOutcome("feasible", True, seconds, message, limited)
    text = pulp.LpStatus.get(problem.status, str(problem.status))
    message = f"solver status {text}{note}" + (f"; {clock}" if limited else "")
    return SolveOutcome("failed", False, seconds, message, limited)
