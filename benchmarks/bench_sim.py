"""Speed and memory of the batch-scheduler simulator (``parsl_malleable.sim``).

Prints, for the shared Gaia and Theta 2022 traces: jobs/s under FCFS, EASY and conservative
(whole ``simulate`` call, warm, best of ``--repeat``) and of the event loop alone; the first-call
cost of loading (or compiling) the numba code; the plain-Python reference scheduler on a prefix
of each trace with the speed ratio measured in the same run; peak memory per job for growing
synthetic traces (each size in its own process); and a 300k-job synthetic trace of a 10,000-node
machine. Targets (EASY): >= 40,000 jobs/s on Gaia, >= 15,000 jobs/s on Theta 2022.

    python benchmarks/bench_sim.py            # about a minute on the 2-core CI machine
    python benchmarks/bench_sim.py --cold     # also time a cold numba compile (about 30 s more)
    python benchmarks/bench_sim.py --agreement   # only: recorded vs simulated waits, 4 traces
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import data_file, peak_rss_mib

TARGETS = {"UniLu-Gaia-2014-1.swf": 40_000, "theta_2022.swf": 15_000}
PREFIX = 2_000  # jobs replayed by the plain-Python reference
CONSERVATIVE_PREFIX = {"UniLu-Gaia-2014-1.swf": 3_000}  # its 24k-job queue makes it O(Q^2)
PEERS = "CQSim ~4,400 / ~1,400 jobs/s, AccaSim ~700 / ~90 jobs/s (Gaia / Theta, measured elsewhere)"


def best_of(fn, repeat: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def prefix(trace, n: int):
    from parsl_malleable.traces.schema import JobTrace

    return JobTrace(trace.jobs.iloc[:n].reset_index(drop=True), trace.machine)


def reference_inputs(trace):
    jobs = trace.jobs
    ok = jobs["start"].notna() & jobs["end"].notna() & (jobs["nodes"] >= 1)
    jobs = jobs[ok & (jobs["nodes"] <= trace.machine.nodes)]
    run = (jobs["end"] - jobs["start"]).to_numpy()
    wt = jobs["walltime"].to_numpy()
    est = np.maximum(np.where(np.isfinite(wt) & (wt > 0), wt, run), 1.0)
    return jobs["submit"].to_numpy(), run, est, jobs["nodes"].to_numpy()


def bench_trace(name: str, repeat: int) -> dict:
    from parsl_malleable.sim import simulate
    from parsl_malleable.sim.reference import reference_schedule
    from parsl_malleable.traces import read_swf

    t0 = time.perf_counter()
    trace = read_swf(data_file(name))
    read_s = time.perf_counter() - t0
    n = len(trace.jobs)
    print(f"\n{name}: {n} jobs, {trace.machine.nodes} nodes (read in {read_s:.2f} s)")
    row: dict = {"trace": name, "jobs": n}
    for policy in ("fcfs", "easy", "conservative"):
        sub = trace
        if policy == "conservative" and name in CONSERVATIVE_PREFIX:
            sub = prefix(trace, CONSERVATIVE_PREFIX[name])
        reps = repeat if policy != "conservative" else 1
        secs, res = best_of(lambda s=sub, p=policy: simulate(s, p), reps)
        jobs = res.stats.jobs_simulated
        row[policy] = jobs / secs
        print(
            f"  {policy:12s} {jobs:6d} jobs {secs:7.3f} s = {jobs / secs:10,.0f} jobs/s"
            f"  (event loop {res.timing['kernel_s']:.3f} s = "
            f"{jobs / res.timing['kernel_s']:10,.0f} jobs/s; max queue "
            f"{res.stats.extra['queue_max']}, {res.stats.holes} holes)"
        )
    # the plain-Python reference on a prefix, and this simulator on the same prefix
    sub = prefix(trace, PREFIX)
    args = reference_inputs(sub)
    ref_s, _ = best_of(lambda: reference_schedule(trace.machine.nodes, "easy", *args), 1)
    fast_s, res = best_of(lambda: simulate(sub, "easy"), repeat)
    jobs = res.stats.jobs_simulated
    row["reference_easy_prefix"] = jobs / ref_s
    row["ratio_vs_reference"] = ref_s / fast_s
    print(
        f"  reference EASY (plain Python) on the first {PREFIX} jobs: {jobs / ref_s:,.0f} jobs/s;"
        f" simulate: {jobs / fast_s:,.0f} jobs/s; ratio {ref_s / fast_s:,.0f}x"
    )
    target = TARGETS[name]
    verdict = "meets" if row["easy"] >= target else "MISSES"
    print(f"  EASY {row['easy']:,.0f} jobs/s {verdict} the target {target:,} jobs/s")
    return row


def memory_point(n_jobs: int, nodes: int) -> None:
    """Child process: simulate a synthetic trace, print JSON with peak RSS before/after."""
    from parsl_malleable.sim import simulate
    from parsl_malleable.sim.trace_replay import warm_up
    from parsl_malleable.traces.synthetic import synthetic_trace

    warm_up()
    trace = synthetic_trace(n_jobs, nodes, seed=0)
    gc.collect()
    reset = reset_peak_rss()  # so the peak below is the simulation's, not the generator's
    before = current_rss_mib() if reset else peak_rss_mib()
    t0 = time.perf_counter()
    res = simulate(trace, "easy")
    secs = time.perf_counter() - t0
    after = vm_hwm_mib() if reset else peak_rss_mib()
    span_days = float(trace.jobs["submit"].iloc[-1] - trace.jobs["submit"].iloc[0]) / 86400
    print(
        json.dumps(
            {
                "jobs": n_jobs,
                "nodes": nodes,
                "seconds": secs,
                "rss_before": before,
                "rss_after": after,
                "holes": res.stats.holes,
                "span_days": span_days,
            }
        )
    )


def reset_peak_rss() -> bool:
    """Reset this process's peak RSS (Linux >= 4.0: write 5 to /proc/self/clear_refs)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _status_mib(key: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024.0
    raise KeyError(key)


def current_rss_mib() -> float:
    return _status_mib("VmRSS")


def vm_hwm_mib() -> float:
    return _status_mib("VmHWM")


def run_child(*args: str, env: dict | None = None) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, *args],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def cold_compile() -> dict:
    """Child process: first call with an empty numba cache (a fresh checkout's cost)."""
    from parsl_malleable.sim.trace_replay import warm_up

    print(json.dumps({"seconds": warm_up()}))
    return {}


def agreement_table() -> None:
    """Markdown table: recorded vs simulated waits on the four shared traces (docs/sim.md)."""
    from parsl_malleable.sim import simulate
    from parsl_malleable.sim.validate import wait_agreement
    from parsl_malleable.traces import read_swf
    from parsl_malleable.traces.schema import JobTrace, MachineInfo

    names = ["UniLu-Gaia-2014-1.swf", "theta_2022.swf", "hpc2n.swf", "wagap-2013.swf"]
    print(
        "| trace | unit (machine) | policy | jobs | mean wait rec. / sim. "
        "| median wait rec. / sim. | Pearson | Spearman |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name in names:
        trace = read_swf(data_file(name))
        m = trace.machine
        variants = [(f"node ({m.nodes})", trace)]
        if m.cores_per_node > 1 and (trace.jobs["cores"] > 0).all():
            # each core a slot: the packing the site's scheduler really did
            jobs = trace.jobs.copy()
            jobs["nodes"] = jobs["cores"]
            cores = MachineInfo(m.name, m.nodes * m.cores_per_node, 1, m.start_epoch)
            variants.append((f"core ({cores.nodes})", JobTrace(jobs, cores)))
        for unit, t in variants:
            for policy in ("fcfs", "easy", "conservative"):
                if (
                    policy == "conservative"
                    and unit.startswith("node")
                    and name
                    in (
                        "UniLu-Gaia-2014-1.swf",
                        "wagap-2013.swf",
                    )
                ):
                    continue  # queues of 10-25k jobs: minutes (see docs/sim.md, cost)
                a = wait_agreement(t, simulate(t, policy))
                print(
                    f"| {name} | {unit} | {policy} | {a.jobs} "
                    f"| {a.recorded_mean / 3600:.2f} h / {a.simulated_mean / 3600:.2f} h "
                    f"| {a.recorded_median / 60:.1f} / {a.simulated_median / 60:.1f} min "
                    f"| {a.pearson:.2f} | {a.spearman:.2f} |",
                    flush=True,
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cold", action="store_true", help="also time a cold numba compile")
    parser.add_argument("--agreement", action="store_true", help="only the wait agreement table")
    parser.add_argument("--child-memory", nargs=2, type=int, help=argparse.SUPPRESS)
    parser.add_argument("--child-cold", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_memory:
        memory_point(*args.child_memory)
        return
    if args.child_cold:
        cold_compile()
        return
    if args.agreement:
        agreement_table()
        return

    t0 = time.perf_counter()
    from parsl_malleable.sim.trace_replay import warm_up

    import_s = time.perf_counter() - t0
    first = warm_up()
    warm = warm_up()
    print(
        f"import {import_s:.2f} s; first call (load cached numba code, or compile) {first:.2f} s;"
        f" warm call {warm * 1e3:.2f} ms"
    )
    if args.cold:
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, NUMBA_CACHE_DIR=cache)
            cold = run_child("--child-cold", env=env)
        print(f"cold compile (empty numba cache): {cold['seconds']:.1f} s")

    rows = [bench_trace(name, args.repeat) for name in TARGETS]
    print(f"\npeers: {PEERS}")
    for row in rows:
        print(
            f"  {row['trace']}: EASY {row['easy']:,.0f} jobs/s, "
            f"FCFS {row['fcfs']:,.0f}, conservative {row['conservative']:,.0f}; "
            f"{row['ratio_vs_reference']:,.0f}x the plain-Python reference"
        )

    print("\nmemory (EASY, synthetic traces, 2,000 nodes, one process per size):")
    sizes = (50_000, 100_000, 200_000, 400_000)
    points = [run_child("--child-memory", str(n), "2000") for n in sizes]
    for p in points:
        grow = p["rss_after"] - p["rss_before"]
        print(
            f"  {p['jobs']:7d} jobs: RSS {p['rss_before']:6.1f} MiB before simulate, peak "
            f"{p['rss_after']:6.1f} MiB during it: +{grow:6.1f} MiB = "
            f"{grow * 2**20 / p['jobs']:5.0f} B/job "
            f"({p['holes']} holes, {p['seconds']:.2f} s)"
        )
    big = run_child("--child-memory", "300000", "10000")
    print(
        f"\n300k-job synthetic trace, 10,000 nodes, {big['span_days']:.0f} days: "
        f"{big['seconds']:.2f} s = {big['jobs'] / big['seconds']:,.0f} jobs/s, "
        f"peak RSS during simulate +{big['rss_after'] - big['rss_before']:.0f} MiB"
    )
    print(f"this process: peak RSS {peak_rss_mib():.0f} MiB")


if __name__ == "__main__":
    main()
