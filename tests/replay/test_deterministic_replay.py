"""A replay repeats exactly, however loaded the machine: its solves stop at a node limit.

With a 0.1 s wall-clock limit per solve the same 40-job Summit day took 20.19 h to its result
alone and 20.31 h beside two busy loops; the replay's policies now stop each solve at a number
of branch-and-bound nodes, single-threaded, and keep the wall-clock limit as a safety net that
the replay counts (``Replay.time_limited``) when it binds.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from parsl_malleable.replay.engine import Replay
from parsl_malleable.replay.idle import IdleTimeline
from parsl_malleable.replay.policies import make_policy
from parsl_malleable.replay.result import ReplayResult
from parsl_malleable.replay.scenario import summit_timeline, workload_jobs
from parsl_malleable.replay.workload import ReplayJob

# A tight gap and a one-node limit: a dozen of the replay's solves stop at the node limit (the
# path a wall-clock limit used to take), and some take well over 0.1 s.
GAP = 1e-5
NODES = 1

BUSY = "import sys\nprint('spinning', flush=True)\nwhile True:\n    pass\n"


@pytest.fixture(scope="module")
def day() -> tuple[IdleTimeline, list[ReplayJob]]:
    tl = summit_timeline(nodes=150, days=0.25)
    return tl, workload_jobs("imagenet-imgps-1001J", tl, limit=12)


@contextmanager
def busy_cpus() -> Iterator[None]:
    """A process spinning on every CPU for the duration (each has started when it yields)."""
    spinners: list[subprocess.Popen[str]] = []
    try:
        for _ in range(os.cpu_count() or 1):
            spinners.append(
                subprocess.Popen([sys.executable, "-c", BUSY], stdout=subprocess.PIPE, text=True)
            )
        for spinner in spinners:
            assert spinner.stdout is not None
            assert spinner.stdout.readline() == "spinning\n"
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
        for spinner in spinners:
            spinner.wait()
            if spinner.stdout is not None:
                spinner.stdout.close()


def run(day: tuple[IdleTimeline, list[ReplayJob]], **policy: object) -> tuple[Replay, ReplayResult]:
    tl, jobs = day
    replay = Replay(tl, jobs, make_policy("ours", **policy), max_jobs=None, seed=2)  # type: ignore[arg-type]
    return replay, replay.run()


def same_outside_the_clock(result: ReplayResult) -> ReplayResult:
    """``result`` less the seconds the machine took (the only fields allowed to differ)."""
    return dataclasses.replace(result, wall_s=0.0, decision_s=0.0)


def decisions(replay: Replay) -> list[tuple[object, ...]]:
    return [
        (d.time, d.reason, d.owner, d.objective, d.solver, d.status, d.fallback)
        for d in replay.core.decisions
    ]


def test_the_same_replay_alone_and_beside_busy_loops_is_identical(day):
    alone, quiet = run(day, gap_rel=GAP, mip_node_limit=NODES)
    with busy_cpus():
        loaded, busy = run(day, gap_rel=GAP, mip_node_limit=NODES)
    # The MILP decided, some of its solves stopped at the node limit, none at the clock.
    statuses = [d.status for d in alone.core.decisions if d.solver == "highs"]
    assert statuses.count("optimal") > 10 and statuses.count("feasible") > 0
    assert alone.time_limited == loaded.time_limited == 0
    assert quiet.fallbacks == 0
    assert decisions(alone) == decisions(loaded)
    assert same_outside_the_clock(quiet) == same_outside_the_clock(busy)
    assert quiet.trained > 0 and [j.finished for j in quiet.jobs] == [j.finished for j in busy.jobs]


def test_a_solve_stopped_by_the_clock_is_counted_and_reported(day, caplog):
    with caplog.at_level(logging.WARNING, logger="parsl_malleable"):
        replay, result = run(day, time_limit_s=1e-6)
    # Every solve that does not end in presolve meets a microsecond limit; each keeps the
    # greedy start it was given rather than falling back.
    assert replay.time_limited > 0.8 * result.decisions
    assert result.fallbacks == 0
    assert f"{replay.time_limited} of {result.decisions} decisions" in caplog.text
