"""The allocator's objectives: how much one job's samples are worth.

Every objective scores a job ``j`` by ``alpha_j * (V_j - L_j) / H``: ``V_j`` the samples it
would process over the horizon ``H``, ``L_j`` the samples lost to rescaling pauses. They
differ in ``alpha_j``; ``maxmin`` maximises the smallest job score instead of the sum.
"""

from __future__ import annotations

from collections.abc import Sequence

import pulp

from parsl_malleable.allocate.errors import AllocationInputError
from parsl_malleable.allocate.spec import TrainingJob

OBJECTIVES = ("throughput", "weighted", "speedup", "maxmin")

# Weight of the total in the max-min objective: breaks ties between allocations with the same
# minimum without letting the total override fairness.
MAXMIN_TIE_WEIGHT = 1e-3


def check_objective(name: str) -> str:
    """Return ``name`` if it is a known objective, else raise naming the choices."""
    if name not in OBJECTIVES:
        raise AllocationInputError(f"objective {name!r} is not one of {', '.join(OBJECTIVES)}")
    return name


def single_node_rate(job: TrainingJob) -> float:
    """Throughput on one node, the unit of speedup (1 if the curve is zero there)."""
    rate = job.curve(1)
    return rate if rate > 0 else 1.0


def job_scale(job: TrainingJob, objective: str) -> float:
    """``alpha_j``: the factor that turns the job's samples into objective units."""
    if objective == "throughput":
        return 1.0
    if objective == "weighted":
        return job.weight
    return 1.0 / single_node_rate(job)


def combine(scores: Sequence[float], objective: str) -> float:
    """Objective value from per-job scores ``alpha_j * (V_j - L_j) / H``."""
    if not scores:
        return 0.0
    if objective == "maxmin":
        return min(scores) + MAXMIN_TIE_WEIGHT * sum(scores) / len(scores)
    return float(sum(scores))


def set_milp_objective(
    problem: pulp.LpProblem, scores: Sequence[pulp.LpAffineExpression], objective: str
) -> None:
    """Make ``problem`` maximise what :func:`combine` computes, from per-job score expressions.

    ``maxmin`` adds a floor variable ``t`` below every score and maximises ``t`` plus the
    tie-breaking share of the total; the other objectives maximise the total.
    """
    total = pulp.LpAffineExpression()
    for score in scores:
        total.addInPlace(score)
    if objective == "maxmin" and scores:
        floor = problem.add_variable("t")
        for score in scores:
            problem += score - floor >= 0
        problem += floor + (MAXMIN_TIE_WEIGHT / len(scores)) * total
    else:
        problem += total
