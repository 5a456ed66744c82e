"""Block sources: where the controller learns which blocks exist, when they end, and yields.

A source answers one question, ``blocks()``: the live blocks now, each with its nodes,
deadline and whether it is yielding. The controller diffs successive answers into the core's
events (appeared or changed, yielding, gone); "nearing its deadline" the core works out from
the deadline and its own clock. :class:`ProviderBlocks` reads a
:class:`~parsl_malleable.provider.BackfillProvider`'s book (no scheduler command: the provider
polls on its own thread) and wakes the controller the moment a block has to yield. Without a
source (a plain HTEX with, say, a LocalProvider) blocks are known from the agents that connect,
have no deadline, and are left only when someone calls ``drain_blocks``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from parsl_malleable.controller.core import ControllerCore
from parsl_malleable.harvest.controller_link import HarvestingProvider
from parsl_malleable.harvest.ledger import BlockInfo, Phase


@dataclass(frozen=True)
class BlockView:
    """One live block: ``key`` names this incarnation (Parsl block id and scheduler job id),
    ``parsl_block`` the Parsl block id its workers report, ``deadline`` its wall-clock end;
    ``submitted_at`` and ``started_at`` when it was submitted and started (if known)."""

    key: str
    parsl_block: str
    nodes: tuple[str, ...]
    deadline: float | None
    yielding: bool
    reason: str = ""
    submitted_at: float | None = None
    started_at: float | None = None


class BlockSource(Protocol):
    """What the controller asks of whatever provides its blocks."""

    def blocks(self) -> Sequence[BlockView]:
        """The live blocks now."""
        ...

    def attach(self, wake: Callable[[], None]) -> None:
        """Call ``wake()`` whenever the answer of :meth:`blocks` changes urgently (a yield)."""
        ...


def block_key(parsl_block: str, scheduler_job: str | None) -> str:
    """The controller's name for one incarnation of a Parsl block (slots are refilled)."""
    return f"{parsl_block}/{scheduler_job}" if scheduler_job else parsl_block


def _view_of(info: BlockInfo, started_at: float | None) -> BlockView:
    """The controller's view of one of the provider's blocks."""
    yielding = info.phase is Phase.YIELDING
    return BlockView(
        key=block_key(info.block_id, info.job_id),
        parsl_block=info.block_id,
        nodes=info.nodes,
        deadline=info.deadline,
        yielding=yielding,
        reason="yields to a native job" if yielding else "",
        submitted_at=info.submitted_at,
        started_at=started_at,
    )


class ProviderBlocks:
    """The blocks of a :class:`~parsl_malleable.provider.BackfillProvider`."""

    def __init__(self, provider: HarvestingProvider) -> None:
        self.provider = provider

    def blocks(self) -> list[BlockView]:
        """The provider's running and yielding blocks (pending ones hold no node yet)."""
        return [
            _view_of(info, info.start)
            for info in self.provider.blocks()
            if info.phase in (Phase.RUNNING, Phase.YIELDING)
        ]

    @property
    def looks(self) -> int:
        """How many times the provider has looked at the scheduler (its polls)."""
        return self.provider.polls

    def ended_blocks(self, keys: set[str]) -> dict[str, BlockView]:
        """Those of ``keys`` the provider recorded as ended, as it recorded them. A block that
        started and ended between two of its polls was never listed by :meth:`blocks`; its
        submission and start come from here (one pass over the provider's records)."""
        found: dict[str, BlockView] = {}
        for record in self.provider.history():
            key = block_key(record.block_id, record.job_id)
            if key in keys and record.ended_at is not None:
                start = record.start if record.start is not None else record.start_reported
                found[key] = _view_of(BlockInfo.of(record), start)
        return found

    def ended_at(self, key: str) -> float | None:
        """When the provider saw the scheduler job of block ``key`` end (None: not seen)."""
        for record in reversed(self.provider.history()):
            if block_key(record.block_id, record.job_id) == key:
                return record.ended_at
        return None

    def attach(self, wake: Callable[[], None]) -> None:
        """Wake the controller the moment a block has to yield (after any hook the user set)."""
        self.provider.add_yield_listener(lambda _info: wake())


class BlockDiff:
    """Turns successive answers of a :class:`BlockSource` into the core's block events.

    A block is gone when the source stops listing it, and only then: agents may connect
    from a block before the source lists it (a provider notices a start at its next poll),
    and their nodes must not be dropped for that.
    """

    def __init__(self) -> None:
        self.listed: dict[str, str] = {}  # block key -> Parsl block id

    def apply(self, views: Iterable[BlockView], core: ControllerCore, now: float) -> list[str]:
        """Tell ``core`` what changed since the last answer; returns the keys now gone."""
        live = {view.key: view for view in views}
        for key, view in live.items():
            self.listed[key] = view.parsl_block
            core.block_update(
                key, now, deadline=view.deadline, yielding=view.yielding, reason=view.reason
            )
        gone = [k for k in self.listed if k not in live]
        for key in gone:
            del self.listed[key]
            if key in core.blocks:
                core.block_gone(key, now)
        return gone


__all__ = ["BlockDiff", "BlockSource", "BlockView", "ProviderBlocks", "block_key"]
