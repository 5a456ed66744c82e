"""CPU seconds by kind of process while a command runs: where a start-up's CPU goes.

``python benchmarks/cpu_by_process.py -- python benchmarks/bench_block_start.py --variants
after --cycles 0 --first-nodes 5`` runs the command, samples every process of the machine
every 0.2 s with psutil, and prints the CPU each kind of process used while the command ran
(user + system), beside the whole machine's (from ``/proc/stat``) and the wall time. A process
that lives less than one sample period is missed by the per-kind rows and counted only in the
machine's total, so the rows may sum to less.

Kinds, by command line: the command itself ("driver"), Parsl's interchange, the worker pools
(``parsl-malleable-pool`` or ``process_worker_pool.py``, with every process forked or spawned
from them: the fork server, the manager server, the workers and the ranks they run), Slurm's
and PBS's daemons, and everything else.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections import Counter

import psutil

SAMPLE_S = 0.2
# multiprocessing's spawned children: Parsl's own pool spawns its manager server and workers.
POOLS = (
    "parsl-malleable-pool",
    "process_worker_pool",
    "multiprocessing.spawn",
    "multiprocessing.forkserver",
)
DAEMONS = ("slurmctld", "slurmd", "slurmstepd", "pbs_server", "pbs_mom", "pbs_sched", "munged")


def kind_of(proc: psutil.Process, driver_pid: int) -> str:
    """The row a process's CPU goes to."""
    name = proc.name()
    if proc.pid == driver_pid:
        return "driver (the command)"
    if any(name.startswith(d) for d in DAEMONS):
        return "scheduler daemons"
    cmdline = " ".join(proc.cmdline())
    if any(p in cmdline for p in POOLS):
        return "worker pools and their children"
    if "interchange" in cmdline:
        return "Parsl interchange"
    return "other processes"


def cpu_of(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


def machine_cpu() -> float:
    times = psutil.cpu_times()
    return float(times.user + times.nice + times.system + times.irq + times.softirq)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to measure after --")
    me = psutil.Process()
    start, started_at, machine0 = time.monotonic(), time.time(), machine_cpu()
    child = subprocess.Popen(command)
    last: dict[int, tuple[str, float]] = {}  # pid -> (kind, CPU seen at the last sample)
    used: Counter[str] = Counter()
    driver = psutil.Process(child.pid)
    while True:
        # Not reaped yet: a zombie still shows its final CPU times to the last sample.
        done = driver.status() == psutil.STATUS_ZOMBIE
        for proc in psutil.process_iter():
            if proc.pid == me.pid:
                continue
            try:
                cpu = cpu_of(proc)
                if proc.pid not in last:
                    # A process older than the command counts from now, a newer one from 0.
                    born_before = proc.create_time() < started_at
                    last[proc.pid] = (kind_of(proc, child.pid), cpu if born_before else 0.0)
                kind, before = last[proc.pid]
                used[kind] += cpu - before
                last[proc.pid] = (kind, cpu)
            except psutil.Error:
                continue  # it ended between the listing and the read
        if done:
            break
        time.sleep(SAMPLE_S)
    child.wait()
    wall, machine = time.monotonic() - start, machine_cpu() - machine0
    print(f"\nCPU by kind of process over {wall:.1f} s of wall time ({psutil.cpu_count()} cores):")
    for kind, seconds in used.most_common():
        print(f"  {kind:32s} {seconds:7.2f} CPU-s")
    print(f"  {'the whole machine':32s} {machine:7.2f} CPU-s of {wall * psutil.cpu_count():.1f}")
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
