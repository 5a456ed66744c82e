"""ElasticState commits and rollback, the re-sharding sampler, linear learning-rate scaling."""

from __future__ import annotations

import pytest
import torch

from parsl_malleable.elastic.checkpoint import CheckpointStore
from parsl_malleable.elastic.state import ElasticSampler, ElasticState, linear_lr_scaling


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


def test_sampler_resized_mid_epoch_sees_each_sample_once():
    sampler = ElasticSampler(num_samples=103, batch_size=4, seed=3)
    seen: list[int] = []
    for world in [2, 2, 4, 4, 1, 3, 3, 3, 2] + [3] * 20:
        if sampler.epoch > 0:
            break
        parts = [sampler.local_indices(r, world).tolist() for r in range(world)]
        assert sum(len(p) for p in parts) == sampler.global_count(world)
        seen.extend(i for p in parts for i in p)
        sampler.advance(world)
    assert sampler.epoch == 1
    assert sorted(seen) == list(range(103))


def test_sampler_last_batch_split_evenly_and_state_round_trip():
    sampler = ElasticSampler(num_samples=10, batch_size=4, shuffle=False)
    sampler.advance(2)
    sampler.advance(1)  # 8 consumed: the global batch is 4 at any world size
    sizes = [len(sampler.local_indices(r, 3)) for r in range(3)]
    assert sizes == [1, 1, 0]
    other = ElasticSampler(num_samples=10, batch_size=4, shuffle=False)
    other.load_state_dict(sampler.state_dict())
    assert other.local_indices(0, 3).tolist() == [8]
    with pytest.raises(ValueError, match="for 10 samples, this sampler has 12"):
        ElasticSampler(num_samples=12, batch_size=4).load_state_dict(sampler.state_dict())


def test_linear_lr_scaling_scales_optimizer_and_scheduler_when_asked():
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=5)
    state = ElasticState(model, optimizer, scheduler, resize_hooks=[linear_lr_scaling])
    state.resized(4)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.4)
    assert scheduler.base_lrs == [pytest.approx(0.4)]
    linear_lr_scaling(state, 4, 2)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.2)


def test_commit_restore_rolls_back_model_optimizer_sampler_and_fields():
    model = _model()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    sampler = ElasticSampler(num_samples=20, batch_size=2)
    state = ElasticState(model, optimizer, sampler=sampler, seen=0)
    x = torch.randn(5, 4)

    def step() -> None:
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()
        sampler.advance(1)
        state.seen += 2

    step()
    state.commit()
    committed = {k: v.clone() for k, v in model.state_dict().items()}
    step()
    assert not torch.equal(model[0].weight, committed["0.weight"])
    state.restore()
    for key, value in model.state_dict().items():
        assert torch.equal(value, committed[key])
    assert (state.step, state.seen, sampler.position) == (1, 2, 2)
    assert optimizer.state_dict()["state"][0]["step"].item() == 1


def test_unknown_field_is_refused_with_its_name():
    state = ElasticState(_model(), best=0.0)
    state.best = 0.5
    assert state.best == 0.5
    with pytest.raises(AttributeError, match="'bset'"):
        state.bset = 1.0
    with pytest.raises(AttributeError, match="'missing'"):
        _ = state.missing


def test_snapshot_is_a_valid_weights_only_checkpoint(tmp_path):
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    state = ElasticState(model, optimizer, sampler=ElasticSampler(8, 2), tag="run-1")
    state.commit()
    store = CheckpointStore(tmp_path)
    store.save(state.committed(), step=state.step, fingerprint=state.fingerprint)
    payload, step = store.load_latest(state.fingerprint)
    fresh = ElasticState(
        _model(),
        torch.optim.SGD(_model().parameters(), lr=1.0),
        sampler=ElasticSampler(8, 2),
        tag="",
    )
    fresh.load_snapshot(payload)
    assert step == 1 and fresh.tag == "run-1" and fresh.step == 1
    assert torch.equal(fresh.model[2].bias, model[2].bias)


def test_reports_are_committed_rolled_back_and_checkpointed_with_the_state(tmp_path):
    model = _model()
    state = ElasticState(model, torch.optim.SGD(model.parameters(), lr=0.1))
    state.record_report(1, {"loss": 2.0, "acc": 0.5})
    state.commit()
    state.record_report(2, {"loss": 1.0})
    state.restore()  # a rollback: the report of the step never committed is gone
    assert state.reports == ((1, (("acc", 0.5), ("loss", 2.0))),)
    state.record_report(1, {"loss": 1.5})  # the same step again replaces it
    state.record_report(2, {"loss": 0.75})
    state.commit()
    store = CheckpointStore(tmp_path)
    store.save(state.committed(), step=state.step, fingerprint=state.fingerprint)
    payload, _step = store.load_latest(state.fingerprint)
    fresh = ElasticState(_model(), torch.optim.SGD(_model().parameters(), lr=1.0))
    fresh.load_snapshot(payload)
    assert fresh.reports == ((1, (("loss", 1.5),)), (2, (("loss", 0.75),)))
    # A checkpoint from before reports were kept loads with none; junk entries are skipped.
    fresh.load_snapshot({**payload, "reports": None})
    assert fresh.reports == ()
    fresh.load_snapshot({**payload, "reports": [(3, [("x", 1.0)]), "junk", (4, 5)]})
    assert fresh.reports == ((3, (("x", 1.0),)),)
