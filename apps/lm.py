"""A small transformer language model on generated text: an ordinary DDP script made malleable.

The corpus is generated from a fixed seed by a toy grammar ("the small cat sees a red ball ."),
character by character, so nothing is downloaded and every rank builds the same data. The model
is a causal transformer (2 layers, width 64) that predicts the next character of 32-character
windows; CPU-sized. Lines marked ``# +`` are what the elastic runtime adds to a DDP script.
Installed as ``parsl_malleable.apps.lm``.
"""

from __future__ import annotations

import contextlib
import functools
import math
import random
import time
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from parsl_malleable.elastic.rank import RankContext
from parsl_malleable.elastic.sampler import ElasticDistributedSampler
from parsl_malleable.elastic.state import ElasticState

from .digits import micro_batch_of
from .precision import Precision

CONTEXT = 32
WORDS = {
    "det": ["the", "a", "every", "some"],
    "adj": ["small", "red", "quiet", "old", "bright"],
    "noun": ["cat", "dog", "ball", "tree", "bird", "house"],
    "verb": ["sees", "finds", "likes", "follows", "hears"],
}


def sentence(rng: random.Random) -> str:
    """One sentence of the grammar: det [adj] noun verb det [adj] noun ."""

    def phrase() -> list[str]:
        words = [rng.choice(WORDS["det"])]
        if rng.random() < 0.5:
            words.append(rng.choice(WORDS["adj"]))
        return [*words, rng.choice(WORDS["noun"])]

    return " ".join([*phrase(), rng.choice(WORDS["verb"]), *phrase(), "."])


@functools.lru_cache(maxsize=4)
def load_text(chars: int = 60_000, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, str]:
    """``(train windows, validation windows, vocabulary)``: ``(N, CONTEXT + 1)`` int64 codes,
    90 % / 10 % of a generated text of ``chars`` characters."""
    rng = random.Random(seed)  # noqa: S311 (a corpus, not a secret)
    parts: list[str] = []
    size = 0
    while size < chars:
        parts.append(sentence(rng))
        size += len(parts[-1]) + 1
    text = " ".join(parts)[:chars]
    vocab = "".join(sorted(set(text)))
    codes = torch.tensor([vocab.index(c) for c in text], dtype=torch.int64)
    windows = codes[: len(codes) // (CONTEXT + 1) * (CONTEXT + 1)].view(-1, CONTEXT + 1)
    split = int(len(windows) * 0.9)
    return windows[:split], windows[split:], vocab


class TinyLM(nn.Module):
    """Token and position embeddings, a causal transformer encoder, a linear head."""

    mask: torch.Tensor  # a buffer: nn.Module's attribute typing does not know it

    def __init__(self, vocab: int, width: int = 64, layers: int = 2, heads: int = 4) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.position = nn.Parameter(torch.zeros(CONTEXT, width))
        layer = nn.TransformerEncoderLayer(
            width, heads, dim_feedforward=2 * width, dropout=0.0, batch_first=True
        )
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, vocab)
        mask = torch.triu(torch.full((CONTEXT, CONTEXT), float("-inf")), diagonal=1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Next-token logits ``(B, T, vocab)`` for ``tokens`` ``(B, T)``."""
        t = tokens.shape[1]
        h = self.embed(tokens) + self.position[:t]
        h = self.blocks(h, mask=self.mask[:t, :t], is_causal=True)
        return self.head(h)


def make_model(vocab: int, width: int = 64, layers: int = 2, seed: int = 0) -> TinyLM:
    """The model, initialised from ``seed``."""
    torch.manual_seed(seed)
    return TinyLM(vocab, width, layers)


def lm_loss(model: nn.Module, windows: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy (nats per character) of predicting each next character."""
    logits = model(windows[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), windows[:, 1:].reshape(-1))


def train_elastic(
    ctx: RankContext,
    epochs: int = 3,
    batch_size: int = 16,
    lr: float = 1e-3,
    width: int = 64,
    layers: int = 2,
    seed: int = 0,
    chars: int = 60_000,
    precision: str = "fp32",
    accumulate: int = 1,
    num_workers: int = 0,
    step_delay_s: float = 0.0,
    micro_batch: int | None = None,
) -> dict[str, Any]:
    """Train the LM with DDP over whatever ranks the job has; returns validation loss.

    AdamW with a cosine decay over ``epochs``; ``lr`` is the global batch's, not scaled with the
    world (unless the job's ``batch="per_rank"``). ``batch_size`` (the global batch),
    ``precision``, ``micro_batch``, ``accumulate``, ``num_workers`` as in ``digits.train_ddp``.
    """
    train, valid, vocab = load_text(chars, seed)
    model = make_model(len(vocab), width, layers, seed).to(ctx.device)  # +
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda epoch: 0.5 * (1.0 + math.cos(math.pi * epoch / epochs))
    )
    micro = micro_batch_of(batch_size, accumulate, micro_batch)
    sampler = ElasticDistributedSampler(  # + DistributedSampler
        len(train), batch_size, seed=seed, micro_batch=micro
    )
    data = TensorDataset(train)
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
            for (windows,) in loader:
                windows = windows.to(ctx.device)
                if sampler.micro == 0:
                    optimizer.zero_grad()
                    trained = 0
                trained += len(windows) if sampler.loss_weight() else 0
                with contextlib.nullcontext() if sampler.last_micro() else ddp.no_sync():
                    with amp.autocast():
                        loss = lm_loss(ddp, windows) * sampler.loss_weight()
                    amp.backward(loss)
                epoch = sampler.epoch
                if sampler.advance():  # + the global step is complete
                    amp.step(optimizer)
                    if sampler.epoch != epoch:
                        scheduler.step()
                    if step_delay_s:  # a rank's share of the step's compute
                        time.sleep(step_delay_s * trained / batch_size)
                    state.commit()  # +
        with torch.no_grad():
            valid_loss = float(lm_loss(model, valid.to(ctx.device)))
        return {
            "valid_loss": valid_loss,
            "bits_per_char": valid_loss / math.log(2),
            "steps": state.step,
            "world_size": ctx.world_size,
        }

    return ctx.run(loop, state)  # +
