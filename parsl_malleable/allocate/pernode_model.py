"""FreeTrain's published per-node MILP, kept as the reference the count model is checked against.

One binary ``a[j][i]`` per (job, node), the same SOS2 throughput block, and one forward-looking
time ``T_fwd`` for every node. Its size is O(jobs x nodes): tests use it on small instances to
prove that the integer-count model has the same optimum; the benchmark measures how it scales.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulp

from parsl_malleable.allocate.objectives import job_scale, set_milp_objective
from parsl_malleable.allocate.piecewise import add_piecewise_rate
from parsl_malleable.allocate.spec import TrainingJob


@dataclass
class PerNodeModel:
    """A built per-node model and its assignment binaries ``a[job][node]``."""

    problem: pulp.LpProblem
    a: dict[str, dict[str, pulp.LpVariable]]

    def node_ids(self) -> dict[str, tuple[str, ...]]:
        """Nodes assigned to each job in the current solution."""
        return {
            name: tuple(n for n, v in row.items() if (v.value() or 0.0) > 0.5)
            for name, row in self.a.items()
        }


def build_pernode_model(
    jobs: Sequence[TrainingJob],
    free_nodes: Sequence[str],
    t_fwd: float,
    *,
    objective: str = "throughput",
    node_cap: int | None = None,
    charge_start: bool = True,
) -> PerNodeModel:
    """FreeTrain's model: maximise ``sum_j T_fwd * f_j(n_j) - rescale losses`` (scaled by 1/T).

    The objective is divided by ``T_fwd`` so that its value equals the count model's with every
    window equal to ``T_fwd``.
    """
    problem = pulp.LpProblem("allocate_per_node", pulp.LpMaximize)
    nodes = [*free_nodes, *(n for job in jobs for n in job.current_nodes)]
    a: dict[str, dict[str, pulp.LpVariable]] = {}
    on_node: dict[str, list[tuple[pulp.LpVariable, float]]] = {n: [] for n in nodes}
    scores = []
    everything: list[tuple[pulp.LpVariable, float]] = []
    for j, job in enumerate(jobs):
        mine = set(job.current_nodes)
        row = {n: problem.add_variable(f"a{j}_{i}", cat=pulp.LpBinary) for i, n in enumerate(nodes)}
        a[job.name] = row
        for n, var in row.items():
            on_node[n].append((var, 1.0))
        block = add_piecewise_rate(problem, job, f"{j}")
        problem += block.count - pulp.LpAffineExpression([(v, 1.0) for v in row.values()]) == 0
        everything.extend((v, 1.0) for v in row.values())
        losses: list[tuple[pulp.LpVariable, float]] = []
        if mine:
            up = problem.add_variable(f"up{j}", cat=pulp.LpBinary)
            down = problem.add_variable(f"dn{j}", cat=pulp.LpBinary)
            problem += up + down <= 1
            for n, var in row.items():
                if n in mine:
                    problem += var + down >= 1
                else:
                    problem += var - up <= 0
            losses += [(up, job.scale_up_cost * job.current_rate)]
            losses += [(down, job.scale_down_cost * job.current_rate)]
        elif charge_start:
            losses += [(v, c * job.scale_up_cost) for v, c in block.rate.items()]
        alpha = job_scale(job, objective) / t_fwd
        score = pulp.LpAffineExpression([(v, alpha * t_fwd * c) for v, c in block.rate.items()])
        score.addInPlace(pulp.LpAffineExpression([(v, -alpha * c) for v, c in losses]))
        scores.append(score)
    for terms in on_node.values():
        problem += pulp.LpAffineExpression(terms) <= 1
    if node_cap is not None:
        problem += pulp.LpAffineExpression(everything) <= node_cap
    set_milp_objective(problem, scores, objective)
    return PerNodeModel(problem, a)
