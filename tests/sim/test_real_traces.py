"""The simulator on the four carried real traces: consistency, and agreement with recorded waits."""

from __future__ import annotations

import numpy as np
import pytest

from parsl_malleable.sim import simulate
from parsl_malleable.sim.validate import wait_agreement
from parsl_malleable.traces import read_swf
from parsl_malleable.traces.schema import JobTrace

TRACES = [
    "UniLu-Gaia-2014-1.swf.gz",
    "theta_2022.swf.gz",
    "hpc2n.swf.gz",
    "wagap-2013.swf.gz",
]


@pytest.fixture(scope="module")
def real(traces_dir):
    return {name: read_swf(traces_dir / name) for name in TRACES}


@pytest.mark.parametrize("name", TRACES)
def test_easy_replay_is_consistent(real, name):
    trace = real[name]
    res = simulate(trace, "easy")
    jobs = res.jobs
    n = trace.machine.nodes
    assert len(jobs) == len(trace.jobs)
    kept = jobs["dropped"] == ""
    assert kept.sum() == res.stats.jobs_simulated > 0.95 * len(jobs)
    assert jobs.loc[kept, "sim_start"].notna().all()
    assert (jobs.loc[kept, "sim_start"] >= jobs.loc[kept, "submit"]).all()
    # node-seconds add up: busy (clipped to the window) + idle = nodes x window
    node, s, e = res.busy_intervals()
    lo, hi = res.stats.window_start, res.stats.window_end
    busy = np.clip(np.minimum(e, hi) - np.maximum(s, lo), 0, None).sum()
    idle = ((res.idle_end - res.idle_start) * res.idle_count).sum()
    assert busy + idle == pytest.approx(n * (hi - lo), rel=1e-9)
    assert 0 < res.stats.idle_fraction < 1
    # no node runs two jobs at once
    order = np.lexsort((s, node))
    node, s, e = node[order], s[order], e[order]
    same = node[1:] == node[:-1]
    assert np.all(s[1:][same] >= e[:-1][same])


@pytest.mark.parametrize("name", ["theta_2022.swf.gz", "hpc2n.swf.gz"])
def test_backfill_shortens_waits_on_real_workloads(real, name):
    fcfs = simulate(real[name], "fcfs").stats
    easy = simulate(real[name], "easy").stats
    assert easy.wait_mean < fcfs.wait_mean
    assert easy.backfilled > 0


def test_agreement_is_perfect_when_the_record_is_itself_a_simulation(real):
    trace = real["theta_2022.swf.gz"]
    first = simulate(trace, "easy").jobs
    jobs = trace.jobs.copy()
    jobs["start"] = first["sim_start"].to_numpy()
    jobs["end"] = first["sim_end"].to_numpy()
    replay = JobTrace(jobs, trace.machine)
    again = simulate(replay, "easy")
    assert np.array_equal(again.jobs["sim_start"], first["sim_start"])
    agree = wait_agreement(replay, again)
    assert agree.jobs == len(jobs)
    assert agree.pearson == pytest.approx(1.0)
    assert agree.spearman == pytest.approx(1.0)
    assert agree.simulated_median == agree.recorded_median


def test_agreement_with_recorded_waits_is_reported(real):
    trace = real["theta_2022.swf.gz"]
    agree = wait_agreement(trace, simulate(trace, "easy"))
    assert agree.jobs == len(trace.jobs)
    assert agree.recorded_mean > 0 and agree.simulated_mean > 0
    assert -1 <= agree.pearson <= 1 and -1 <= agree.spearman <= 1
