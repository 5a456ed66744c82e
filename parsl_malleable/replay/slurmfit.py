"""``slurm-fit``: the sweep fitted into holes by Slurm alone, for comparison in job-trace mode.

Each training job goes to the normal queue as a ``nodes``-node job with ``--time`` its remaining
runtime (times ``walltime_factor``) and ``--time-min`` ``time_min_s``. Under EASY backfill a job
that does not fit before the head's reservation with its full time starts as soon as the
planned hole lasts at least ``time_min_s``, its limit cut to the hole: the window is the hole
as the scheduler plans it from walltimes, with no predictor. A job cut off at its limit has
checkpointed (Slurm's ``--signal`` warning) and its rest is submitted again at once; every
start pays the job's ``scale_up_s``. The node count is fixed (the simulator does not model
``--nodes=a-b``).

Chunks are added one at a time, the earliest cut first, and the trace simulated again: an
arrival changes the schedule only after it, so every chunk starts where Slurm would start it.
Like ``batch``, these are queued jobs: they can delay native jobs, and the outcome says by how
much.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd

from parsl_malleable.errors import ConfigError
from parsl_malleable.replay.batch import BatchOutcome, native_delays, sweep_rows
from parsl_malleable.replay.workload import ReplayJob
from parsl_malleable.sim.trace_replay import simulate
from parsl_malleable.traces.schema import JobTrace

# A run of this many chunks for one job means the holes are shorter than its start-up.
MAX_CHUNKS_PER_JOB = 200


def slurm_fit_sweep(
    trace: JobTrace,
    jobs: list[ReplayJob],
    nodes_per_job: int = 4,
    time_min_s: float = 1800.0,
    walltime_factor: float = 1.25,
    policy: str = "easy",
) -> BatchOutcome:
    """Run ``jobs`` as ``--time-min`` jobs inside ``trace`` (see the module docstring)."""
    if policy != "easy":
        raise ConfigError("slurm-fit needs EASY backfill (the simulator honours --time-min there)")
    if not 1 <= nodes_per_job <= trace.machine.nodes:
        raise ConfigError(f"nodes_per_job must be in [1, {trace.machine.nodes}]")
    if not time_min_s > 0:
        raise ConfigError(f"time_min_s must be > 0; got {time_min_s}")
    if any(j.curve(nodes_per_job) <= 0 for j in jobs):
        raise ConfigError(f"a sweep job trains nothing on {nodes_per_job} nodes")
    base = simulate(trace, policy, end_cut="last_end")
    first_id = int(trace.jobs["job_id"].max()) + 1 if len(trace.jobs) else 1
    # Each chunk is a batch job of its own: the job's remaining samples from its (re)submit.
    chunks = list(jobs)
    owner = list(range(len(jobs)))  # chunk -> index of the sweep job it continues
    while True:
        extra = sweep_rows(chunks, nodes_per_job, walltime_factor, first_id)
        combined = pd.concat([trace.jobs, extra], ignore_index=True)
        time_min = np.r_[np.full(len(trace.jobs), np.nan), np.full(len(extra), time_min_s)]
        order = np.argsort(combined["submit"].to_numpy(), kind="stable")
        combined = combined.iloc[order].reset_index(drop=True)
        result = simulate(
            JobTrace(combined, trace.machine), policy, end_cut="last_end", time_min=time_min[order]
        )
        outcome = result.jobs.set_index("job_id").loc[extra["job_id"]]
        last = {job: k for k, job in enumerate(owner)}  # later chunks overwrite earlier ones
        cut = _earliest_cut(chunks, list(last.values()), outcome, nodes_per_job)
        if cut is None:
            break
        k, end, trained = cut
        if owner.count(owner[k]) >= MAX_CHUNKS_PER_JOB:
            raise ConfigError(
                f"slurm-fit: job {jobs[owner[k]].name} was cut off {MAX_CHUNKS_PER_JOB} times; "
                f"the holes are too short for --time-min={time_min_s:g}"
            )
        chunks.append(replace(chunks[k], submit=end, samples=chunks[k].samples - trained))
        owner.append(owner[k])
    ends = np.full(len(jobs), np.nan)
    for job, k in last.items():
        ends[job] = outcome.iloc[k]["sim_end"]
    submits = np.array([j.submit for j in jobs])
    mean_delay, max_delay = native_delays(base, result, extra["job_id"])
    done = np.isfinite(ends)
    return BatchOutcome(
        nodes_per_job=nodes_per_job,
        completion_s=(ends - submits).tolist(),
        time_to_result_s=float(ends.max() - submits.min()) if done.all() else math.nan,
        native_delay_mean_s=mean_delay,
        native_delay_max_s=max_delay,
        submissions=len(chunks),
    )


def _earliest_cut(
    chunks: list[ReplayJob], latest: list[int], outcome: pd.DataFrame, nodes: int
) -> tuple[int, float, float] | None:
    """Among the ``latest`` chunks (each job's last), the one cut off before its end that ended
    first: its index, when it ended and the samples it trained."""
    best: tuple[int, float, float] | None = None
    for k in latest:
        chunk = chunks[k]
        row = outcome.iloc[k]
        start, end, limit = row["sim_start"], row["sim_end"], row["sim_limit"]
        if not np.isfinite(start):
            continue  # never started: the sweep does not finish
        rate = chunk.curve(nodes)
        needed = chunk.samples / rate + chunk.scale_up_s
        if limit >= needed * (1 - 1e-9):
            continue  # ran to its end
        trained = min(chunk.samples, rate * max(0.0, limit - chunk.scale_up_s))
        if best is None or end < best[1]:
            best = (k, float(end), trained)
    return best


__all__ = ["slurm_fit_sweep"]
