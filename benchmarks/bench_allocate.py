"""Allocator solve time: the integer-count model against FreeTrain's per-node model, same run.

For each scale (10 jobs x 100 nodes, 50 x 560 Polaris, 100 x 4,608 Summit, 500 x 9,408
Frontier), with the curves and costs of ``imagenet-imgps-1001J`` and half the nodes already
held by running jobs, it measures in a fresh subprocess per case (so that one case's memory
cannot hide another's):

- ``count``: the integer-count model, every window equal to ``T_fwd`` (FreeTrain's setting);
- ``pernode``: FreeTrain's per-node model on the same instance (the baseline), killed when it
  does not build and solve within ``--pernode-limit`` seconds or ``--pernode-mem`` GiB;
- ``horizon``: the count model with Summit-trace windows in 4 horizon classes, with and without
  shrink pauses (``horizon-nopause``), under the solver time limit;
- ``greedy``: the fallback rule on the horizon instance.

Each with CBC and HiGHS. It prints build and solve seconds, objective, peak memory of the
process (and of the CBC child), the count/per-node time ratio and whether both objectives agree,
and checks the targets (count model < 1 s at Summit scale, < 5 s at Frontier scale, >= 10x
faster than the per-node model where that solves, Frontier under 2 GiB).
Run: ``python benchmarks/bench_allocate.py [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import peak_rss_mib, workload_dir

SCALES = [("small", 10, 100), ("Polaris", 50, 560), ("Summit", 100, 4608), ("Frontier", 500, 9408)]
WORKLOAD = "imagenet-imgps-1001J"
T_FWD = 600.0
TARGET_S = {"Summit": 1.0, "Frontier": 5.0}


def run_case(spec: dict) -> None:
    """Child process: build and solve one case, print JSON lines (``built``, then ``done``)."""
    from parsl_malleable.allocate import NodeWindow, allocate, load_workload
    from parsl_malleable.allocate.instances import make_instance, summit_remaining_windows
    from parsl_malleable.allocate.pernode_model import build_pernode_model
    from parsl_malleable.allocate.solve import solve_problem

    data = workload_dir()
    jobs = load_workload(data, WORKLOAD, limit=spec["jobs"])
    remaining = None
    if spec["model"] in ("horizon", "horizon-nopause", "greedy"):
        remaining = summit_remaining_windows(
            data / "summit-idle-intervals-2021-02.csv.gz", spec["nodes"], seed=1
        )
    inst = make_instance(jobs, spec["nodes"], remaining, seed=1)
    out: dict = {}
    if spec["model"] == "pernode":
        began = time.perf_counter()
        model = build_pernode_model(inst.jobs, inst.free_nodes, T_FWD)
        out["build_s"] = time.perf_counter() - began
        print(json.dumps({"event": "built", **out}), flush=True)
        res = solve_problem(
            model.problem, spec["solver"], time_limit=spec["time_limit"], gap_rel=1e-4
        )
        out.update(
            solve_s=res.seconds,
            status=res.status,
            objective=model.problem.objective.value() if res.has_solution else None,
        )
    else:
        windows = inst.windows
        if spec["model"] == "count":
            every = [*inst.free_nodes, *(n for j in inst.jobs for n in j.current_nodes)]
            windows = [NodeWindow(tuple(every), T_FWD)]
        alloc = allocate(
            inst.jobs,
            inst.free_nodes,
            windows,
            solver=spec["solver"],
            time_limit=spec["time_limit"],
            max_horizon_s=T_FWD if spec["model"] == "count" else 3600.0,
            shrink_pauses=spec["model"] != "horizon-nopause",
            gap_rel=1e-4,
            # FreeTrain's objective and pause model, and the solver's own thread count, as
            # in every run recorded in docs/benchmarks.md.
            objective="throughput",
            pause_rate="before",
            threads=None,
        )
        out.update(
            build_s=alloc.build_s,
            solve_s=alloc.solve_s,
            status=alloc.status + (" (fallback)" if alloc.fallback else ""),
            objective=alloc.objective,
            nodes_used=alloc.total_nodes,
        )
    out["rss_mib"] = peak_rss_mib()
    out["child_rss_mib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0
    print(json.dumps({"event": "done", **out}), flush=True)


def launch(spec: dict, wall_limit: float, mem_gib: float | None) -> dict:
    """Run one case in a subprocess; report what it printed, or how far it got."""
    argv = [sys.executable, __file__, "--case", json.dumps(spec)]

    def limit_memory() -> None:
        if mem_gib is not None:
            size = int(mem_gib * 2**30)
            resource.setrlimit(resource.RLIMIT_AS, (size, size))

    began = time.perf_counter()
    # Own session, so that a timeout also kills the solver the case started (CBC runs as a
    # child process and would otherwise keep a core busy after its parent is gone).
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=limit_memory,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=wall_limit)
        failed = proc.returncode != 0
        err_tail = stderr.strip().splitlines()[-1:] if failed else []
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, _ = proc.communicate()
        failed, err_tail = True, [f"killed after {wall_limit:.0f} s"]
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    result = {k: v for e in events for k, v in e.items() if k != "event"}
    result["wall_s"] = time.perf_counter() - began
    if failed or not any(e["event"] == "done" for e in events):
        built = any(e["event"] == "built" for e in events)
        why = err_tail[0] if err_tail else "no result"
        if "MemoryError" in why or "Cannot allocate" in why:
            why = f"out of memory (limit {mem_gib} GiB)"
        result["status"] = f"{'solve' if built else 'build'} did not finish: {why}"
    return result


def fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="only the two smallest scales")
    parser.add_argument("--time-limit", type=float, default=10.0, help="solver limit (s)")
    parser.add_argument("--pernode-limit", type=float, default=120.0, help="wall limit (s)")
    parser.add_argument("--pernode-mem", type=float, default=6.0, help="memory limit (GiB)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of cases under 2 s")
    args = parser.parse_args()
    if args.case:
        run_case(json.loads(args.case))
        return 0
    scales = SCALES[:2] if args.quick else SCALES
    header = (
        f"{'scale':9} {'model':16} {'solver':6} {'build_s':>8} {'solve_s':>8} "
        f"{'total_s':>8} {'objective':>14} {'rss_MiB':>8} {'cbc_MiB':>8}  status"
    )
    print(header)
    results: dict[tuple[str, str, str], dict] = {}
    ok = True
    for label, n_jobs, n_nodes in scales:
        for model in ("count", "pernode", "horizon", "horizon-nopause", "greedy"):
            for solver in ("greedy",) if model == "greedy" else ("cbc", "highs"):
                spec = {
                    "jobs": n_jobs,
                    "nodes": n_nodes,
                    "model": model,
                    "solver": solver,
                    "time_limit": args.time_limit,
                }
                per_node = model == "pernode"
                if per_node:
                    spec["time_limit"] = args.pernode_limit / 2
                wall = args.pernode_limit if per_node else args.time_limit + 120.0
                res = {}
                for _ in range(args.repeat):
                    # Best of a few runs for quick cases: the machine is shared and noisy.
                    run = launch(spec, wall, args.pernode_mem if per_node else None)
                    run["total_s"] = (run.get("build_s") or 0.0) + (run.get("solve_s") or 0.0)
                    if not res or (
                        run.get("status") == res.get("status") and run["total_s"] < res["total_s"]
                    ):
                        res = run
                    if res["total_s"] > 2.0:
                        break
                results[(label, model, solver)] = res
                print(
                    f"{label:9} {model:16} {solver:6} {fmt(res.get('build_s')):>8} "
                    f"{fmt(res.get('solve_s')):>8} {fmt(res['total_s']):>8} "
                    f"{fmt(res.get('objective'), 1):>14} {fmt(res.get('rss_mib'), 0):>8} "
                    f"{fmt(res.get('child_rss_mib'), 0):>8}  {res.get('status')}",
                    flush=True,
                )
    print("\ncount model vs per-node model (same instance, same run)")
    for label, _, _ in scales:
        for solver in ("cbc", "highs"):
            count = results[(label, "count", solver)]
            base = results[(label, "pernode", solver)]
            ratio = base["total_s"] / max(count["total_s"], 1e-9)
            if base.get("status") == "optimal":
                gap = abs(base["objective"] - count["objective"]) / abs(count["objective"])
                line = f"per-node/count time ratio {ratio:7.1f}x, objectives differ by {gap:.1e}"
                if ratio < 10:
                    ok = False
                    line += "  <-- below the 10x target"
            elif base.get("status") == "feasible":
                gap = (count["objective"] - base["objective"]) / abs(count["objective"])
                line = (
                    f"per-node model not optimal within its solver limit: ratio >= {ratio:.1f}x,"
                    f" its incumbent {gap:.1e} below the count optimum"
                )
            else:
                total = count["total_s"]
                line = f"per-node model {base.get('status')}; count model {total:.2f} s"
            print(f"{label:9} {solver:6} {line}")
            target = TARGET_S.get(label)
            if target is not None and count["total_s"] > target:
                ok = False
                print(
                    f"{label:9} {solver:6} count model {count['total_s']:.2f} s > {target} s target"
                )
    if "Frontier" in {s[0] for s in scales}:
        for solver in ("cbc", "highs"):
            res = results[("Frontier", "count", solver)]
            mem = (res.get("rss_mib") or 0.0) + (res.get("child_rss_mib") or 0.0)
            print(f"Frontier {solver:6} count model peak memory {mem:.0f} MiB (target < 2048)")
            ok = ok and mem < 2048
    print("targets met" if ok else "TARGETS NOT MET")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
