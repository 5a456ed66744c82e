"""What the controller of an executor may ask of its provider, declared once.

The controller (``controller/live.py``, ``controller/blocks.py``) reaches a
:class:`~parsl_malleable.provider.BackfillProvider` only through :class:`HarvestingProvider`: it
reads the provider's blocks and history, listens for yields, hands over its node demand (and
says when it grew) and its measured start-up, and reads the site's drain margin. It never
imports the provider's class (a layer above it) nor writes the provider's attributes. A
provider without these methods (Parsl's ``LocalProvider``, say) is not a harvesting one: the
controller then learns blocks from the agents that connect.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from parsl_malleable.harvest.demand import DemandFn
from parsl_malleable.harvest.ledger import BlockInfo, JobRecord
from parsl_malleable.harvest.poll_context import YieldHook


@runtime_checkable
class HarvestingProvider(Protocol):
    """The provider's side of the controller link."""

    def blocks(self) -> list[BlockInfo]:
        """The live blocks: nodes, deadline and phase of every scheduler job not yet ended."""
        ...

    def history(self) -> list[JobRecord]:
        """Copies of every block's record, in submission order (ended ones included)."""
        ...

    def add_yield_listener(self, listener: YieldHook) -> None:
        """Call ``listener`` (after the user's ``on_yield``) whenever a block has to yield."""
        ...

    def use_demand(self, demand: DemandFn) -> bool:
        """Hold the nodes ``demand`` asks for, unless the user gave a demand at construction;
        whether it was taken."""
        ...

    def demand_changed(self) -> None:
        """The demand has grown (a job registered): poll now, not at the next interval."""
        ...

    def measured_startup(self, seconds: float) -> None:
        """A block's start-up as measured (block submitted -> first training step), which
        sizes blocks under ``min_block_s: auto``."""
        ...

    @property
    def polls(self) -> int:
        """How many polls the provider has run (its history changes only at one)."""
        ...

    @property
    def drain_margin_s(self) -> float | None:
        """The site's drain margin (seconds before a block's end its ranks leave), if set."""
        ...


__all__ = ["HarvestingProvider"]
