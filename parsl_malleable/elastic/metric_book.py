"""The metrics a job's lead rank reports while it trains, kept by its coordinator.

A rank calls ``ctx.report(step, loss=..., acc=...)``; rank 0 of the current epoch sends it to the
coordinator (``metrics`` request), which keeps it here. Training is not one straight line: a lost
peer rolls the group back to its last commit, and a group that starts with no state in memory
resumes from a disk checkpoint, so a rank may report a step twice, or report steps that are then
trained again. The rule that keeps, for each step, the report of the timeline that was finally
committed:

* every epoch starts with a **timeline mark**: rank 0 of a new group sends the step the group
  starts from (``base``, the commit it holds after syncing); every stored report with a step
  above ``base`` belongs to an abandoned timeline and is dropped, before the epoch's own
  reports arrive;
* a report for a step already stored replaces it (the later timeline wins);
* reports and marks from an epoch older than the newest mark are stale (a slow rank of a group
  that has been replaced) and dropped, counted.

Limits (one report, and the book): at most :data:`MAX_KEYS` names of at most
:data:`MAX_KEY_CHARS` characters each, every value a float; NaN and infinities are kept as
reported and counted (a campaign never picks them as best). The book keeps the newest
``max_reports`` steps; older ones are evicted, counted, and a consumer that took them already
(the campaign's store) keeps them.
"""

from __future__ import annotations

import math
import re
import threading
import time
from dataclasses import dataclass, field
from numbers import Real
from typing import Any

MAX_KEYS = 16
MAX_KEY_CHARS = 64
MAX_REPORTS = 5000
KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-/]*$")


def check_metrics(values: dict[str, Any]) -> dict[str, float]:
    """``values`` as ``{name: float}``, or :class:`ValueError` naming the bad name or value.

    Names: 1 to :data:`MAX_KEY_CHARS` characters, a letter or ``_`` then letters, digits or
    ``_.-/``; at most :data:`MAX_KEYS` of them. Values: real numbers (a 0-d tensor or a numpy
    scalar too, through ``float()``), not bools or strings; NaN and infinities pass."""
    if not values:
        raise ValueError("a report needs at least one metric (ctx.report(step, loss=...))")
    if len(values) > MAX_KEYS:
        raise ValueError(f"a report holds at most {MAX_KEYS} metrics, got {len(values)}")
    out: dict[str, float] = {}
    for name, value in values.items():
        if not isinstance(name, str) or len(name) > MAX_KEY_CHARS or not KEY.match(name):
            raise ValueError(
                f"metric name {name!r}: 1 to {MAX_KEY_CHARS} characters, a letter or _ then "
                "letters, digits or _.-/"
            )
        if isinstance(value, (bool, str, bytes)):
            raise ValueError(f"metric {name}={value!r}: a number is needed")
        try:
            number = float(value) if isinstance(value, Real) else float(value.item())
        except (AttributeError, TypeError, ValueError, RuntimeError):
            raise ValueError(
                f"metric {name}={value!r}: a number is needed (a float, int or 0-d tensor)"
            ) from None
        out[name] = number
    return out


def finite(value: float) -> bool:
    """Whether ``value`` may count as a best (not NaN, not infinite)."""
    return math.isfinite(value)


@dataclass(frozen=True)
class MetricRecord:
    """One stored report: the step it belongs to, when it arrived, its values."""

    step: int
    time: float
    values: dict[str, float]

    def as_dict(self) -> dict[str, Any]:
        """``{"step": ..., "time": ..., **values}``."""
        return {"step": self.step, "time": self.time, **self.values}


@dataclass(frozen=True)
class MetricChanges:
    """What changed since the last :meth:`MetricBook.take`: drop every stored step above
    ``cut`` (None: nothing to drop), then store ``records`` (replacing the same steps)."""

    cut: int | None
    records: list[MetricRecord] = field(default_factory=list)


class MetricBook:
    """One job's reports, merged by the rule in the module's docstring; thread-safe."""

    def __init__(self, max_reports: int = MAX_REPORTS) -> None:
        if max_reports < 1:
            raise ValueError(f"max_reports must be at least 1, got {max_reports}")
        self.max_reports = max_reports
        self._lock = threading.Lock()
        self._records: dict[int, MetricRecord] = {}
        self._epoch = -1
        self._dirty: set[int] = set()
        self._cut: int | None = None
        self.reports = 0  # reports accepted
        self.stale = 0  # reports and marks of an epoch older than the newest mark, dropped
        self.dropped = 0  # stored reports dropped by a mark (their timeline was abandoned)
        self.evicted = 0  # the oldest steps evicted beyond max_reports
        self.nonfinite = 0  # values that were NaN or infinite

    def timeline(self, epoch: int, base: int) -> bool:
        """Rank 0 of ``epoch`` starts from committed step ``base``: drop stored steps above
        it. False (counted in :attr:`stale`) for a mark older than the newest one."""
        with self._lock:
            if epoch < self._epoch:
                self.stale += 1
                return False
            self._epoch = epoch
            above = [s for s in self._records if s > base]
            for step in above:
                del self._records[step]
                self._dirty.discard(step)
            self.dropped += len(above)
            self._cut = base if self._cut is None else min(self._cut, base)
            return True

    def add(
        self, epoch: int, step: int, values: dict[str, float], now: float | None = None
    ) -> bool:
        """Store rank 0's report of ``step`` in ``epoch`` (``values`` already checked); False
        (counted) when the epoch is older than the newest mark."""
        record = MetricRecord(step, time.time() if now is None else now, dict(values))
        with self._lock:
            if epoch < self._epoch:
                self.stale += 1
                return False
            self.reports += 1
            self.nonfinite += sum(1 for v in values.values() if not finite(v))
            self._records[step] = record
            self._dirty.add(step)
            while len(self._records) > self.max_reports:
                oldest = min(self._records)
                del self._records[oldest]
                self._dirty.discard(oldest)
                self.evicted += 1
            return True

    def last_step(self) -> int:
        """The newest stored step, -1 when none (a rank 0 re-sends the reports above it)."""
        with self._lock:
            return max(self._records, default=-1)

    def records(self) -> list[MetricRecord]:
        """The stored reports, by step."""
        with self._lock:
            return [self._records[s] for s in sorted(self._records)]

    def take(self) -> MetricChanges:
        """What changed since the last call (for one consumer that persists the reports)."""
        with self._lock:
            changes = MetricChanges(self._cut, [self._records[s] for s in sorted(self._dirty)])
            self._dirty.clear()
            self._cut = None
            return changes

    def counts(self) -> dict[str, int]:
        """``reports``, ``stale``, ``dropped``, ``evicted``, ``nonfinite``, ``kept``."""
        with self._lock:
            return {
                "reports": self.reports,
                "stale": self.stale,
                "dropped": self.dropped,
                "evicted": self.evicted,
                "nonfinite": self.nonfinite,
                "kept": len(self._records),
            }


__all__ = [
    "MAX_KEYS",
    "MAX_KEY_CHARS",
    "MAX_REPORTS",
    "MetricBook",
    "MetricChanges",
    "MetricRecord",
    "check_metrics",
    "finite",
]
