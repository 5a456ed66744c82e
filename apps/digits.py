"""Digits (scikit-learn's 8x8 handwritten digits) with a small MLP, elastic and plain.

``train_ddp`` is the PyTorch way: a ``DistributedDataParallel`` model (``ctx.wrap``) fed by a
``DataLoader`` over an ``ElasticDistributedSampler``. ``train_elastic`` averages gradients by
hand (``ctx.allreduce_gradients``), the path that also runs on Horovod.

Installed with the package as ``parsl_malleable.apps.digits`` (also ``apps.digits`` from the
repository root). The train/test split is fixed (``random_state=0``), so every rank and every run
sees the same data.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import logging
import math
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from parsl_malleable.elastic.rank import RankContext
from parsl_malleable.elastic.sampler import ElasticDistributedSampler
from parsl_malleable.elastic.settings import prepared_by
from parsl_malleable.elastic.state import ElasticSampler, ElasticState

from .precision import Precision

logger = logging.getLogger(__name__)

TEST_FRACTION = 0.25
SPLIT_SEED = 0


@functools.lru_cache(maxsize=1)
def load_data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(x_train, y_train, x_test, y_test)``: pixels scaled to [0, 1], fixed stratified split.

    Staged once per node: the split is saved to :func:`cache_path` (private, tensors only, read
    with ``weights_only=True``), so a rank on a new block loads it in milliseconds instead of
    importing scikit-learn (about 2 s of its start-up). An unreadable cache is rebuilt.
    """
    cache = cache_path()
    if cache is None:
        return _split_digits()
    if cache.exists():
        try:
            saved = torch.load(cache, weights_only=True)
            return saved["x_tr"], saved["y_tr"], saved["x_te"], saved["y_te"]
        except Exception as exc:  # a truncated or foreign file: rebuild it, say so
            logger.warning("digits data cache %s unreadable (%s): rebuilding it", cache, exc)
    split = _split_digits()
    _save_private(cache, dict(zip(("x_tr", "y_tr", "x_te", "y_te"), split, strict=True)))
    return split


def cache_path() -> Path | None:
    """Where this node keeps the split: ``$PM_DATA_CACHE`` (a folder; ``none``: no cache),
    else ``~/.cache/parsl-malleable``; the name carries scikit-learn's version and the split."""
    folder = os.environ.get("PM_DATA_CACHE")
    if folder == "none":
        return None
    root = Path(folder or Path.home() / ".cache" / "parsl-malleable")
    try:
        version = importlib.metadata.version("scikit-learn")
    except importlib.metadata.PackageNotFoundError:
        version = "none"
    return root / f"digits-{version}-{TEST_FRACTION}-{SPLIT_SEED}.pt"


def _split_digits() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    y = torch.tensor(digits.target, dtype=torch.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(
        x, y, test_size=TEST_FRACTION, random_state=SPLIT_SEED, stratify=y
    )
    return x_tr, y_tr, x_te, y_te


def _save_private(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    """Write atomically (a temporary file renamed), readable by the owner only; a cache that
    cannot be written (read-only or full disk) is skipped with a warning."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".digits-")
        with os.fdopen(fd, "wb") as f:
            torch.save(tensors, f)
        os.replace(tmp, path)
    except OSError as exc:
        logger.warning("digits data cache %s not written (%s): loading from scratch", path, exc)


def stage_data(**_job_kwargs: Any) -> None:
    """Load the data into this worker's cache before its first rank (the agent's warm-up)."""
    load_data()


def make_model(hidden: tuple[int, ...] = (128,), seed: int = 0) -> nn.Sequential:
    """An MLP 64 -> hidden... -> 10 with ReLU, initialised from ``seed``."""
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    width = 64
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    layers.append(nn.Linear(width, 10))
    return nn.Sequential(*layers)


def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    """``test_loss`` and ``test_accuracy`` of ``model`` on ``(x, y)``: what the apps report."""
    with torch.no_grad():
        logits = model(x)
        hits = (logits.argmax(dim=1) == y).float().mean()
        return {"test_loss": float(F.cross_entropy(logits, y)), "test_accuracy": float(hits)}


def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """Fraction of ``x`` classified as ``y``."""
    with torch.no_grad():
        return float((model(x).argmax(dim=1) == y).float().mean().item())


def make_optimizer(
    model: nn.Module, lr: float, epochs: int
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """SGD with momentum and weight decay, cosine decay over ``epochs`` (stepped per epoch).

    ``lr`` is the rate of the global batch, used as is at any world size (with the job option
    ``batch="per_rank"``, the rate of one rank, scaled linearly with the world size).
    """
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda epoch: 0.5 * (1.0 + math.cos(math.pi * epoch / epochs))
    )
    return optimizer, scheduler


def micro_batch_of(batch_size: int, accumulate: int, micro_batch: int | None) -> int | None:
    """The sampler's ``micro_batch``: ``micro_batch`` if given, else ``batch_size / accumulate``
    rounded up (``accumulate`` micro-batches per step on one rank; fewer on more ranks, whose
    parts are smaller), else None (no accumulation)."""
    if accumulate < 1:
        raise ValueError(f"accumulate must be >= 1; got {accumulate}")
    if micro_batch is not None or accumulate == 1:
        return micro_batch
    return -(-batch_size // accumulate)


@prepared_by(stage_data)
def train_elastic(
    ctx: RankContext,
    epochs: int = 10,
    batch_size: int = 32,
    lr: float = 0.02,
    hidden: tuple[int, ...] = (128,),
    seed: int = 0,
    step_delay_s: float = 0.0,
) -> dict[str, Any]:
    """Train under the elastic runtime; returns test accuracy, steps and samples seen.

    ``batch_size`` is the global batch (the job's ``batch`` option can make it per rank).
    ``step_delay_s`` stands in for a model that computes longer (tests use it so that
    membership changes happen while training is still under way): a rank pauses that long for
    each ``batch_size`` samples it trains, so a group of N ranks sharing a global step pauses
    1/N of it each step, as real data-parallel compute would.
    """
    x_tr, y_tr, x_te, y_te = load_data()
    model = make_model(tuple(hidden), seed)
    optimizer, scheduler = make_optimizer(model, lr, epochs)
    sampler = ElasticSampler(len(x_tr), batch_size, seed=seed)
    state = ctx.state(model, optimizer, scheduler, sampler=sampler, samples_seen=0)

    def loop(state: ElasticState) -> dict[str, Any]:
        while sampler.epoch < epochs:
            idx = sampler.local_indices(ctx.rank, ctx.world_size)
            total = sampler.global_count(ctx.world_size)
            optimizer.zero_grad()
            if len(idx):
                F.cross_entropy(model(x_tr[idx]), y_tr[idx]).backward()
            ctx.allreduce_gradients(model, len(idx), total)
            optimizer.step()
            epoch = sampler.epoch
            sampler.advance(ctx.world_size)
            if sampler.epoch != epoch:
                scheduler.step()
                # Per epoch, before the commit (the step it completes): see ctx.report.
                ctx.report(state.step + 1, epoch=sampler.epoch, **evaluate(model, x_te, y_te))
            state.samples_seen += total
            if step_delay_s:
                time.sleep(step_delay_s * len(idx) / batch_size)
            state.commit()
        return {
            "test_accuracy": accuracy(model, x_te, y_te),
            "steps": state.step,
            "samples_seen": state.samples_seen,
            "world_size": ctx.world_size,
        }

    return ctx.run(loop, state)


@prepared_by(stage_data)
def train_ddp(
    ctx: RankContext,
    epochs: int = 10,
    batch_size: int = 32,
    lr: float = 0.02,
    hidden: tuple[int, ...] = (128,),
    seed: int = 0,
    precision: str = "fp32",
    accumulate: int = 1,
    num_workers: int = 0,
    step_delay_s: float = 0.0,
    micro_batch: int | None = None,
) -> dict[str, Any]:
    """The digits MLP as a DDP script: ``ctx.wrap`` and a DataLoader; returns test accuracy.

    ``batch_size``: the global batch of one optimizer step (per rank with the job option
    ``batch="per_rank"``); ``precision``: ``fp32``, ``bf16`` (autocast) or ``fp16`` (autocast
    and a GradScaler, whose scale is committed); ``micro_batch``: the most samples a rank takes
    at once (gradient accumulation, DDP's ``no_sync`` on all but a step's last micro-batch);
    ``accumulate``: micro-batches per step on one rank, when ``micro_batch`` is not given;
    ``num_workers``: DataLoader worker processes.
    """
    x_tr, y_tr, x_te, y_te = load_data()
    model = make_model(tuple(hidden), seed).to(ctx.device)  # + the rank's device
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

    def loop(state: ElasticState) -> dict[str, Any]:  # + the loop resumes from the state
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
                        test = evaluate(model, x_te.to(ctx.device), y_te.to(ctx.device))
                        ctx.report(state.step + 1, epoch=sampler.epoch, **test)  # +
                    if step_delay_s:
                        time.sleep(step_delay_s * trained / batch_size)
                    state.commit()  # +
        x_te_, y_te_ = x_te.to(ctx.device), y_te.to(ctx.device)
        return {
            "test_accuracy": accuracy(model, x_te_, y_te_),
            "test_loss": float(F.cross_entropy(model(x_te_), y_te_).detach()),
            "steps": state.step,
            "world_size": ctx.world_size,
        }

    return ctx.run(loop, state)  # +


def train_reference(
    epochs: int = 10,
    batch_size: int = 32,
    lr: float = 0.02,
    hidden: tuple[int, ...] = (128,),
    seed: int = 0,
) -> dict[str, Any]:
    """The same model, data order and hyper-parameters in one process, uninterrupted."""
    x_tr, y_tr, x_te, y_te = load_data()
    model = make_model(tuple(hidden), seed)
    optimizer, scheduler = make_optimizer(model, lr, epochs)
    sampler = ElasticSampler(len(x_tr), batch_size, seed=seed)
    steps = samples = 0
    while sampler.epoch < epochs:
        idx = sampler.local_indices(0, 1)
        optimizer.zero_grad()
        F.cross_entropy(model(x_tr[idx]), y_tr[idx]).backward()
        optimizer.step()
        samples += len(idx)
        epoch = sampler.epoch
        sampler.advance(1)
        if sampler.epoch != epoch:
            scheduler.step()
        steps += 1
    return {"test_accuracy": accuracy(model, x_te, y_te), "steps": steps, "samples_seen": samples}
