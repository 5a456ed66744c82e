"""The emulated site: a batch system inside the user's process, with virtual nodes.

``scheduler`` is the :class:`EmulatedSite` itself; ``native_load`` replays a trace as the native
jobs; ``blocks`` runs our blocks as processes, each node under ``node_wrapper``; ``settings`` is
a profile's ``emulated:`` section; ``figures`` summarises the native load a profile makes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from parsl_malleable.schedulers.emulated.scheduler import EmulatedSite


def __getattr__(name: str) -> Any:
    # Lazy: a site profile imports .settings, which must not start the simulator's imports.
    if name == "EmulatedSite":
        from parsl_malleable.schedulers.emulated.scheduler import EmulatedSite

        return EmulatedSite
    raise AttributeError(name)


__all__ = ["EmulatedSite"]
