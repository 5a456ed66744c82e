"""A fixed global batch by default (issue #35): the same samples in every step and the same
gradient as one rank at any world size, however the batch is split over ranks and
micro-batches; no learning-rate scaling unless asked for.

Ranks are simulated in one process: each computes its micro-batches' gradients as a training
loop does (mean loss times ``loss_weight()``), scales the sum by ``weight()`` as the DDP hook of
``ctx.wrap`` does (or by ``local * world / global`` as ``ctx.allreduce_gradients`` does), and
the group's gradient is their sum over the world size, as the backends' averaging is. The
multi-process run of the same thing is ``test_same_curve.py``.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from parsl_malleable.elastic.sampler import ElasticDistributedSampler
from parsl_malleable.elastic.state import (
    ElasticSampler,
    ElasticState,
    job_batch_defaults,
    linear_lr_scaling,
)

N = 47  # 2 full steps of 20, then 7


def _data() -> tuple[torch.Tensor, torch.Tensor, torch.nn.Module]:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(N, 5, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 3, (N,), generator=gen)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    return x, y, model.double()


def _flat_grad(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def _group(world: int, batch_size: int = 20, **options) -> list[ElasticDistributedSampler]:
    samplers = [ElasticDistributedSampler(N, batch_size, seed=4, **options) for _ in range(world)]
    for rank, sampler in enumerate(samplers):
        sampler.set_group(rank, world)
    return samplers


def _steps(world: int, count: int = 3, **options) -> list[tuple[list[int], torch.Tensor]]:
    """The first ``count`` global steps: their real samples (rank by rank) and the group's
    gradient."""
    x, y, model = _data()
    samplers = _group(world, **options)
    iterators = [iter(s) for s in samplers]
    steps = []
    for _ in range(count):
        samples: list[int] = []
        total = None
        for sampler, it in zip(samplers, iterators, strict=True):
            model.zero_grad()
            weight = sampler.weight()
            while True:
                indices = next(it)
                samples += indices[: sampler.local_micro_count()]
                loss = F.cross_entropy(model(x[indices]), y[indices]) * sampler.loss_weight()
                loss.backward()
                if sampler.advance():
                    break
            grad = _flat_grad(model) * weight
            total = grad if total is None else total + grad
        assert total is not None
        steps.append((samples, total / world))
    return steps


@pytest.mark.parametrize("micro_batch", [None, 1, 3])
@pytest.mark.parametrize("world", [2, 3, 8, 25])
def test_every_step_has_the_samples_and_gradient_of_one_rank(world, micro_batch):
    """20 samples over 3 ranks are 7/7/6, the short step of 7 over 8 ranks leaves one without a
    sample (padding), and 25 ranks exceed the global batch itself."""
    reference = _steps(1)
    for (samples, grad), (ref_samples, ref_grad) in zip(
        _steps(world, micro_batch=micro_batch), reference, strict=True
    ):
        assert samples == ref_samples  # the same samples in the same order: entry k is fixed
        torch.testing.assert_close(grad, ref_grad, rtol=1e-12, atol=1e-15)
    assert [len(s) for s, _ in reference] == [20, 20, 7]


def test_a_per_rank_batch_grows_with_the_world_size():
    """The option that keeps the old behaviour: steps of ``world * batch_size`` samples, so the
    first step at 2 ranks is not the first step at 1 (entry k of the epoch still is)."""
    ((one, one_grad),) = _steps(1, count=1, batch_size=10, batch="per_rank")
    ((two, two_grad),) = _steps(2, count=1, batch_size=10, batch="per_rank")
    assert len(one) == 10 and two[:10] == one and len(two) == 20
    assert not torch.allclose(one_grad, two_grad, rtol=1e-3)


def test_hand_written_batching_gives_the_one_rank_gradient_with_uneven_parts():
    """``ElasticSampler`` with ``ctx.allreduce_gradients``'s weighting, each rank's part split by
    the loop into micro-batches of 2 (loss times ``len(part) / len(indices)``)."""
    x, y, model = _data()

    def gradient(world: int) -> torch.Tensor:
        sampler = ElasticSampler(N, 20, seed=1)
        sampler.advance(world)
        sampler.advance(world)  # the short last step: 7 samples
        total = torch.zeros(sum(p.numel() for p in model.parameters()), dtype=torch.float64)
        count = sampler.global_count(world)
        for rank in range(world):
            model.zero_grad()
            indices = sampler.local_indices(rank, world)
            for part in indices.split(2):
                loss = F.cross_entropy(model(x[part]), y[part]) * len(part) / len(indices)
                loss.backward()
            if len(indices):
                total += _flat_grad(model) * len(indices) * world / count
        return total / world

    reference = gradient(1)
    for world in (2, 3, 4, 9):
        torch.testing.assert_close(gradient(world), reference, rtol=1e-12, atol=1e-15)


def test_micro_batches_count_and_a_commit_mid_step_is_refused():
    a = ElasticDistributedSampler(10, 6, micro_batch=2)  # steps of 6 (3 + 3), then 4 (2 + 2)
    a.set_group(0, 2)
    assert len(a) == 3 and [len(i) for i in a] == [2, 1, 2]
    assert (a.micro_count(), a.local_micro_count(), a.loss_weight()) == (2, 2, 2 / 3)
    assert a.advance() is False and a.last_micro()
    with pytest.raises(RuntimeError, match=r"only when sampler\.advance\(\) returns True"):
        a.state_dict()
    assert a.advance() is True
    assert a.state_dict() == {"epoch": 0, "position": 6, "num_samples": 10}
    with pytest.raises(ValueError, match="micro_batch >= 1"):
        ElasticDistributedSampler(10, 4, micro_batch=0)
    with pytest.raises(ValueError, match="ElasticSampler: batch must be one of global, per_rank"):
        ElasticSampler(10, 4, batch="perrank")  # type: ignore[arg-type]


def test_the_learning_rate_is_scaled_only_when_the_batch_grows_with_the_world():
    def lr_after_resizes(**options) -> float:
        torch.manual_seed(0)
        model = torch.nn.Linear(2, 2)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        state = ElasticState(model, optimizer, **options)
        for world in (3, 2, 4):
            state.resized(world)
        return optimizer.param_groups[0]["lr"]

    assert lr_after_resizes() == 0.01  # the default: never scaled
    assert lr_after_resizes(sampler=ElasticDistributedSampler(8, 2)) == 0.01
    assert lr_after_resizes(sampler=ElasticSampler(8, 2, batch="per_rank")) == pytest.approx(0.04)
    assert lr_after_resizes(resize_hooks=[linear_lr_scaling]) == pytest.approx(0.04)


def test_the_jobs_batch_option_fills_in_only_what_the_function_left_open():
    sampler = ElasticDistributedSampler(8, 2)
    assert job_batch_defaults("per_rank", sampler, None) == [linear_lr_scaling]
    assert sampler.batch == "per_rank"
    chosen = ElasticDistributedSampler(8, 2, batch="global")
    assert job_batch_defaults("per_rank", chosen, None) == []
    assert chosen.batch == "global"
    assert job_batch_defaults("per_rank", None, None) == [linear_lr_scaling]
    assert job_batch_defaults("global", None, None) == []
    assert job_batch_defaults("per_rank", None, []) == []
    with pytest.raises(ValueError, match="the job's batch option: batch must be one of"):
        job_batch_defaults("all", None, None)
