"""The integer-count allocation MILP (nodes are interchangeable within a horizon class).

Variables per job ``j``: ``x[j][b]`` nodes of class ``b`` it holds after the decision, binaries
``up_j``/``down_j`` (grow by adding / shrink to a subset of its current nodes), and one
piecewise-linear throughput block per horizon segment. Size O(jobs x classes x breakpoints),
independent of the node count. The formulation is written out in docs/allocate.md.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import pulp

from parsl_malleable.allocate.horizon import HorizonClasses
from parsl_malleable.allocate.objectives import job_scale, set_milp_objective
from parsl_malleable.allocate.piecewise import (
    PiecewiseRate,
    add_envelope_rate,
    add_piecewise_rate,
    concave_envelope,
)
from parsl_malleable.allocate.settings import PauseRate
from parsl_malleable.allocate.spec import TrainingJob


@dataclass
class JobParts:
    """One job's variables beyond its counts, kept to write a complete MIP start.

    ``blocks[s]`` is its throughput block of segment ``s`` (0: exact curve, later: envelope),
    ``later[s - 1]`` the count it runs on in segment ``s``, ``pauses[s]`` the (leaves, lost)
    pair charging the pause when its class-``s`` nodes leave, ``score`` its objective term;
    ``rescale["up"|"down"]`` the (lost, seconds) of a rescale now charged at the rate after it.
    """

    job: TrainingJob
    tag: int
    blocks: list[PiecewiseRate]
    later: list[pulp.LpVariable]
    pauses: dict[int, tuple[pulp.LpVariable, pulp.LpVariable]]
    score: pulp.LpAffineExpression
    rescale: dict[str, tuple[pulp.LpVariable, float]] = field(default_factory=dict)


@dataclass
class CountModel:
    """A built model: ``problem`` and the count variables ``x[job][class]`` (None: fixed 0)."""

    problem: pulp.LpProblem
    x: dict[str, list[pulp.LpVariable | None]]
    run: dict[str, pulp.LpVariable]
    grow: dict[str, tuple[pulp.LpVariable, pulp.LpVariable, tuple[int, ...]]]
    parts: dict[str, JobParts] = field(default_factory=dict)
    lengths: tuple[float, ...] = ()
    shrink_pauses: bool = True
    floor: pulp.LpVariable | None = None

    def start_values(self, counts: dict[str, list[int]]) -> dict[pulp.LpVariable, float]:
        """Every variable's value for a known feasible allocation (a complete MIP start).

        A partial start (counts only) makes HiGHS solve a sub-MIP to complete it, which under a
        replay's 0.02-0.1 s limit often did not finish: the solver then returned an incumbent
        far below the greedy one. A complete, feasible point is checked and kept at once. Its
        objective equals :func:`~parsl_malleable.allocate.evaluate.objective_value` of
        ``counts``, which mirrors the model term by term.
        """
        named = {v.name: v for v in self.problem.variables()}
        start: dict[pulp.LpVariable, float] = {}
        for name, parts in self.parts.items():
            start.update(self._job_start(parts, counts[name], named))
        if self.floor is not None and self.parts:
            # maxmin: the floor sits at the smallest job score.
            start[self.floor] = min(_worth(p.score, start) for p in self.parts.values())
        return start

    def _job_start(
        self, parts: JobParts, row: list[int], named: dict[str, pulp.LpVariable]
    ) -> dict[pulp.LpVariable, float]:
        job, tag = parts.job, parts.tag
        values: dict[pulp.LpVariable, float] = {}
        for var, value in zip(self.x[job.name], row, strict=True):
            if var is not None:
                values[var] = float(value)
        values.update(_curve_start(job, sum(row), parts.blocks[0].run, named, f"{tag}_0"))
        if job.name in self.grow:
            up, down, held = self.grow[job.name]
            same = list(row) == list(held)
            grew = all(x >= c for x, c in zip(row, held, strict=True))
            values[up] = float(not same and grew)
            values[down] = float(not same and not grew)
            rate_after = _worth(parts.blocks[0].rate, values)
            for kind, (lost, seconds) in parts.rescale.items():
                values[lost] = seconds * rate_after * values[up if kind == "up" else down]
        peak = _envelope_peak(job)
        for s in range(1, len(row)):
            pause = job.scale_down_cost if self.shrink_pauses and row[s - 1] > 0 else 0.0
            # As evaluate.py: run on the best count up to what is left, or stop if the pause
            # outlasts the segment.
            size = min(sum(row[s:]), peak) if self.lengths[s] - pause > 0 else 0
            block = parts.blocks[s]
            values.update(_envelope_start(job, size, block.run, named, f"{tag}_{s}"))
            values[parts.later[s - 1]] = float(size)
            if s - 1 in parts.pauses:
                leaves, lost = parts.pauses[s - 1]
                values[leaves] = float(row[s - 1] > 0)
                values[lost] = pause * _worth(block.rate, values) if row[s - 1] > 0 else 0.0
        return values

    def counts(self) -> dict[str, list[int]]:
        """Nodes per job and class in the solver's current solution (rounded)."""
        return {
            name: [0 if v is None else round(v.value() or 0.0) for v in row]
            for name, row in self.x.items()
        }


def _worth(expression: pulp.LpAffineExpression, values: dict[pulp.LpVariable, float]) -> float:
    """Value of ``expression`` at ``values`` (every variable in it must have one)."""
    return float(expression.constant) + sum(c * values[v] for v, c in expression.items())


def _curve_start(
    job: TrainingJob, n: int, run: pulp.LpVariable, named: dict[str, pulp.LpVariable], tag: str
) -> dict[pulp.LpVariable, float]:
    """The exact block (piecewise.add_piecewise_rate) at ``n`` nodes: fill intervals in order.

    ``d{tag}_k`` is the filled share of interval ``k``; ``w{tag}_k`` is 1 once interval ``k`` is
    full (so that interval ``k + 1`` may start filling).
    """
    points = [p for p, _ in job.curve.breakpoints(job.min_nodes, job.max_nodes)]
    values = {run: float(n > 0)}
    fills = []
    for k in range(len(points) - 1):
        share = (n - points[k]) / (points[k + 1] - points[k]) if n else 0.0
        fills.append(min(1.0, max(0.0, share)))
        values[named[f"d{tag}_{k}"]] = fills[-1]
    for k in range(len(points) - 2):
        values[named[f"w{tag}_{k}"]] = float(fills[k] >= 1.0)
    return values


def _envelope_peak(job: TrainingJob) -> int:
    """Node count where the concave envelope is highest (the smallest such count)."""
    return max(concave_envelope(job), key=lambda p: (p[1], -p[0]))[0]


def _envelope_start(
    job: TrainingJob, size: int, run: pulp.LpVariable, named: dict[str, pulp.LpVariable], tag: str
) -> dict[pulp.LpVariable, float]:
    """The envelope block (piecewise.add_envelope_rate) at ``size`` nodes.

    ``l{tag}_k`` weighs the envelope's vertex ``k + 1`` (vertex 0 is the origin, weighed
    ``1 - run``); ``size`` is written between its two neighbouring vertices.
    """
    hull = concave_envelope(job)
    weights = [0.0] * (len(hull) - 1)
    for i, ((x0, _), (x1, _)) in enumerate(itertools.pairwise(hull)):
        if 0 < size <= x1:
            right = (size - x0) / (x1 - x0)
            weights[i] = right
            if i > 0:
                weights[i - 1] = 1.0 - right
            break
    values = {named[f"l{tag}_{k}"]: w for k, w in enumerate(weights)}
    values[run] = sum(weights)
    return values


def build_count_model(
    jobs: Sequence[TrainingJob],
    classes: HorizonClasses,
    *,
    objective: str = "throughput",
    node_cap: int | None = None,
    charge_start: bool = True,
    shrink_pauses: bool = True,
    pause_rate: PauseRate = "before",
) -> CountModel:
    """Build the integer-count MILP for ``jobs`` over the horizon ``classes``.

    ``shrink_pauses=False`` drops the (big-M) cost of the pause a job takes when a class of its
    nodes ends: much faster to solve with several classes, at the price of over-valuing nodes
    with short windows by one scale-down pause. ``pause_rate="after"`` charges a rescale now at
    the rate after it (a big-M product of the up/down binary and the segment-0 rate) instead
    of the rate before it.
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
    parts: dict[str, JobParts] = {}
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
        blocks: list[PiecewiseRate] = []
        later: list[pulp.LpVariable] = []
        pauses: dict[int, tuple[pulp.LpVariable, pulp.LpVariable]] = {}
        rescale: dict[str, tuple[pulp.LpVariable, float]] = {}
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
                later.append(count)
            terms.extend((v, c * lengths[s]) for v, c in block.rate.items())
        run[job.name] = blocks[0].run
        for v, c in blocks[0].count.items():
            now_counts.append((v, c))
        big = max((r for _, r in job.curve.breakpoints(job.min_nodes, job.max_nodes)), default=0)
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
            for kind, binary, seconds in (
                ("up", up, job.scale_up_cost),
                ("down", down, job.scale_down_cost),
            ):
                if pause_rate == "before":
                    losses.append((binary, seconds * job.current_rate))
                elif seconds > 0:
                    # lost >= seconds x the rate after, when the binary is set (rate <= big).
                    lost = problem.add_variable(f"P{kind[0]}{j}", 0)
                    problem += (
                        pulp.LpAffineExpression(
                            [(lost, 1.0), (binary, -seconds * big)]
                            + [(v, -seconds * c) for v, c in blocks[0].rate.items()]
                        )
                        >= -seconds * big
                    )
                    losses.append((lost, 1.0))
                    rescale[kind] = (lost, seconds)
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
            pauses[s] = (leaves, lost)
        alpha = job_scale(job, objective) / horizon
        score = pulp.LpAffineExpression()
        score.addInPlace(pulp.LpAffineExpression([(v, alpha * c) for v, c in terms]))
        score.addInPlace(pulp.LpAffineExpression([(v, -alpha * c) for v, c in losses]))
        scores.append(score)
        parts[job.name] = JobParts(job, j, blocks, later, pauses, score, rescale)
    for b in range(n_classes):
        if per_class[b]:
            problem += pulp.LpAffineExpression(per_class[b]) <= capacity[b]
    if node_cap is not None:
        problem += pulp.LpAffineExpression(now_counts) <= node_cap
    set_milp_objective(problem, scores, objective)
    # maxmin's floor variable (objectives.set_milp_objective names it "t"): a start needs it too.
    floor = None
    if objective == "maxmin":
        floor = next((v for v in problem.objective if v.name == "t"), None)
    return CountModel(problem, x, run, grow, parts, lengths, shrink_pauses, floor)
