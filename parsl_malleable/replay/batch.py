"""``batch``: what a user does without this project, for comparison in job-trace mode.

Each training job of the sweep is submitted to the normal queue at a fixed size, as a native
job with a walltime ``walltime_factor`` times its runtime (its samples at that size's
throughput, plus its start-up); the trace is simulated again with them, under the same policy.
Their completion times are the sweep's time-to-result; every native job's change of wait is
the delay the sweep causes (a harvester's is zero by construction: it yields at once).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from parsl_malleable.errors import ConfigError
from parsl_malleable.replay.workload import ReplayJob
from parsl_malleable.sim.trace_replay import SimResult, simulate
from parsl_malleable.traces.schema import JOB_COLUMNS, JobTrace


@dataclass(frozen=True)
class BatchOutcome:
    """The sweep run as jobs in the queue (``batch`` or ``slurm-fit``); ``submissions`` counts
    the batch jobs it took (more than the sweep's jobs when Slurm cut some off)."""

    nodes_per_job: int
    completion_s: list[float]
    time_to_result_s: float
    native_delay_mean_s: float
    native_delay_max_s: float
    submissions: int


def native_delays(
    base: SimResult, with_sweep: SimResult, sweep_ids: pd.Series
) -> tuple[float, float]:
    """Mean and largest increase of a native job's wait when the sweep's jobs are queued too."""
    sim_jobs = with_sweep.jobs
    natives = sim_jobs.loc[~sim_jobs["job_id"].isin(sweep_ids)].set_index("job_id")["sim_wait"]
    before = base.jobs.set_index("job_id")["sim_wait"]
    delay = np.maximum((natives - before.reindex(natives.index)).dropna().to_numpy(), 0.0)
    if not len(delay):
        return 0.0, 0.0
    return float(delay.mean()), float(delay.max())


def sweep_rows(
    jobs: list[ReplayJob], nodes: int, walltime_factor: float, first_id: int
) -> pd.DataFrame:
    """``jobs`` as trace rows (ids from ``first_id``): ``nodes`` nodes each, the runtime their
    samples take there plus the start-up, a walltime ``walltime_factor`` times that."""
    runtime = np.array([j.samples / j.curve(nodes) + j.scale_up_s for j in jobs])
    submit = np.array([j.submit for j in jobs])
    count = len(jobs)
    return pd.DataFrame(
        {
            "job_id": np.arange(first_id, first_id + count, dtype=np.int64),
            "submit": submit,
            "start": submit,
            "end": submit + runtime,
            "walltime": runtime * walltime_factor,
            "nodes_req": np.full(count, nodes, dtype=np.int64),
            "nodes": np.full(count, nodes, dtype=np.int64),
            "cores_req": np.full(count, -1, dtype=np.int64),
            "cores": np.full(count, -1, dtype=np.int64),
            "queue": pd.array(["sweep"] * count, dtype="string"),
            "user": pd.array(["sweep"] * count, dtype="string"),
        }
    ).astype(JOB_COLUMNS)


def batch_sweep(
    trace: JobTrace,
    jobs: list[ReplayJob],
    nodes_per_job: int = 4,
    walltime_factor: float = 1.25,
    policy: str = "easy",
) -> BatchOutcome:
    """Run ``jobs`` as fixed-size batch jobs inside ``trace`` (see the module docstring)."""
    if not 1 <= nodes_per_job <= trace.machine.nodes:
        raise ConfigError(f"nodes_per_job must be in [1, {trace.machine.nodes}]")
    if any(j.curve(nodes_per_job) <= 0 for j in jobs):
        raise ConfigError(f"a sweep job trains nothing on {nodes_per_job} nodes")
    base = simulate(trace, policy, end_cut="last_end")
    first_id = int(trace.jobs["job_id"].max()) + 1 if len(trace.jobs) else 1
    extra = sweep_rows(jobs, nodes_per_job, walltime_factor, first_id)
    combined = pd.concat([trace.jobs, extra], ignore_index=True)
    combined = combined.sort_values("submit", kind="stable").reset_index(drop=True)
    with_sweep = simulate(JobTrace(combined, trace.machine), policy, end_cut="last_end")
    sim_jobs = with_sweep.jobs
    mine = sim_jobs["job_id"].isin(extra["job_id"]).to_numpy()
    ends = sim_jobs.loc[mine, "sim_end"].to_numpy()
    submits = sim_jobs.loc[mine, "submit"].to_numpy()
    mean_delay, max_delay = native_delays(base, with_sweep, extra["job_id"])
    return BatchOutcome(
        nodes_per_job=nodes_per_job,
        completion_s=(ends - submits).tolist(),
        time_to_result_s=float(ends.max() - submits.min()) if len(ends) else math.nan,
        native_delay_mean_s=mean_delay,
        native_delay_max_s=max_delay,
        submissions=len(jobs),
    )


__all__ = ["BatchOutcome", "batch_sweep", "native_delays", "sweep_rows"]
