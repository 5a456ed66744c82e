"""``ElasticDistributedSampler``: exactly once per epoch across any resizes, DataLoader-ready."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, TensorDataset

from parsl_malleable.elastic.sampler import ElasticDistributedSampler


def _group(
    num_samples: int,
    batch: int,
    world: int,
    state: dict[str, int] | None,
    micro_batch: int | None = None,
    mode: str | None = None,
):
    """One sampler per rank of a group of ``world``, all at the committed ``state``."""
    samplers = []
    for rank in range(world):
        sampler = ElasticDistributedSampler(
            num_samples, batch, seed=3, micro_batch=micro_batch, batch=mode
        )
        if state is not None:
            sampler.load_state_dict(state)
        sampler.set_group(rank, world)
        samplers.append(sampler)
    return samplers


@settings(max_examples=60, deadline=None)
@given(
    num_samples=st.integers(1, 60),
    batch=st.integers(1, 7),
    phases=st.lists(st.tuples(st.integers(1, 6), st.integers(1, 12)), min_size=1, max_size=8),
    micro_batch=st.none() | st.integers(1, 4),
    mode=st.sampled_from([None, "global", "per_rank"]),
)
def test_every_sample_once_per_epoch_across_any_resizes(
    num_samples, batch, phases, micro_batch, mode
):
    """Groups of changing size each train some steps from the committed position, as ranks do
    after a resize; every rank yields as many micro-batches, and the real (unpadded) parts of an
    epoch are a permutation of the data set."""
    seen: dict[int, list[int]] = {}
    state = None
    for world, steps in phases:
        samplers = _group(num_samples, batch, world, state, micro_batch, mode)
        lengths = {len(s) for s in samplers}
        assert len(lengths) == 1
        left = lengths.pop()
        iterators = [iter(s) for s in samplers]
        done = 0
        while done < steps and left:
            weights = [0.0] * world
            complete = set()
            while not complete:  # the micro-batches of one global step
                for rank, (sampler, it) in enumerate(zip(samplers, iterators, strict=True)):
                    batch_indices = next(it)
                    assert batch_indices, "a rank got an empty batch"
                    local = sampler.local_micro_count()
                    assert local <= (micro_batch or local)
                    seen.setdefault(sampler.epoch, []).extend(batch_indices[:local])
                    weights[rank] += sampler.weight() * sampler.loss_weight()
                complete = {sampler.advance() for sampler in samplers}
                left -= 1
                assert len(complete) == 1  # every rank ends the step at the same micro-batch
                complete.discard(False)
            # Weighted per-rank means average to the global mean: the weights sum to the world
            # (a rank without samples has weight 0).
            assert abs(sum(weights) - world) < 1e-9
            done += 1
        state = samplers[0].state_dict()
        assert all(s.state_dict() == state for s in samplers)
    finished = [e for e in seen if e < state["epoch"]]
    for epoch in finished:
        assert sorted(seen[epoch]) == list(range(num_samples)), epoch
    if state["epoch"] in seen:
        current = seen[state["epoch"]]
        assert len(current) == len(set(current)) == state["position"]


def test_padding_when_fewer_samples_than_ranks_has_zero_weight():
    (a, b, c) = _group(2, 4, 3, None)
    assert [next(iter(s)) for s in (a, b, c)] == [[a.permutation()[i].item()] for i in (0, 1, 0)]
    assert [s.local_count() for s in (a, b, c)] == [1, 1, 0]
    assert [s.weight() for s in (a, b, c)] == [1.5, 1.5, 0.0]


def test_dataloader_with_workers_resumes_mid_epoch_on_another_world_size():
    data = TensorDataset(torch.arange(51))
    first = ElasticDistributedSampler(data, batch_size=4, seed=1)
    first.set_group(0, 1)
    loader = DataLoader(data, batch_sampler=first, num_workers=2)
    got = []
    for step, (x,) in enumerate(loader):
        got += x.tolist()
        first.advance()
        if step == 2:
            break  # a resize at the commit after step 3
    state = first.state_dict()
    assert state == {"epoch": 0, "position": 12, "num_samples": 51}

    rest = []
    for rank in range(3):
        sampler = ElasticDistributedSampler(data, batch_size=4, seed=1)
        sampler.load_state_dict(state)
        sampler.set_group(rank, 3)
        batches = [x.tolist() for (x,) in DataLoader(data, batch_sampler=sampler, num_workers=2)]
        # 39 samples left in global steps of 4 (the batch does not grow with the world size),
        # each cut into parts of 2, 1, 1.
        assert len(batches) == len(sampler) == 10
        rest += [i for b in batches for i in b]
    assert sorted(got + rest) == list(range(51))


def test_iterating_without_a_group_says_what_to_do():
    sampler = ElasticDistributedSampler(10, batch_size=2)
    try:
        iter(sampler).__next__()
    except RuntimeError as exc:
        assert "ctx.run" in str(exc)
    else:
        raise AssertionError("no error")


def test_persistent_workers_follow_a_rollback_mid_epoch():
    """``persistent_workers=True``: the same worker serves the iteration after a rollback (the
    loop abandoned mid-epoch, the sampler restored to its last commit) from the committed place,
    so a rank forks no worker after a regroup."""
    data = TensorDataset(torch.arange(40))
    sampler = ElasticDistributedSampler(data, batch_size=4, seed=2)
    sampler.set_group(0, 1)
    loader = DataLoader(data, batch_sampler=sampler, num_workers=1, persistent_workers=True)
    for step, (x,) in enumerate(loader):
        sampler.advance()
        if step == 1:
            committed = sampler.state_dict()
        if step == 4:
            break  # steps 3-5 are lost: the group failed before their commit
    workers = [w.pid for w in loader._iterator._workers]
    sampler.load_state_dict(committed)
    resumed = [x.tolist() for (x,) in loader]
    assert [w.pid for w in loader._iterator._workers] == workers  # not started again
    expected = sampler.permutation()[8:].tolist()
    assert [i for batch in resumed for i in batch] == expected
