"""Mixed precision for the examples: autocast, and a GradScaler when the format needs one.

``bf16`` keeps fp32's exponent range, so it needs no loss scaling; ``fp16`` does, and the
scaler's state (scale, growth tracker) goes into ``ctx.state(..., scaler=amp.scaler)`` so that it
is committed and survives resizes like the optimizer's.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

FORMATS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


class Precision:
    """``autocast()``, ``backward(loss)`` and ``step(optimizer)`` for one number format."""

    def __init__(self, name: str = "fp32", device_type: str = "cpu") -> None:
        if name not in FORMATS:
            raise ValueError(f"precision must be one of {', '.join(FORMATS)}; got {name!r}")
        self.name = name
        self.dtype = FORMATS[name]
        self.device_type = device_type
        self.scaler: torch.amp.GradScaler | None = (
            torch.amp.GradScaler(device_type, init_scale=2.0**10) if name == "fp16" else None
        )

    def autocast(self) -> Any:
        """The forward pass's context: ``torch.autocast`` in the format (nothing for fp32)."""
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device_type, dtype=self.dtype)

    def backward(self, loss: torch.Tensor) -> None:
        """``loss.backward()``, scaled when there is a scaler."""
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        """``optimizer.step()``; with a scaler, skipped on inf/nan and the scale updated."""
        if self.scaler is None:
            optimizer.step()
            return
        self.scaler.step(optimizer)
        self.scaler.update()
