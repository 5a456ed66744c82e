"""HiGHS solves with different thread counts on different threads all solve.

HiGHS keeps a thread pool per calling thread, sized by that thread's first solve. The allocator
once tracked one count per process: a controller thread's ``threads=1`` solve then hid that the
main thread's pool was sized for the default, and every later ``threads=1`` solve on the main
thread failed at once ("HiGHS not set after -1 nodes"): CI lost 17 replay tests to it.
"""

from __future__ import annotations

import threading

import pulp
import pytest

from parsl_malleable.allocate.solve import make_solver

pytest.importorskip("highspy")


def _solve(threads: int | None) -> tuple[str, str]:
    """A small knapsack-like MIP that HiGHS must branch on (so it uses its pool)."""
    prob = pulp.LpProblem("pools", pulp.LpMaximize)
    xs = [pulp.LpVariable(f"x{i}", 0, 10, cat="Integer") for i in range(30)]
    prob += pulp.lpSum((i % 7 + 1) * x for i, x in enumerate(xs))
    for k in range(10):
        prob += pulp.lpSum(((i * k) % 5 + 1) * x for i, x in enumerate(xs)) <= 37.5 + k
    solver = make_solver("highs", time_limit=60, gap_rel=0.0, threads=threads)
    prob.solve(solver)
    return pulp.LpStatus[prob.status], solver.report  # type: ignore[attr-defined]


def _on_a_thread(threads: int | None) -> tuple[str, str]:
    out: list[tuple[str, str]] = []
    worker = threading.Thread(target=lambda: out.append(_solve(threads)))
    worker.start()
    worker.join()
    return out[0]


@pytest.mark.parametrize(
    "plan",
    [
        # main's pool sized for the default, another thread's for 1, then main asks for 1
        [("main", None), ("thread", 1), ("main", 1)],
        [("thread", None), ("main", 1), ("thread", 1), ("main", None), ("main", 1)],
    ],
)
def test_every_solve_is_optimal_whatever_thread_asked_for_what(
    plan: list[tuple[str, int | None]],
) -> None:
    for where, threads in plan:
        status, report = _solve(threads) if where == "main" else _on_a_thread(threads)
        assert status == "Optimal", (where, threads, report)
        assert "optimal" in report, (where, threads, report)
