"""What the provider's parts share: its settings, its book of slots and jobs, its counters.

:class:`~parsl_malleable.provider.BackfillProvider` is assembled from parts that each do one
job of a poll, as classes it inherits: :class:`~.cancelling.Cancelling` (cancels, with
backoff), :class:`~.book_keeping.BookKeeping` (the book against a snapshot),
:class:`~.launching.Launching` (new blocks), :class:`~.yield_step.YieldStep` (blocks that
must leave) and :class:`~.walltime.WalltimeStep` (blocks the scheduler lets outlive their
walltime). They share the state declared here, which the provider's ``__init__`` sets; the
provider itself keeps Parsl's interface, the poll and heartbeat threads and closing down.
"""

from __future__ import annotations

import itertools
import logging
import re
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from parsl_malleable.harvest.demand import DemandFn
from parsl_malleable.harvest.ledger import BlockInfo, JobRecord, Slot
from parsl_malleable.harvest.site_profile import SiteProfile
from parsl_malleable.harvest.teardown import TeardownEstimate
from parsl_malleable.schedulers.base import BlockScheduler
from parsl_malleable.windows.predict import WindowPredictor

# The provider's own logger: its parts log as the provider always has.
logger = logging.getLogger("parsl_malleable.provider")

_DIGITS = re.compile(r"\d+")
YieldHook = Callable[[BlockInfo], None]


class ProviderState:
    """The provider's shared state (set by ``BackfillProvider.__init__``) and the helpers
    every part uses."""

    profile: SiteProfile
    scheduler: BlockScheduler
    clock: Callable[[], float]
    predictor: WindowPredictor
    demand: DemandFn | None
    on_yield: YieldHook | None
    recycle: bool
    script_dir: str | None
    resources: dict[object, Any]
    faults: Counter[str]
    teardown: TeardownEstimate
    polls: int
    last_error: str
    _lock: threading.RLock
    _slots: dict[str, Slot]
    _jobs: dict[str, JobRecord]
    _tag: str
    _job_seq: itertools.count[int]
    _failures: int
    _submit_failures: int
    _gave_up: str
    _said: set[str]

    @property
    def min_block_s(self) -> float:
        """The shortest walltime worth a block now (the provider says)."""
        raise NotImplementedError

    @property
    def heartbeat_file(self) -> Path:
        """The dead-man switch's file (the provider says)."""
        raise NotImplementedError

    def blocks(self) -> list[BlockInfo]:
        """The live blocks (the provider says)."""
        raise NotImplementedError

    def _say_once(self, topic: str, words: str, level: int = logging.INFO) -> None:
        """Log a reason a slot waits the first time it is seen (times and ids aside), so a
        condition that lasts a hundred polls is one line, and a new one is a new line."""
        key = topic + _DIGITS.sub("#", words)
        if key in self._said:
            return
        self._said.add(key)
        logger.log(level, "%s: %s", topic, words)


__all__ = ["ProviderState", "YieldHook", "logger"]
