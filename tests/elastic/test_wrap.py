"""``ctx.wrap``: one wrapper per model, DDP-like state dict, clear errors outside a group and on
Horovod. (Training through resizes with it: ``test_ddp_resize.py``.)"""

from __future__ import annotations

import pytest
import torch

from parsl_malleable.elastic.backend_registry import get_rendezvous_host
from parsl_malleable.elastic.coordinator import Coordinator
from parsl_malleable.elastic.ddp import ElasticDDP
from parsl_malleable.elastic.rank import RankContext, RankSettings, RankSpec
from parsl_malleable.errors import ConfigError


def _context(backend: str) -> tuple[Coordinator, RankContext]:
    coordinator = Coordinator(get_rendezvous_host(backend), settle_s=0.0)
    coordinator.start()
    host, port = coordinator.address
    spec = RankSpec(host, port, coordinator.token, RankSettings(backend=backend))
    return coordinator, RankContext(spec)


def test_wrap_gives_one_ddp_like_wrapper_per_model_and_needs_a_group():
    coordinator, ctx = _context("torch")
    try:
        model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
        wrapped = ctx.wrap(model)
        assert isinstance(wrapped, ElasticDDP)
        assert ctx.wrap(model) is wrapped and ctx.wrap(wrapped) is wrapped
        assert [id(p) for p in wrapped.parameters()] == [id(p) for p in model.parameters()]
        assert sorted(wrapped.state_dict()) == sorted(f"module.{k}" for k in model.state_dict())
        assert wrapped.eval() is wrapped and not model.training
        wrapped.train()
        assert model.training
        with pytest.raises(RuntimeError, match=r"inside the loop given to ctx\.run"):
            wrapped(torch.zeros(1, 3))
    finally:
        ctx.close()
        coordinator.close()


@pytest.mark.horovod
def test_wrap_on_horovod_says_to_average_by_hand():
    coordinator, ctx = _context("horovod")
    try:
        with pytest.raises(ConfigError, match=r"needs backend='torch'.*allreduce_gradients"):
            ctx.wrap(torch.nn.Linear(3, 2))
    finally:
        ctx.close()
        coordinator.close()
