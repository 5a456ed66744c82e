"""The integer-count model has the same optimum as FreeTrain's per-node model."""

from __future__ import annotations

import random

import pytest

from parsl_malleable.allocate import NodeWindow, ScalingCurve, TrainingJob, allocate
from parsl_malleable.allocate.pernode_model import build_pernode_model
from parsl_malleable.allocate.solve import solve_problem

from .helpers import assert_valid


def random_instance(seed: int) -> tuple[list[TrainingJob], list[str], float]:
    rng = random.Random(seed)
    n_nodes = rng.randint(5, 9)
    nodes = [f"n{i}" for i in range(n_nodes)]
    rng.shuffle(nodes)
    jobs, taken = [], 0
    for j in range(rng.randint(2, 4)):
        hi = rng.randint(2, 5)
        lo = rng.randint(1, 2)
        sizes = sorted(rng.sample(range(1, hi + 1), k=min(hi, 3)))
        rate, points = 0.0, []
        for n in sizes:  # increasing, sometimes super-linear: not concave
            rate += rng.uniform(20, 120) * (n - (points[-1][0] if points else 0))
            points.append((n, rate))
        size = rng.choice([0, lo, hi])
        current = tuple(nodes[taken : taken + size]) if taken + size <= n_nodes // 2 else ()
        taken += len(current)
        jobs.append(
            TrainingJob(
                f"j{j}",
                lo,
                hi,
                ScalingCurve.from_points(points),
                rng.uniform(5, 40),
                rng.uniform(5, 20),
                rng.uniform(0.5, 3.0),
                current,
            )
        )
    return jobs, nodes[taken:], rng.choice([60.0, 300.0, 1200.0])


# The per-node model is FreeTrain's: a pause costs the rate before the rescale. The time limit is
# only a safety net for these small instances.
PER_NODE_TERMS = {"pause_rate": "before", "time_limit": 30.0}


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("objective", ["throughput", "weighted", "speedup", "maxmin"])
def test_count_model_matches_per_node_model(seed, objective):
    jobs, free, t_fwd = random_instance(seed)
    cap = None if seed % 3 else len(free)
    every = [*free, *(n for job in jobs for n in job.current_nodes)]
    windows = [NodeWindow(tuple(every), t_fwd)]
    per_node = build_pernode_model(jobs, free, t_fwd, objective=objective, node_cap=cap)
    outcome = solve_problem(per_node.problem, "cbc", time_limit=30, gap_rel=0)
    assert outcome.status == "optimal"
    reference = per_node.problem.objective.value()
    for solver in ("cbc", "highs"):
        alloc = allocate(
            jobs,
            free,
            windows,
            objective=objective,
            solver=solver,
            node_cap=cap,
            gap_rel=0,
            max_horizon_s=t_fwd,
            **PER_NODE_TERMS,
        )
        assert alloc.status == "optimal" and alloc.solver == solver
        assert alloc.horizon_s == t_fwd
        assert alloc.objective == pytest.approx(reference, rel=1e-6, abs=1e-6)
        assert_valid(alloc, jobs, free, cap)
        cold = allocate(
            jobs,
            free,
            windows,
            objective=objective,
            solver=solver,
            node_cap=cap,
            gap_rel=0,
            max_horizon_s=t_fwd,
            **PER_NODE_TERMS,
            warm_start=False,
        )
        assert cold.objective == pytest.approx(reference, rel=1e-6, abs=1e-6)
    # The per-node optimum itself respects the same rules.
    ids = per_node.node_ids()
    for job in jobs:
        got = set(ids[job.name])
        assert len(got) == 0 or job.min_nodes <= len(got) <= job.max_nodes
        assert set(job.current_nodes) <= got or got <= set(job.current_nodes)
