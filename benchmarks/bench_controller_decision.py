"""Controller decision latency at Summit scale: 100 jobs x 4,608 nodes, per-node answers.

One decision = ``ControllerCore.step`` when an event is due: gather the usable nodes and their
windows, the jobs and their curves, solve the allocation (count MILP, within the controller's
time budget ``PolicySettings.time_limit_s``), turn it into an owner per node, and emit the
orders that move nodes. Three events are timed: the cold start (every node and job arrives), a
block of 64 nodes yielding, and a job ending. The baseline, in the same run on the same inputs,
is the allocator alone solved to the same gap with no time budget: its time, and its objective,
which the decision's objective is divided by (1.0: the budget cost nothing). Nodes come in
blocks of 16 with windows drawn from a log-normal (median 30 min); curves are
``1 / (a/n + b + c n)`` with random a, b, c; sizes 1-64 nodes. ``--jobs 1000 --families 10``
is a backlog: 1,000 jobs in 10 families of interchangeable jobs (an HPO sweep each), of which
admission offers the allocator only as many as could start.

    python benchmarks/bench_controller_decision.py [--solver highs|cbc] [--repeats N]
        [--time-limit S] [--jobs N --families K]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from parsl_malleable.allocate.api import allocate  # noqa: E402
from parsl_malleable.allocate.curve import ScalingCurve  # noqa: E402
from parsl_malleable.allocate.spec import NodeWindow, TrainingJob  # noqa: E402
from parsl_malleable.controller import ControllerCore, CoreSettings, JobSpec  # noqa: E402
from parsl_malleable.controller.policy import PolicySettings  # noqa: E402

NODES, JOBS, BLOCK = 4608, 100, 16
TARGET_S = 1.0


def make_curve(rng: random.Random, max_nodes: int) -> ScalingCurve:
    a, b, c = rng.uniform(0.5, 2.0), rng.uniform(0.0, 0.05), rng.uniform(0.0, 0.002)
    sizes = sorted({1, 2, 4, 8, 16, 32, 64, max_nodes} & set(range(1, max_nodes + 1)))
    return ScalingCurve(tuple(sizes), tuple(1000.0 / (a / n + b + c * n) for n in sizes))


def build(
    solver: str,
    seed: int,
    budget: float | None,
    threads: int | None = 1,
    jobs: int = JOBS,
    families: int = 0,
) -> tuple[ControllerCore, float]:
    rng = random.Random(seed)
    policy = PolicySettings(solver=solver, threads=threads)
    if budget is not None:
        policy = PolicySettings(solver=solver, time_limit_s=budget, threads=threads)
    settings = CoreSettings(policy=policy)
    core = ControllerCore(settings)
    now = 1_000_000.0
    for b in range(NODES // BLOCK):
        window = min(4 * 3600.0, rng.lognormvariate(7.5, 1.0))  # median ~30 min
        core.block_update(f"b{b}", now, deadline=now + 60.0 + window)
        for i in range(BLOCK):
            node = f"b{b}n{i}"
            core.node_ready(node, f"b{b}", now, name=node)
    kinds = []  # a backlog's families: (min_nodes, max_nodes, priority, curve) each
    for _ in range(families):
        max_nodes = rng.choice([8, 16, 32, 64])
        kinds.append(
            (rng.choice([1, 2, 4]), max_nodes, rng.choice([1.0, 2.0]), make_curve(rng, max_nodes))
        )
    for j in range(jobs):
        if kinds:
            low, high, priority, curve = kinds[j % families]
            family: str | None = f"f{j % families}"
        else:
            high = rng.choice([8, 16, 32, 64])
            low, priority = rng.choice([1, 2, 4]), rng.choice([1.0, 1.0, 2.0])
            curve, family = make_curve(rng, high), None
        spec = JobSpec(
            f"job{j:04d}",
            min_nodes=low,
            max_nodes=high,
            priority=priority,
            curve=curve,
            family=family,
        )
        core.add_job(spec, now)
    return core, now


def timed_step(core: ControllerCore, now: float) -> tuple[float, int]:
    began = time.perf_counter()
    actions = core.step(now)
    return time.perf_counter() - began, len(actions)


def allocator_alone(core: ControllerCore, now: float) -> tuple[float, float]:
    """The same allocation problem handed straight to ``allocate`` (no controller around it),
    solved to the gap without the controller's time budget: (seconds, objective)."""
    usable = [n for n in core.nodes.values() if core.usable(n, now)]
    held: dict[str, list[str]] = {name: [] for name in core.jobs}
    for node in usable:
        if node.job in held and not node.leaving:
            held[node.job].append(node.node_id)
    jobs = [
        TrainingJob(
            s.name,
            s.min_nodes,
            s.max_nodes,
            s.curve,
            5.0,
            2.0,
            s.priority,
            tuple(held[s.name]) if s.min_nodes <= len(held[s.name]) <= s.max_nodes else (),
        )
        for s in core.jobs.values()
        if s.curve is not None
    ]
    kept = {n for j in jobs for n in j.current_nodes}
    free = [n.node_id for n in usable if n.node_id not in kept]
    margin = core.settings.drain_margin_s
    windows = [
        NodeWindow((n.node_id,), core.blocks[n.block_id].deadline - margin - now)  # type: ignore[operator]
        for n in usable
    ]
    policy = core.settings.policy
    began = time.perf_counter()
    result = allocate(
        jobs,
        free,
        windows,
        objective=policy.objective,
        solver=policy.solver,
        time_limit=60.0,
        gap_rel=policy.gap_rel,
        threads=policy.threads,
        pause_rate=policy.pause_rate,
    )
    return time.perf_counter() - began, result.objective


Row = tuple[float, float, int, float, str]


def measure(core: ControllerCore, now: float) -> Row:
    """Time one due decision; the allocator alone on the same input; objective ratio."""
    base, optimum = allocator_alone(core, now)
    step, actions = timed_step(core, now)
    decision = core.decisions[-1]
    # The allocator alone sees every job; the decision only the admitted ones.
    ratio = decision.objective / optimum if optimum else 1.0
    return step, base, actions, ratio, decision.status


def run(
    solver: str,
    seed: int,
    budget: float | None,
    threads: int | None = 1,
    jobs: int = JOBS,
    families: int = 0,
) -> dict[str, Row]:
    core, now = build(solver, seed, budget, threads, jobs, families)
    out: dict[str, Row] = {}
    now += 1.0
    out["cold start"] = measure(core, now)
    for node in list(core.nodes.values()):  # every started rank is running
        if node.job is not None:
            node.leaving = False
    now += 60.0
    victims = [f"b{b}" for b in range(4)]  # 4 blocks x 16 nodes yield
    for block in victims:
        core.block_update(block, now, deadline=core.blocks[block].deadline, yielding=True)
    out["64 nodes yield"] = measure(core, now + 1.0)
    for node in [n for n in core.nodes.values() if n.block_id in victims]:
        core.ranks_left(node.node_id, now + 2.0)
    now += 60.0
    busiest = max(core.jobs, key=lambda j: sum(1 for n in core.nodes.values() if n.job == j))
    core.end_job(busiest, now)
    out["a job ends"] = measure(core, now + 1.0)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--solver", default="highs", choices=["highs", "cbc"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--time-limit", type=float, default=None, help="solver budget (default: the controller's)"
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="solver threads (0: the solver's choice)"
    )
    parser.add_argument("--jobs", type=int, default=JOBS, help="registered jobs")
    parser.add_argument(
        "--families",
        type=int,
        default=0,
        help="a backlog: the jobs in this many families of interchangeable jobs (0: all differ)",
    )
    args = parser.parse_args()
    threads = args.threads or None
    print(
        f"controller decision latency: {args.jobs} jobs"
        f"{f' in {args.families} families' if args.families else ''} x {NODES} nodes "
        f"({args.solver}, {threads or 'auto'} threads)"
    )
    rows: dict[str, list[Row]] = {}
    for seed in range(args.repeats):
        outcome = run(args.solver, seed, args.time_limit, threads, args.jobs, args.families)
        for event, row in outcome.items():
            rows.setdefault(event, []).append(row)
            print(
                f"  seed {seed} {event:16} decision {row[0]:.3f} s ({row[4]}, objective "
                f"{row[3]:.4f} of the optimum); allocator alone to the gap {row[1]:.3f} s"
            )
    print(
        f"{'event':16} {'decision s':>11} {'max s':>6} {'alone s':>8} {'orders':>7} "
        f"{'objective/optimum':>18}"
    )
    worst = 0.0
    for event, seen in rows.items():
        step = statistics.median(r[0] for r in seen)
        base = statistics.median(r[1] for r in seen)
        top = max(r[0] for r in seen)
        worst = max(worst, top)
        orders = int(statistics.median(r[2] for r in seen))
        ratio = min(r[3] for r in seen)
        print(f"{event:16} {step:11.3f} {top:6.3f} {base:8.3f} {orders:7d} {ratio:18.4f}")
    verdict = "met" if worst < TARGET_S else "NOT met"
    print(
        f"worst decision {worst:.3f} s over {args.repeats} seeds; target < {TARGET_S} s: {verdict}"
    )


if __name__ == "__main__":
    main()
