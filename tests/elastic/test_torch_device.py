"""The torch backend binds a rank to its own device, not to its group rank (which changes at
every resize); constructing a backend touches no GPU, so this runs on CPU-only machines."""

from __future__ import annotations

import torch

from parsl_malleable.elastic.backend_registry import get_backend


def test_a_cuda_device_means_nccl_on_that_device_whatever_the_rank() -> None:
    backend = get_backend("torch", device="cuda:3")
    assert backend._device_backend == "nccl"  # type: ignore[attr-defined]
    assert backend.device == torch.device("cuda", 3)  # type: ignore[attr-defined]


def test_a_cpu_rank_uses_gloo_even_where_cuda_is_present() -> None:
    backend = get_backend("torch", device="cpu")
    assert backend._device_backend == "gloo"  # type: ignore[attr-defined]
    assert backend.device == torch.device("cpu")  # type: ignore[attr-defined]
