"""Synthetic rigid-job workloads for demos and tests, after Lublin & Feitelson (2003).

The model (U. Lublin, D. G. Feitelson, "The workload on parallel supercomputers: modeling the
characteristics of rigid jobs", JPDC 63(11), 2003), simplified where noted:

* **Size**: with probability ``SERIAL_PROB`` a job uses one node. Otherwise ``log2(size)`` is a
  two-stage uniform: with probability ``U_PROB`` uniform on ``[U_LOW, U_MED]``, else on
  ``[U_MED, U_HIGH]`` with ``U_HIGH = log2(nodes)`` and ``U_MED = U_HIGH - 2.5``; with
  probability ``POW2_PROB`` the exponent is rounded first, giving a power-of-two size.
* **Runtime**: ``ln(runtime)`` follows a hyper-gamma: ``Gamma(A1, B1)`` with probability ``p``,
  else ``Gamma(A2, B2)``, where ``p = PB + PA * size128`` falls with the job size. The paper fits
  a 128-node machine; here ``size128 = 128 * size / nodes`` rescales sizes to it (simplification).
* **Requested walltime** (after Tsafrir, Etsion & Feitelson 2005, simplified): users
  over-estimate, ``runtime * exp(|N(0, OVERESTIMATE_SIGMA)|)`` rounded up to the next popular
  value (5 min ... 48 h); a fraction ``KILLED_PROB`` of jobs runs into its limit.
* **Arrivals**: a Poisson process whose rate follows a daily cycle,
  ``1 + DAILY_AMPLITUDE * cos(2 pi (hour - PEAK_HOUR) / 24)`` (L&F fit a gamma-distributed
  cycle; a cosine keeps the shape with one parameter). The time span ``T`` is chosen so that the
  offered load ``sum(nodes * runtime) / (machine nodes * T)`` equals ``load``.

The trace has no schedule: ``start = submit`` and ``end = submit + runtime`` carry the runtime
only (a simulator computes its own starts). Same ``seed``, same trace.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from parsl_malleable.traces._frame import jobs_frame
from parsl_malleable.traces.schema import JobTrace, MachineInfo, ReadReport

SERIAL_PROB = 0.244
POW2_PROB = 0.576
U_LOW, U_PROB, U_MED_BELOW_HIGH = 0.8, 0.86, 2.5
A1, B1, A2, B2 = 4.2, 0.94, 312.0, 0.03
PA, PB = -0.0054, 0.78
OVERESTIMATE_SIGMA = 1.0
KILLED_PROB = 0.05
POPULAR_WALLTIMES = np.array([5, 10, 15, 30, 60, 120, 240, 360, 480, 720, 1440, 2880]) * 60.0
DAILY_AMPLITUDE, PEAK_HOUR = 0.5, 14.0
USERS, USER_ZIPF = 64, 1.2


def synthetic_trace(n_jobs: int, nodes: int, *, seed: int = 0, load: float = 0.9) -> JobTrace:
    """``n_jobs`` rigid jobs for a machine of ``nodes`` nodes offering ``load`` (0 < load)."""
    if n_jobs < 1 or nodes < 1:
        raise ValueError(f"need n_jobs >= 1 and nodes >= 1, got {n_jobs} and {nodes}")
    if not load > 0:
        raise ValueError(f"load must be positive, got {load}")
    rng = np.random.default_rng(seed)
    size = job_sizes(rng, n_jobs, nodes)
    runtime = runtimes(rng, size, nodes)
    walltime = walltimes(rng, runtime)
    killed = rng.random(n_jobs) < KILLED_PROB
    runtime = np.where(killed, walltime, runtime)
    span = float(np.sum(size * runtime)) / (nodes * load)
    submit = arrivals(rng, n_jobs, span)
    weights = 1.0 / np.arange(1, USERS + 1) ** USER_ZIPF
    users = rng.choice(USERS, size=n_jobs, p=weights / weights.sum())

    jobs = jobs_frame(
        {
            "job_id": np.arange(1, n_jobs + 1),
            "submit": submit,
            "start": submit,
            "end": submit + runtime,
            "walltime": walltime,
            "nodes_req": size,
            "nodes": size,
            "cores_req": np.full(n_jobs, -1),
            "cores": np.full(n_jobs, -1),
            "queue": pd.Series(["batch"] * n_jobs),
            "user": pd.Series([f"u{u:02d}" for u in users]),
        },
        ReadReport(),
    )
    machine = MachineInfo(name=f"synthetic-lublin-{nodes}", nodes=nodes)
    return JobTrace(jobs=jobs, machine=machine, report=ReadReport(lines_read=n_jobs))


def job_sizes(rng: np.random.Generator, n: int, nodes: int) -> np.ndarray:
    """Node counts: serial jobs, else two-stage log-uniform with power-of-two emphasis."""
    high = np.log2(nodes)
    med = max(high - U_MED_BELOW_HIGH, U_LOW)
    low_stage = rng.random(n) < U_PROB
    exponent = np.where(low_stage, rng.uniform(U_LOW, med, n), rng.uniform(med, max(high, med), n))
    exponent = np.where(rng.random(n) < POW2_PROB, np.round(exponent), exponent)
    size = np.round(2.0**exponent).astype(np.int64)
    size = np.where(rng.random(n) < SERIAL_PROB, 1, size)
    return np.clip(size, 1, nodes)


def runtimes(rng: np.random.Generator, size: np.ndarray, nodes: int) -> np.ndarray:
    """Seconds from the size-dependent hyper-gamma of ``ln(runtime)``, at least one second."""
    p_short = np.clip(PB + PA * 128.0 * size / nodes, 0.0, 1.0)
    short = rng.random(len(size)) < p_short
    log_runtime = np.where(short, rng.gamma(A1, B1, len(size)), rng.gamma(A2, B2, len(size)))
    return np.clip(np.round(np.exp(log_runtime)), 1.0, POPULAR_WALLTIMES[-1])


def walltimes(rng: np.random.Generator, runtime: np.ndarray) -> np.ndarray:
    """Requested limits: over-estimated runtimes rounded up to popular values (max 48 h)."""
    wish = runtime * np.exp(np.abs(rng.normal(0.0, OVERESTIMATE_SIGMA, len(runtime))))
    index = np.searchsorted(POPULAR_WALLTIMES, wish, side="left")
    return POPULAR_WALLTIMES[np.minimum(index, len(POPULAR_WALLTIMES) - 1)]


def arrivals(rng: np.random.Generator, n: int, span: float) -> np.ndarray:
    """``n`` sorted arrival times on ``[0, span]`` of a Poisson process with a daily cycle."""
    grid = np.linspace(0.0, span, max(2, int(span / 600.0) + 2))  # 10-minute steps
    hour = (grid / 3600.0) % 24.0
    rate = 1.0 + DAILY_AMPLITUDE * np.cos(2 * np.pi * (hour - PEAK_HOUR) / 24.0)
    cumulative = np.concatenate([[0.0], np.cumsum((rate[1:] + rate[:-1]) / 2 * np.diff(grid))])
    # conditioned on n events, arrival times are sorted draws from the normalised intensity
    targets = np.sort(rng.uniform(0.0, cumulative[-1], n))
    return np.round(np.interp(targets, cumulative, grid))
