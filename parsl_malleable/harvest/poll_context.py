"""What every part of the provider's poll reads: the site, the scheduler, the clock, and the
counters the parts add to.

:class:`PollContext` is made once by :class:`~parsl_malleable.provider.BackfillProvider` and
handed to each part (:class:`~.cancelling.Canceller`, :class:`~.book_keeping.BookKeeper`,
:class:`~.walltime.WalltimeGuard`, :class:`~.yield_step.Yielder`,
:class:`~.launching.Launcher`) at construction. Its fields are set there and never reassigned;
the counters in it (``faults``, ``teardown``, the poll number) are objects the parts add to
through their own methods.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from parsl_malleable.harvest.ledger import BlockInfo
from parsl_malleable.harvest.site_profile import SiteProfile
from parsl_malleable.harvest.teardown import TeardownEstimate
from parsl_malleable.schedulers.base import BlockScheduler

# The provider's own logger: its parts log as the provider always has.
logger = logging.getLogger("parsl_malleable.provider")

_DIGITS = re.compile(r"\d+")
YieldHook = Callable[[BlockInfo], None]


class PollCount:
    """How many polls ran; the provider's poll loop is the only one to :meth:`tick` it."""

    def __init__(self) -> None:
        self._count = 0

    def tick(self) -> int:
        """One more poll; its number."""
        self._count += 1
        return self._count

    @property
    def number(self) -> int:
        """The number of the current (last) poll; 0 before the first."""
        return self._count


class OnceLog:
    """Log a reason a slot waits the first time it is seen (times and ids aside), so a
    condition that lasts a hundred polls is one line, and a new one is a new line."""

    def __init__(self) -> None:
        self._said: set[str] = set()

    def say(self, topic: str, words: str, level: int = logging.INFO) -> None:
        """Log ``topic: words`` unless the same words (digits aside) were said before."""
        key = topic + _DIGITS.sub("#", words)
        if key in self._said:
            return
        self._said.add(key)
        logger.log(level, "%s: %s", topic, words)


@dataclass(frozen=True)
class PollContext:
    """The site and the scheduler every part works against, and the shared counters."""

    profile: SiteProfile
    scheduler: BlockScheduler
    clock: Callable[[], float]
    faults: Counter[str] = field(default_factory=Counter)
    teardown: TeardownEstimate = field(default_factory=lambda: TeardownEstimate(0.0))
    polls: PollCount = field(default_factory=PollCount)
    notes: OnceLog = field(default_factory=OnceLog)


__all__ = ["OnceLog", "PollContext", "PollCount", "YieldHook", "logger"]
