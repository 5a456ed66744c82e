"""The integer-count allocation MILP (nodes are interchangeable within a horizon class).

Variables per job ``j``: ``x[j][b]`` nodes of class ``b`` it holds after the decision, binaries
``up_j``/``down_j`` (grow by adding / shrink to a subset of its current nodes), and one
piecewise-linear throughput block per horizon segment. Size O(jobs x classes x breakpoints),
independent of the node count. The formulation is written out in docs/allocate.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulp

from parsl_malleable.allocate.horizon import HorizonClasses
from parsl_malleable.allocate.objectives import job_scale, set_milp_objective
from parsl_malleable.allocate.piecewise import add_envelope_rate, add_piecewise_rate
from parsl_malleable.allocate.spec import TrainingJob


@dataclass
class CountModel:
    """A built model: ``problem`` and the count variables ``x[job][class]`` (None: fixed 0)."""

    problem: pulp.LpProblem
    x: dict[str, list[pulp.LpVariable | None]]
    run: dict[str, pulp.LpVariable]
    grow: dict[str, tuple[pulp.LpVariable, pulp.LpVariable, tuple[int, ...]]]

    def start_values(self, counts: dict[str, list[int]]) -> dict[pulp.LpVariable, float]:
        """Values of the key integer variables for a known allocation (a MIP start)."""
        start: dict[pulp.LpVariable, float] = {}
        for name, row in self.x.items():
            for var, value in zip(row, counts[name], strict=True):
                if var is not None:
                    start[var] = float(value)
            start[self.run[name]] = float(sum(counts[name]) > 0)
            if name in self.grow:
                up, down, held = self.grow[name]
                same = list(counts[name]) == list(held)
                grew = all(x >= c for x, c in zip(counts[name], held, strict=True))
                start[up] = float(not same and grew)
                start[down] = float(not same and not grew)
        return start

    def counts(self) -> dict[str, list[int]]:
        """Nodes per job and class in the solver's current solution (rounded)."""
        return {
            name: [0 if v is None else round(v.value() or 0.0) for v in row]
            for name, row in self.x.items()
        }


def build_count_model(
    jobs: Sequence[TrainingJob],
    classes: HorizonClasses,
    *,
    objective: str = "throughput",
    node_cap: int | None = None,
    charge_start: bool = True,
    shrink_pauses: bool = True,
) -> CountModel:
    """Build the integer-count MILP for ``jobs`` over the horizon ``classes``.

    ``shrink_pauses=False`` drops the (big-M) cost of the pause a job takes when a class of its
    nodes ends: much faster to solve with several classes, at the price of over-valuing nodes
    with short windows by one scale-down pause.
    """
    problem = pulp.LpProblem("allocate_counts", pulp.LpMaximize)
    lengths = classes.lengths
    horizon = classes.horizon_s or 1.0
    n_classes = len(classes.ends)
    capacity = [classes.capacity(b) for b in range(n_classes)]
    x: dict[str, list[pulp.LpVariable | None]] = {}
    run: dict[str, pulp.LpVariable] = {}
    grow: dict[str, tuple[pulp.LpVariable, pulp.LpVariable, tuple[int, ...]]] = {}
    scores: list[pulp.LpAffineExpression] = []
    now_counts: list[tuple[pulp.LpVariable, float]] = []
    per_class: list[list[tuple[pulp.LpVariable, float]]] = [[] for _ in range(n_classes)]
    for j, job in enumerate(jobs):
        held = [len(h) for h in classes.held[job.name]]
        row: list[pulp.LpVariable | None] = []
        for b in range(n_classes):
            upper = min(job.max_nodes, capacity[b])
            var = problem.add_variable(f"x{j}_{b}", 0, upper, cat=pulp.LpInteger) if upper else None
            row.append(var)
            if var is not None:
                per_class[b].append((var, 1.0))
        x[job.name] = row
        terms: list[tuple[pulp.LpVariable, float]] = []
        losses: list[tuple[pulp.LpVariable, float]] = []
        blocks = []
        for s in range(n_classes):
            if s == 0:
                block = add_piecewise_rate(problem, job, f"{j}_{s}")
            else:
                block = add_envelope_rate(problem, job, f"{j}_{s}")
            blocks.append(block)
            there = [(v, -1.0) for v in row[s:] if v is not None]
            held_sum = pulp.LpAffineExpression(there)
            if s == 0:
                problem += block.count + held_sum == 0
            else:
                # Later segments run on what is left, or stop (below min_nodes, or not worth it).
                count = problem.add_variable(f"m{j}_{s}", 0, job.max_nodes, cat=pulp.LpInteger)
                problem += block.count - count == 0
                problem += count + held_sum <= 0
            terms.extend((v, c * lengths[s]) for v, c in block.rate.items())
        run[job.name] = blocks[0].run
        for v, c in blocks[0].count.items():
            now_counts.append((v, c))
        if sum(held) == 0:
            if charge_start:
                losses.extend((v, c * job.scale_up_cost) for v, c in blocks[0].rate.items())
        else:
            up = problem.add_variable(f"up{j}", cat=pulp.LpBinary)
            down = problem.add_variable(f"dn{j}", cat=pulp.LpBinary)
            problem += up + down <= 1
            grow[job.name] = (up, down, tuple(held))
            for b, var in enumerate(row):
                if var is None:
                    continue
                # No migration: keep every current node unless shrinking, add none unless growing.
                problem += var + held[b] * down >= held[b]
                problem += var - (var.upBound - held[b]) * up <= held[b]
            rate_now = job.current_rate
            losses.append((up, job.scale_up_cost * rate_now))
            losses.append((down, job.scale_down_cost * rate_now))
        big = max((r for _, r in job.curve.breakpoints(job.min_nodes, job.max_nodes)), default=0)
        for s in range(n_classes - 1):
            var = row[s]
            if var is None or job.scale_down_cost == 0 or not shrink_pauses:
                continue
            # Nodes of class s leave at the end of segment s: the job pauses to shrink.
            leaves = problem.add_variable(f"v{j}_{s}", cat=pulp.LpBinary)
            problem += var - var.upBound * leaves <= 0
            lost = problem.add_variable(f"L{j}_{s}", 0)
            pause = job.scale_down_cost
            problem += (
                pulp.LpAffineExpression(
                    [(lost, 1.0), (leaves, -pause * big)]
                    + [(v, -pause * c) for v, c in blocks[s + 1].rate.items()]
                )
                >= -pause * big
            )
            losses.append((lost, 1.0))
        alpha = job_scale(job, objective) / horizon
        score = pulp.LpAffineExpression()
        score.addInPlace(pulp.LpAffineExpression([(v, alpha * c) for v, c in terms]))
        score.addInPlace(pulp.LpAffineExpression([(v, -alpha * c) for v, c in losses]))
        scores.append(score)
    for b in range(n_classes):
        if per_class[b]:
            problem += pulp.LpAffineExpression(per_class[b]) <= capacity[b]
    if node_cap is not None:
        problem += pulp.LpAffineExpression(now_counts) <= node_cap
    set_milp_objective(problem, scores, objective)
    return CountModel(problem, x, run, grow)
