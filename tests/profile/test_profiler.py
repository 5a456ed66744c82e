"""The profiler recovers known curves from noisy samples and feeds the allocator."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from parsl_malleable.allocate import allocate, load_workload
from parsl_malleable.allocate.curve import ScalingCurve
from parsl_malleable.profile import ProfileInputError, ScalabilityProfiler, fit_scaling
from parsl_malleable.profile.protocol import profile_simulated

A, B, C = 1 / 1200.0, 2e-5, 1e-6  # seconds per sample: a/n + b + c*n


def true_rate(n: float) -> float:
    return 1.0 / (A / n + B + C * n)


def noisy_profiler(sizes, per_size: int, noise: float, seed: int = 0) -> ScalabilityProfiler:
    rng = random.Random(seed)
    prof = ScalabilityProfiler()
    for n in sizes:
        for _ in range(per_size):
            prof.record("j", n, true_rate(n) * rng.gauss(1.0, noise))
    return prof


@pytest.mark.parametrize("seed", range(5))
def test_recovers_known_curve_from_noisy_samples(seed):
    prof = noisy_profiler([1, 2, 4, 8, 16], per_size=10, noise=0.05, seed=seed)
    curve = prof.curve("j", max_nodes=64)
    assert curve.nodes == (1, 2, 4, 8, 16, 32, 64)
    for n, rate in zip(curve.nodes[:5], curve.throughput[:5], strict=True):
        assert rate == pytest.approx(true_rate(n), rel=0.05), n
    # Beyond the measured sizes the model follows the measured trend: it cannot know the
    # downturn after 29 nodes, but says so with a standard error that grows per doubling.
    rel = [e / r for r, e in zip(curve.throughput, curve.stderr, strict=True)]
    assert rel[6] > rel[5] > 2 * rel[4]


def test_learns_the_downturn_it_could_not_extrapolate():
    # The same curve, profiled by the protocol with next_size from 16 nodes: after 20 samples
    # the estimate is within 5 % at every node count, the fall after 32 included.
    truth = ScalingCurve.from_points([(n, true_rate(n)) for n in (1, 2, 4, 8, 16, 32, 64)])
    run = profile_simulated(truth, 16, seed=3)
    assert run.worst_all[20] <= 0.05
    assert {1, 64} <= set(run.sizes)


def test_uncertainty_shrinks_with_samples_and_grows_when_extrapolating():
    few = noisy_profiler([1, 2, 4, 8], per_size=3, noise=0.05).fit("j")
    many = noisy_profiler([1, 2, 4, 8], per_size=60, noise=0.05).fit("j")
    assert many.stderr(6) < few.stderr(6)
    assert many.stderr(64) > many.stderr(16) > many.stderr(6)


def test_single_size_means_linear_scaling():
    fit = fit_scaling([4], [4000.0], [40.0])
    assert fit.throughput(8) == pytest.approx(8000.0)
    assert fit.stderr(8) > fit.stderr(4)
    prof = ScalabilityProfiler()
    prof.record("j", 4, 4000.0)
    model = prof.fit("j")
    assert model.throughput(8) == pytest.approx(8000.0)
    assert model.throughput(1) == pytest.approx(1000.0)
    assert model.stderr(16) / 16000 > model.stderr(8) / 8000 > model.stderr(4) / 4000


def test_rescale_costs_and_bad_input():
    prof = ScalabilityProfiler(default_scale_up_s=30.0)
    assert prof.rescale_cost("j", "up") == 30.0
    prof.record_rescale("j", "up", 12.0)
    prof.record_rescale("j", "up", 18.0)
    assert prof.rescale_cost("j", "up") == 15.0
    with pytest.raises(ProfileInputError, match="kind 'sideways'"):
        prof.record_rescale("j", "sideways", 1.0)
    with pytest.raises(ProfileInputError, match="world_size"):
        prof.record("j", 0, 10.0)
    with pytest.raises(ProfileInputError, match="samples_per_s"):
        prof.record("j", 2, float("nan"))
    with pytest.raises(ProfileInputError, match="no throughput samples"):
        prof.curve("other", 8)


def test_exploration_is_suggested_only_while_uncertain_and_worth_it():
    prof = noisy_profiler([1, 2, 4, 8], per_size=20, noise=0.05)
    advice = prof.suggest_exploration("j", 8, horizon_s=3600.0, max_nodes=64)
    assert advice is not None and advice.size == 16 and advice.gain > advice.cost
    # A horizon shorter than the round trip of pauses is not worth exploring.
    assert prof.suggest_exploration("j", 8, horizon_s=5.0, max_nodes=64) is None
    # Once 16 is measured there is nothing new next to 8 within max_nodes=16.
    for _ in range(20):
        prof.record("j", 16, true_rate(16))
    assert prof.suggest_exploration("j", 8, horizon_s=3600.0, max_nodes=16) is None


def test_allocator_consumes_profiled_curves(bftrainer_dir):
    # Jobs whose true curves are FreeTrain's AlexNet and VGG16; the profiler has seen a few
    # sizes each, and the allocator plans with what it learned.
    real = load_workload(bftrainer_dir, "imagenet-imgps-1001J", limit=2)
    rng = random.Random(7)
    prof = ScalabilityProfiler()
    for job in real:
        for n in (1, 2, 4, 8):
            for _ in range(5):
                prof.record(job.name, n, job.curve(n) * rng.gauss(1.0, 0.03))
        prof.record_rescale(job.name, "up", job.scale_up_cost)
    jobs = [prof.training_job(j.name, min_nodes=1, max_nodes=16) for j in real]
    assert jobs[0].scale_up_cost == pytest.approx(real[0].scale_up_cost)
    alloc = allocate(jobs, [f"n{i}" for i in range(20)], solver="cbc")
    # AlexNet is about 6x faster per node: it gets all it can use, VGG16 the rest; the same
    # decision as with the true curves.
    assert alloc.nodes[real[0].name] == 16 and alloc.nodes[real[1].name] == 4
    truth = [replace(j, max_nodes=16) for j in real]
    assert allocate(truth, [f"n{i}" for i in range(20)], solver="cbc").nodes == alloc.nodes


def test_curve_is_cached_until_the_next_sample():
    # The controller asks for every job's curve at every decision: a repeat is a lookup.
    prof = noisy_profiler([1, 2, 4, 8, 16, 32, 64], per_size=3, noise=0.05)
    first = prof.curve("j", 64)
    assert prof.curve("j", 64) is first
    assert prof.curve("j", 32) is not first
    assert prof.curve("j", 32).nodes == (1, 2, 4, 8, 16, 32)
    prof.record("j", 64, true_rate(64))
    again = prof.curve("j", 64)
    assert again is not first and again.throughput != first.throughput
