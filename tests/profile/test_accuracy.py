"""The profiler alone (docs/profile.md, protocol): every distinct curve of the carried
workloads, from every starting size, 20 samples with 5 % noise; one fixed seed per case."""

from __future__ import annotations

from pathlib import Path

import pytest

from parsl_malleable.allocate import load_scaling
from parsl_malleable.allocate.curve import ScalingCurve
from parsl_malleable.profile.protocol import profile_simulated

STARTS = (1, 2, 4, 8, 16, 32, 64)


def distinct_curves(directory: Path) -> dict[str, ScalingCurve]:
    found: dict[tuple, tuple[str, ScalingCurve]] = {}
    for path in sorted(directory.glob("*-scaling.csv*")):
        for job, curve in load_scaling(path).items():
            found.setdefault((curve.nodes, curve.throughput), (job, curve))
    return dict(found.values())


@pytest.fixture(scope="module")
def curves(bftrainer_dir):
    found = distinct_curves(bftrainer_dir)
    assert found, f"no *-scaling.csv[.gz] under {bftrainer_dir}"
    return found


def test_noiseless_samples_recover_every_curve_from_every_start(curves):
    # Model adequacy: with exact samples the estimate is within 2 % everywhere (the old
    # a/n + b + c*n model was 13.5 % off AlexNet even with exact data at every size).
    for job, truth in curves.items():
        top = max(truth.nodes)
        for start in (s for s in STARTS if s <= top):
            run = profile_simulated(truth, start, noise=0.0, checkpoints=(20,))
            assert run.worst_all[20] <= 0.02, (job, start, run.sizes)


def test_noisy_profiling_of_every_curve_from_every_start(curves):
    worst = {}
    for job, truth in curves.items():
        top = max(truth.nodes)
        for start in (s for s in STARTS if s <= top):
            run = profile_simulated(truth, start, seed=start, checkpoints=(10, 20))
            worst[job, start] = run.worst_all[20]
            # Every size is visited, both below and above the start.
            assert set(run.sizes) >= {n for n in truth.nodes if 1 <= n <= top}, (job, start)
            assert run.worst_all[20] <= run.worst_all[10] + 0.03, (job, start)
    within = sum(w <= 0.05 for w in worst.values()) / len(worst)
    # The target (every run within 5 %) is not met with 5 % noise: see docs/benchmarks.md,
    # "Profiler accuracy". What holds with these seeds: most runs within 5 %, every run
    # within 8 %.
    assert within >= 0.7, sorted(worst.items(), key=lambda kv: -kv[1])[:5]
    assert max(worst.values()) <= 0.08, max(worst.items(), key=lambda kv: kv[1])


def test_smooth_curve_mostly_within_5_percent_from_the_ends_and_the_middle(curves):
    # VGG16 is nearly linear: its sizes borrow from each other, so 20 noisy samples suffice in
    # most runs whichever end the job starts at (about 97 % in the benchmark).
    truth = curves["J00001-vgg16"]
    worst = [
        profile_simulated(truth, start, seed=seed, checkpoints=(20,)).worst_all[20]
        for start in (1, 8, 64)
        for seed in range(5)
    ]
    assert sum(w <= 0.05 for w in worst) / len(worst) >= 0.8, worst
    assert max(worst) <= 0.07, worst


def test_half_the_noise_puts_every_curve_within_5_percent(curves):
    # What bounds the accuracy is the noise, not the model or the design: with 2.5 % noise
    # (a quarter of the variance) 20 samples put every curve, AlexNet's kinks included, within
    # 5 % from the ends and the middle (the benchmark's 10 seeds x 7 starts: worst 3.9 %).
    for job, truth in curves.items():
        for start in (1, 8, 64):
            run = profile_simulated(truth, start, noise=0.025, seed=start, checkpoints=(20,))
            assert run.worst_all[20] <= 0.05, (job, start, run.sizes)
