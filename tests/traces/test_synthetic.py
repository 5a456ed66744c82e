"""The synthetic workload generator: schema, determinism, load, model features."""

from __future__ import annotations

import numpy as np
import pytest

from parsl_malleable.traces import JOB_COLUMNS, offered_load, synthetic_trace


def test_schema_and_determinism():
    first = synthetic_trace(500, 256, seed=3)
    again = synthetic_trace(500, 256, seed=3)
    other = synthetic_trace(500, 256, seed=4)
    assert list(first.jobs.columns) == list(JOB_COLUMNS)
    assert first.jobs.equals(again.jobs)
    assert not first.jobs.equals(other.jobs)
    assert first.machine.nodes == 256


@pytest.mark.parametrize("load", [0.5, 0.9, 1.2])
def test_offered_load_close_to_target(load):
    trace = synthetic_trace(4000, 512, seed=1, load=load)
    assert offered_load(trace) == pytest.approx(load, rel=0.03)


def test_model_features():
    jobs = synthetic_trace(5000, 1024, seed=0).jobs
    nodes = jobs["nodes"].to_numpy()
    runtime = (jobs["end"] - jobs["start"]).to_numpy()
    assert nodes.min() >= 1 and nodes.max() <= 1024
    assert (nodes == jobs["nodes_req"].to_numpy()).all()
    assert 0.15 < np.mean(nodes == 1) < 0.35  # serial share near SERIAL_PROB
    parallel = nodes[nodes > 1]
    assert np.mean((parallel & (parallel - 1)) == 0) > 0.5  # power-of-two emphasis
    assert (runtime >= 1).all() and (runtime <= jobs["walltime"].to_numpy()).all()
    assert np.median(jobs["walltime"].to_numpy() / runtime) > 1.5  # users over-estimate
    hours = (jobs["submit"].to_numpy() / 3600) % 24
    busy, quiet = np.mean((hours >= 10) & (hours < 18)), np.mean((hours < 6) | (hours >= 22))
    assert busy > 1.5 * quiet  # daily cycle: more arrivals in the afternoon
    assert jobs["submit"].is_monotonic_increasing
    assert jobs["user"].nunique() > 10


@pytest.mark.parametrize(("n_jobs", "nodes", "load"), [(0, 8, 0.5), (5, 0, 0.5), (5, 8, 0.0)])
def test_rejects_bad_arguments(n_jobs, nodes, load):
    with pytest.raises(ValueError):
        synthetic_trace(n_jobs, nodes, load=load)


def test_single_node_machine():
    jobs = synthetic_trace(50, 1, seed=2).jobs
    assert (jobs["nodes"] == 1).all()
