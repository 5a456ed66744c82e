"""Profiler accuracy on the shared workloads' curves: the protocol of docs/profile.md.

For every distinct curve of every ``*-scaling.csv`` workload, every starting size in
{1, 2, 4, ..., 64} up to the curve's largest node count and ``--seeds`` noise seeds, a simulated
job is profiled for 20 samples (5 % noise); printed per workload and starting size: the worst
relative error of ``profiler.curve(job, max)`` over every whole node count 1..max after 5, 10
and 20 samples (median over curves and seeds) and the share of runs within 5 % after 20;
then the cost of ``curve()`` for a job with 20 samples (the controller calls it for every job at
every decision).

``new`` is the profiler as it is (``next_size`` exploration, Gaussian-process curve model).
``old`` is the profiler before it, in the same run: the parametric ``a/n + b + c*n`` fit with
sample means at measured sizes, exploring where ``suggest_exploration`` says (neighbouring
powers of two, horizon 3600 s, default pauses) and staying put when it says nothing.

    python benchmarks/bench_profile_accuracy.py              # about 80 s on 2 cores
    python benchmarks/bench_profile_accuracy.py --seeds 3    # about 1.5 minutes
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Iterable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import workload_dir

from parsl_malleable.allocate import load_scaling
from parsl_malleable.allocate.curve import ScalingCurve
from parsl_malleable.profile import ScalabilityProfiler, ScalingFit, fit_scaling
from parsl_malleable.profile.protocol import ProfilingRun, profile_simulated

STARTS = (1, 2, 4, 8, 16, 32, 64)
CHECKPOINTS = (5, 10, 20)
TOLERANCE = 0.05


class OldProfiler(ScalabilityProfiler):
    """The fit and curve of the profiler before the Gaussian-process model (its code, verbatim
    apart from names): ``a/n + b + c*n``, sample means at measured sizes."""

    def fit(self, job: str) -> ScalingFit:  # type: ignore[override]
        seen = self.measured(job)
        return fit_scaling(
            list(seen),
            [m for m, _, _ in seen.values()],
            [e for _, e, _ in seen.values()],
            extrapolation_rel=self.extrapolation_rel,
        )

    def curve(self, job: str, max_nodes: int, sizes: Iterable[int] | None = None) -> ScalingCurve:
        seen = self.measured(job)
        model = self.fit(job)
        if sizes is None:
            powers = {2**k for k in range(max(1, max_nodes).bit_length()) if 2**k <= max_nodes}
            sizes = {*seen, *powers, max_nodes}
        points = sorted({int(n) for n in sizes if 1 <= n <= max_nodes})
        rates, errors = [], []
        for n in points:
            if n in seen:
                rates.append(seen[n][0])
                errors.append(seen[n][1])
            else:
                rates.append(model.throughput(n))
                errors.append(model.stderr(n))
        return ScalingCurve(tuple(points), tuple(rates), tuple(errors))


def old_chooser(prof: ScalabilityProfiler, job: str, current: int, max_nodes: int) -> int:
    """Where the old profiler sends the job: its exploration advice, else stay."""
    advice = prof.suggest_exploration(job, current, horizon_s=3600.0, max_nodes=max_nodes)
    return advice.size if advice is not None else current


def distinct_curves(directory: Path) -> dict[str, dict[str, ScalingCurve]]:
    """Per workload, its distinct curves (first job name of each)."""
    out: dict[str, dict[str, ScalingCurve]] = {}
    for path in sorted(directory.glob("*-scaling.csv*")):
        name = path.name.split("-scaling.csv")[0]
        seen: dict[tuple, str] = {}
        curves = load_scaling(path)
        for job, curve in curves.items():
            seen.setdefault((curve.nodes, curve.throughput), job)
        out[name] = {job: curves[job] for job in seen.values()}
    return out


def run_all(curve: ScalingCurve, seeds: int) -> dict[str, dict[int, list[ProfilingRun]]]:
    """Both profilers from every starting size, ``seeds`` noise draws each."""
    top = max(curve.nodes)
    result: dict[str, dict[int, list[ProfilingRun]]] = {"new": {}, "old": {}}
    for start in (s for s in STARTS if s <= top):
        result["new"][start] = [
            profile_simulated(curve, start, seed=seed, checkpoints=CHECKPOINTS)
            for seed in range(seeds)
        ]
        result["old"][start] = [
            profile_simulated(
                curve,
                start,
                seed=seed,
                checkpoints=CHECKPOINTS,
                profiler=OldProfiler(),
                choose=old_chooser,
            )
            for seed in range(seeds)
        ]
    return result


def curve_cost(repeats: int = 2000) -> tuple[float, float]:
    """Milliseconds per ``curve(job, 64)`` for a job with 20 samples: the first call after a
    sample (fit and prediction) and a repeated call (cached until the next sample)."""
    rng = random.Random(0)
    sizes = (1, 2, 4, 8, 16, 32, 64)
    first = []
    for trial in range(50):
        prof = ScalabilityProfiler()
        for i in range(20):
            n = sizes[(i + trial) % len(sizes)]
            prof.record("j", n, 1000.0 * n * (1 + rng.gauss(0.0, 0.05)))
        began = time.perf_counter()
        prof.curve("j", 64)
        first.append(time.perf_counter() - began)
    began = time.perf_counter()
    for _ in range(repeats):
        prof.curve("j", 64)
    return 1e3 * statistics.median(first), 1e3 * (time.perf_counter() - began) / repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10, help="noise seeds per start (10)")
    parser.add_argument("--data", type=Path, default=workload_dir(), help="workload folder")
    args = parser.parse_args()
    began = time.perf_counter()
    workloads = distinct_curves(args.data)
    runs: dict[tuple[str, ...], dict[str, dict[int, list[ProfilingRun]]]] = {}
    for curves in workloads.values():
        for curve in curves.values():
            key = (curve.nodes, curve.throughput)
            if key not in runs:
                runs[key] = run_all(curve, args.seeds)

    def fmt(values: list[float]) -> str:
        return f"{100 * statistics.median(values):.1f}"

    print(
        f"worst |error| over 1..max nodes, median over curves x {args.seeds} seeds, % "
        f"(5 / 10 / 20 samples); share of runs within 5 % after 20"
    )
    print("| workload | curves | start | new 5/10/20 | old 5/10/20 | new within 5 % | old |")
    print("|---|---|---|---|---|---|---|")
    for name, curves in workloads.items():
        for start in STARTS:
            cells = {}
            for kind in ("new", "old"):
                done = [
                    r
                    for c in curves.values()
                    for r in runs[(c.nodes, c.throughput)][kind].get(start, [])
                ]
                if not done:
                    break
                errs = " / ".join(fmt([r.worst_all[k] for r in done]) for k in CHECKPOINTS)
                ok = sum(r.worst_all[20] <= TOLERANCE for r in done) / len(done)
                cells[kind] = (errs, f"{100 * ok:.0f} %")
            if cells:
                print(
                    f"| {name} | {len(curves)} | {start} | {cells['new'][0]} | "
                    f"{cells['old'][0]} | {cells['new'][1]} | {cells['old'][1]} |"
                )
    print()
    print(
        "| curve | new: median / worst run, all counts | at measured counts | "
        "runs within 5 % | old: median / worst run | old runs within 5 % |"
    )
    print("|---|---|---|---|---|---|")
    names = {(c.nodes, c.throughput): job for cs in workloads.values() for job, c in cs.items()}
    met = {"new": [0, 0], "old": [0, 0]}
    for key, by_kind in runs.items():
        row = [names[key]]
        for kind in ("new", "old"):
            done = [r for rs in by_kind[kind].values() for r in rs]
            worst = [r.worst_all[20] for r in done]
            grid = [r.worst_grid[20] for r in done]
            ok = sum(w <= TOLERANCE for w in worst) / len(worst)
            medians_ok = all(
                statistics.median(r.worst_all[20] for r in rs) <= TOLERANCE
                for rs in by_kind[kind].values()
            )
            met[kind][0] += medians_ok
            met[kind][1] += ok == 1.0
            row.append(f"{100 * statistics.median(worst):.1f} / {100 * max(worst):.1f} %")
            if kind == "new":
                row.append(f"{100 * statistics.median(grid):.1f} / {100 * max(grid):.1f} %")
            row.append(f"{100 * ok:.0f} %")
        print("| " + " | ".join(row) + " |")
    print()
    for kind in ("new", "old"):
        every = [
            r.worst_all[20]
            for by_kind in runs.values()
            for rs in by_kind[kind].values()
            for r in rs
        ]
        share = sum(w <= TOLERANCE for w in every) / len(every)
        print(
            f"{kind}: {len(runs)} distinct curves; within 5 % after 20 samples in the median run "
            f"from every start: {met[kind][0]}; in every run: {met[kind][1]}; "
            f"all {len(every)} runs: {100 * share:.1f} % within 5 %, worst {100 * max(every):.1f} %"
        )
    uncached, cached = curve_cost()
    print(
        f"curve(job, 64) with 20 samples: {uncached:.2f} ms after a new sample (fit), "
        f"{1e3 * cached:.1f} us repeated (cached)"
    )
    print(f"({time.perf_counter() - began:.0f} s)")


if __name__ == "__main__":
    main()
