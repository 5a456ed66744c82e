"""Run a pulp model with CBC or HiGHS under a time limit and report what came back."""

from __future__ import annotations

import os
import threading
import time
import warnings
from dataclasses import dataclass

import numpy as np
import pulp

from parsl_malleable.allocate.errors import AllocationInputError

SOLVERS = ("cbc", "highs", "greedy", "equal")


def check_solver(name: str) -> str:
    """Return ``name`` if it is a known solver, else raise naming the choices."""
    if name not in SOLVERS:
        raise AllocationInputError(f"solver {name!r} is not one of {', '.join(SOLVERS)}")
    return name


@dataclass(frozen=True)
class SolveOutcome:
    """``status``: optimal, feasible (stopped early with an incumbent), or failed."""

    status: str
    has_solution: bool
    seconds: float
    message: str = ""


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


# HiGHS keeps one thread pool per process, sized by the first solve: a later solve asking for
# another thread count fails at once ("Not Solved"). The count it was built for is kept here
# and the pool rebuilt when a solve asks for another.
_pool_lock = threading.Lock()
_pool_threads: object = "unset"


def _match_thread_pool(threads: int | None) -> None:
    global _pool_threads
    with _pool_lock:
        if _pool_threads != "unset" and _pool_threads != threads:
            import highspy

            highspy.Highs.resetGlobalScheduler(True)
        _pool_threads = threads


class _StartedHiGHS(pulp.HiGHS):
    """pulp's HiGHS plus a (partial) MIP start: HiGHS completes it and uses it as incumbent."""

    def __init__(
        self, start: dict[pulp.LpVariable, float], threads: int | None = None, **options: object
    ) -> None:
        _swallow_highs_banner()
        super().__init__(threads=threads, **options)
        self.start = start
        self.pool_threads = threads

    def callSolver(self, lp: pulp.LpProblem) -> None:
        _match_thread_pool(self.pool_threads)
        if self.start:
            index = np.array([v.index for v in self.start], dtype=np.int32)
            value = np.array(list(self.start.values()), dtype=np.float64)
            lp.solverModel.setSolution(len(index), index, value)
        lp.solverModel.run()


def make_solver(
    name: str,
    time_limit: float,
    gap_rel: float,
    threads: int | None = None,
    start: dict[pulp.LpVariable, float] | None = None,
) -> pulp.LpSolver:
    """The pulp solver object for ``cbc`` or ``highs``."""
    if time_limit <= 0:
        raise AllocationInputError(f"time_limit must be > 0 seconds, got {time_limit}")
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
            )
    if name == "highs":
        return _StartedHiGHS(
            start or {}, msg=False, timeLimit=time_limit, gapRel=gap_rel, threads=threads
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
) -> SolveOutcome:
    """Solve ``problem`` in place; never raises for solver trouble (it is reported instead).

    ``start`` gives values of some integer variables from a known feasible allocation: the
    solver starts from it (CBC ``mipstart``, HiGHS ``setSolution``).
    """
    if isinstance(name, str):
        solver = make_solver(name, time_limit, gap_rel, threads, start)
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
    if problem.sol_status == pulp.LpSolutionOptimal:
        return SolveOutcome("optimal", True, seconds)
    if problem.sol_status == pulp.LpSolutionIntegerFeasible:
        return SolveOutcome("feasible", True, seconds, "stopped at the time limit or gap")
    text = pulp.LpStatus.get(problem.status, str(problem.status))
    return SolveOutcome("failed", False, seconds, f"solver status {text}")
