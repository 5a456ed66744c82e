"""``batch``: the sweep as ordinary jobs in the simulated queue, and the delay it causes."""

from __future__ import annotations

import pytest

from parsl_malleable.allocate.curve import ScalingCurve
from parsl_malleable.errors import ConfigError
from parsl_malleable.replay.batch import batch_sweep
from parsl_malleable.replay.workload import ReplayJob
from parsl_malleable.sim.handmade import handmade_trace

CURVE = ScalingCurve((0, 1, 2), (0.0, 10.0, 20.0))


def test_a_sweep_in_the_queue_waits_and_delays_the_natives_behind_it():
    # 4 nodes, busy until 1000 s; a 4-node native job arrives at 20 s, after the sweep.
    trace = handmade_trace([(0, 1000, 1000, 4), (20, 100, 100, 4)], nodes=4)
    jobs = [ReplayJob(f"s{i}", CURVE, 1, 2, 10.0, 5.0, 2000.0, 10.0) for i in range(2)]
    outcome = batch_sweep(trace, jobs, nodes_per_job=2)
    # Each sweep job: 2000 samples at 20/s plus its 10 s start = 110 s, from 1000 s.
    assert outcome.completion_s == pytest.approx([1100.0, 1100.0])
    assert outcome.time_to_result_s == pytest.approx(1100.0)
    # The native job would have started at 1000 s; it now waits for the sweep: +110 s.
    assert outcome.native_delay_max_s == pytest.approx(110.0)
    assert outcome.native_delay_mean_s == pytest.approx(55.0)


def test_a_sweep_larger_than_the_machine_is_refused():
    trace = handmade_trace([(0, 10, 10, 1)], nodes=2)
    job = ReplayJob("s", CURVE, 1, 2, 1.0, 1.0, 10.0, 0.0)
    with pytest.raises(ConfigError, match="nodes_per_job"):
        batch_sweep(trace, [job], nodes_per_job=3)
