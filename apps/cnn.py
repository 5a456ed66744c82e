"""A small CNN on scikit-learn's digits as 1x8x8 images: an ordinary DDP script made malleable.

The data ship with scikit-learn (no download); the split is ``digits.load_data``'s. Lines marked
``# +`` are what the elastic runtime adds to a DDP script (``docs/elastic.md``, "From a DDP
script to a malleable app"). Installed as ``parsl_malleable.apps.cnn``.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from parsl_malleable.elastic.rank import RankContext
from parsl_malleable.elastic.sampler import ElasticDistributedSampler
from parsl_malleable.elastic.state import ElasticState

from .digits import accuracy, load_data, make_optimizer, micro_batch_of
from .precision import Precision


def load_images() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(x_train, y_train, x_test, y_test)`` with images shaped ``(N, 1, 8, 8)``."""
    x_tr, y_tr, x_te, y_te = load_data()
    return x_tr.view(-1, 1, 8, 8), y_tr, x_te.view(-1, 1, 8, 8), y_te


def make_model(channels: int = 16, seed: int = 0) -> nn.Sequential:
    """conv(3x3) x2 -> max-pool -> MLP head, initialised from ``seed``."""
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(1, channels, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(channels, 2 * channels, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(2 * channels * 16, 64),
        nn.ReLU(),
        nn.Linear(64, 10),
    )


def train_elastic(
    ctx: RankContext,
    epochs: int = 8,
    batch_size: int = 32,
    lr: float = 0.02,
    channels: int = 16,
    seed: int = 0,
    precision: str = "fp32",
    accumulate: int = 1,
    num_workers: int = 0,
    step_delay_s: float = 0.0,
    micro_batch: int | None = None,
) -> dict[str, Any]:
    """Train the CNN with DDP over whatever ranks the job has; returns test accuracy.

    ``batch_size`` (the global batch), ``precision`` (``fp32``, ``bf16``, ``fp16``),
    ``micro_batch``, ``accumulate`` and ``num_workers`` as in
    :func:`parsl_malleable.apps.digits.train_ddp`; ``lr`` is the global batch's, not scaled
    with the world (unless the job's ``batch="per_rank"``).
    """
    x_tr, y_tr, x_te, y_te = load_images()
    model = make_model(channels, seed).to(ctx.device)  # + the rank's device
    optimizer, scheduler = make_optimizer(model, lr, epochs)
    micro = micro_batch_of(batch_size, accumulate, micro_batch)
    sampler = ElasticDistributedSampler(  # + DistributedSampler
        len(x_tr), batch_size, seed=seed, micro_batch=micro
    )
    data = TensorDataset(x_tr, y_tr)
    # persistent: a rank forks its workers once, not again after every regroup
    loader = DataLoader(
        data, batch_sampler=sampler, num_workers=num_workers, persistent_workers=num_workers > 0
    )
    ddp = ctx.wrap(model)  # + DistributedDataParallel(model)
    amp = Precision(precision, torch.device(ctx.device).type)
    state = ctx.state(model, optimizer, scheduler, sampler=sampler, scaler=amp.scaler)  # +

    def loop(state: ElasticState) -> dict[str, Any]:  # +
        trained = 0  # samples of this rank in the current step (the pause's share)
        while sampler.epoch < epochs:
            for x, y in loader:
                x, y = x.to(ctx.device), y.to(ctx.device)
                if sampler.micro == 0:
                    optimizer.zero_grad()
                    trained = 0
                trained += len(y) if sampler.loss_weight() else 0
                with contextlib.nullcontext() if sampler.last_micro() else ddp.no_sync():
                    with amp.autocast():
                        loss = F.cross_entropy(ddp(x), y) * sampler.loss_weight()
                    amp.backward(loss)
                epoch = sampler.epoch
                if sampler.advance():  # + the global step is complete
                    amp.step(optimizer)
                    if sampler.epoch != epoch:
                        scheduler.step()
                    if step_delay_s:  # a rank's share of the step's compute
                        time.sleep(step_delay_s * trained / batch_size)
                    state.commit()  # +
        model.eval()
        return {
            "test_accuracy": accuracy(model, x_te.to(ctx.device), y_te.to(ctx.device)),
            "steps": state.step,
            "world_size": ctx.world_size,
        }

    return ctx.run(loop, state)  # +
