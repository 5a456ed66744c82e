"""A training function whose own code raises after a few committed steps (the rank traceback
tests find the raising line by its marker comment)."""

from __future__ import annotations

from typing import Any

import torch

MARKER = "# <- the user's error"


def check_loss(step: int, fail_at: int) -> None:
    """The user's own check, failing at step ``fail_at``."""
    if step >= fail_at:
        raise ValueError(f"loss diverged at step {step}")  # <- the user's error


def train_then_fail(ctx: Any, fail_at: int = 2) -> Any:
    """Train a tiny model, one commit per step, until :func:`check_loss` raises."""
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    state = ctx.state(model, optimizer)

    def loop(state: Any) -> Any:
        while True:
            optimizer.zero_grad()
            model(torch.ones(4, 2)).pow(2).mean().backward()
            ctx.allreduce_gradients(model)
            optimizer.step()
            state.commit()
            check_loss(state.step, fail_at)

    return ctx.run(loop, state)
