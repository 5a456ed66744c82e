"""Registry of collective backends by name; Horovod is imported only when asked for."""

from __future__ import annotations

from typing import Any

from parsl_malleable.elastic.backend_interface import CollectiveBackend, RendezvousHost
from parsl_malleable.errors import ConfigError

BACKENDS = ("torch", "horovod")


def _check(name: str) -> None:
    if name not in BACKENDS:
        raise ConfigError(f"backend must be one of {', '.join(BACKENDS)}; got {name!r}")


def get_backend(name: str, **options: Any) -> CollectiveBackend:
    """The rank-side backend called ``name`` ("torch" or "horovod")."""
    _check(name)
    if name == "torch":
        from parsl_malleable.elastic.torch_backend import TorchBackend

        return TorchBackend(**options)
    from parsl_malleable.elastic.horovod_backend import HorovodBackend

    return HorovodBackend(**options)


def get_rendezvous_host(name: str, host: str = "127.0.0.1", **options: Any) -> RendezvousHost:
    """The controller-side rendezvous service of backend ``name``, serving on ``host``."""
    _check(name)
    if name == "torch":
        from parsl_malleable.elastic.torch_backend import TorchRendezvousHost

        return TorchRendezvousHost(host=host, **options)
    from parsl_malleable.elastic.horovod_rendezvous import HorovodRendezvousHost

    return HorovodRendezvousHost(host=host, **options)
