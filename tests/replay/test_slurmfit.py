"""``slurm-fit``: sweep jobs fitted into holes by the simulated Slurm's ``--time-min``."""

from __future__ import annotations

import pytest

from parsl_malleable.allocate.curve import ScalingCurve
from parsl_malleable.errors import ConfigError
from parsl_malleable.replay.batch import batch_sweep
from parsl_malleable.replay.slurmfit import slurm_fit_sweep
from parsl_malleable.replay.workload import ReplayJob
from parsl_malleable.sim.handmade import handmade_trace

CURVE = ScalingCurve((0, 1), (0.0, 10.0))


def sweep_job(samples: float = 15_000.0, submit: float = 2.0) -> ReplayJob:
    return ReplayJob("s", CURVE, 1, 1, 10.0, 5.0, samples, submit)


def test_a_cut_off_job_resumes_from_its_checkpoint_and_beats_batch():
    # 4 nodes: a native 3-node job until 1000; a native 4-node job queued at 1 (the head,
    # reserved at 1000); a 1-node native at 5 that would run at once on the free node.
    trace = handmade_trace([(0, 1000, 1000, 3), (1, 100, 100, 4), (5, 50, 50, 1)], nodes=4)
    # The sweep job needs 1,500 s at 10/s plus a 10 s start; submitted at 2. The hole before
    # the head's reservation is 998 s >= --time-min=300: it starts at 2, cut off at 1000
    # having trained 10 * (998 - 10) = 9,880. The rest (5,120: 512 s + 10 s) is queued at
    # 1000 behind the head (1000-1100) and the 1-node native; both start at 1100; done 1622.
    fit = slurm_fit_sweep(trace, [sweep_job()], nodes_per_job=1, time_min_s=300.0)
    assert fit.submissions == 2
    assert fit.completion_s == pytest.approx([1620.0])
    # The hole it took was the 1-node native's: that job now waits until 1100 (1,095 s).
    assert fit.native_delay_max_s == pytest.approx(1095.0)
    assert fit.native_delay_mean_s == pytest.approx(365.0)
    # As one ordinary batch job it would not fit before 1000 at all: it starts at 1100.
    batch = batch_sweep(trace, [sweep_job()], nodes_per_job=1)
    assert batch.submissions == 1
    assert batch.completion_s == pytest.approx([1100.0 + 1510.0 - 2.0])


def test_a_job_that_fits_whole_is_never_cut():
    trace = handmade_trace([(0, 1000, 1000, 3)], nodes=4)
    fit = slurm_fit_sweep(trace, [sweep_job(samples=1000.0)], nodes_per_job=1)
    assert fit.submissions == 1
    assert fit.completion_s == pytest.approx([110.0])
    assert fit.native_delay_max_s == 0.0


def test_bad_settings_are_named():
    trace = handmade_trace([(0, 10, 10, 1)], nodes=2)
    with pytest.raises(ConfigError, match="time_min_s"):
        slurm_fit_sweep(trace, [sweep_job()], nodes_per_job=1, time_min_s=0.0)
    with pytest.raises(ConfigError, match="EASY"):
        slurm_fit_sweep(trace, [sweep_job()], nodes_per_job=1, policy="fcfs")
    with pytest.raises(ConfigError, match="nodes_per_job"):
        slurm_fit_sweep(trace, [sweep_job()], nodes_per_job=3)
