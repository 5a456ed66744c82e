"""Training state as bytes that cannot run code when read: for disk and for the network.

Checkpoints and the state one rank sends the others at a membership change are written with
``torch.save`` and read with ``torch.load(weights_only=True)``, which restores tensors and plain
Python values and refuses everything else: a file or a peer that sends a pickled object gets an
error, never code execution. :func:`check_loadable` applies the same rule before writing, so a
state that could not be read back fails where it is written, naming the field.
"""

from __future__ import annotations

import io
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

import torch

# Exactly what ``torch.load(weights_only=True)`` accepts without extra safe globals. Checking at
# save time turns "cannot resume" (found days later) into an error at the line that saved it.
_LEAF_TYPES: tuple[type, ...] = (
    str,
    bytes,
    int,
    float,
    complex,
    bool,
    type(None),
    torch.Tensor,
    torch.dtype,
    torch.Size,
    torch.device,
)
_CONTAINER_TYPES: tuple[type[Iterable[Any]], ...] = (dict, OrderedDict, list, tuple, set)


def check_loadable(value: Any, where: str, error: type[Exception] = ValueError) -> None:
    """Raise ``error`` naming the first part of ``value`` (``where`` names the whole) that
    ``torch.load(weights_only=True)`` could not restore."""
    if isinstance(value, _LEAF_TYPES):
        return
    if type(value) in (dict, OrderedDict):
        for key, item in value.items():
            if not isinstance(key, str | int | float | bool | tuple | type(None)):
                raise error(
                    f"{where} has a key of type {type(key).__name__}, which "
                    f"torch.load(weights_only=True) cannot restore"
                )
            check_loadable(item, f"{where}[{key!r}]", error)
        return
    if isinstance(value, _CONTAINER_TYPES) and type(value) in _CONTAINER_TYPES:
        for index, item in enumerate(value):
            check_loadable(item, f"{where}[{index}]", error)
        return
    raise error(
        f"{where} is a {type(value).__module__}.{type(value).__qualname__}, which "
        f"torch.load(weights_only=True) refuses; store tensors and plain Python values only "
        f"(convert arrays with torch.as_tensor, objects to dicts)"
    )


def encode_state(value: Any) -> torch.Tensor:
    """``value`` (checked with :func:`check_loadable`) as a uint8 tensor, ready to broadcast."""
    check_loadable(value, "training state")
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)


def decode_state(data: torch.Tensor) -> Any:
    """The value :func:`encode_state` encoded, read with ``weights_only=True`` (a pickled object
    raises ``pickle.UnpicklingError`` instead of running)."""
    raw = data.cpu().numpy().tobytes()
    return torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)


__all__ = ["check_loadable", "decode_state", "encode_state"]
