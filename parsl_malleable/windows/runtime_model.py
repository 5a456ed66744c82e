"""How early jobs end: the distribution of runtime / requested walltime, learned from history.

Users over-request walltime, so most jobs end well before their limit. The planner's
"running jobs end at their limits" therefore over-states how long idle nodes stay idle. This
module learns the empirical ratio ``runtime / walltime`` per stratum (user, queue and size class,
backing off to coarser strata when a finer one has too few samples) and samples end times of
running jobs *conditioned on how long they have already run*: a job that has used half its limit
can only end in the second half.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

# A ratio above 1 means the job overran (grace time); it still ends near its limit.
MAX_RATIO = 1.0


def size_class(nodes: int) -> int:
    """Power-of-two size bucket: 1, 2, 3-4, 5-8, ... nodes map to 0, 1, 2, 3, ..."""
    return max(0, math.ceil(math.log2(max(int(nodes), 1))))


StratumKey = tuple[str, ...]


@dataclass(frozen=True)
class JobKey:
    """What the model knows about a job when it predicts its end."""

    nodes: int
    queue: str = ""
    user: str = ""

    def strata(self) -> list[StratumKey]:
        """Candidate strata, most specific first."""
        size = str(size_class(self.nodes))
        keys: list[StratumKey] = []
        if self.user:
            keys.append(("user", self.queue, self.user, size))
            keys.append(("user", self.queue, self.user))
        keys.append(("queue", self.queue, size))
        keys.append(("size", size))
        keys.append(("all",))
        return keys


@dataclass
class RuntimeRatioModel:
    """Empirical runtime/walltime ratios per stratum, with conditional sampling.

    ``min_samples``: a stratum is used only when it has at least this many jobs;
    ``min_tail``: for a job that has already run a fraction ``f`` of its limit, a stratum is used
    only when at least this many of its jobs ran longer than ``f`` (else the next coarser one).
    With no history at all every job ends at its limit (the naive planner).
    """

    min_samples: int = 20
    min_tail: int = 5
    strata: dict[StratumKey, np.ndarray] = field(default_factory=dict)

    @property
    def fitted(self) -> bool:
        """Whether any history was learned."""
        return bool(self.strata)

    @classmethod
    def fit(
        cls,
        jobs: pd.DataFrame,
        *,
        min_samples: int = 20,
        min_tail: int = 5,
    ) -> RuntimeRatioModel:
        """Learn from finished jobs (the trace schema: ``start``, ``end``, ``walltime``,
        ``nodes``, ``queue``, ``user``). Jobs without a positive walltime or a runtime are
        ignored."""
        model = cls(min_samples=min_samples, min_tail=min_tail)
        if jobs.empty:
            return model
        run = (jobs["end"] - jobs["start"]).to_numpy(dtype=float)
        limit = jobs["walltime"].to_numpy(dtype=float)
        ok = np.isfinite(run) & np.isfinite(limit) & (limit > 0) & (run >= 0)
        if not ok.any():
            return model
        frame = pd.DataFrame(
            {
                "ratio": np.minimum(run[ok] / limit[ok], MAX_RATIO),
                "size": [str(size_class(n)) for n in jobs["nodes"].to_numpy()[ok]],
                "queue": jobs["queue"].astype(str).to_numpy()[ok],
                "user": jobs["user"].astype(str).to_numpy()[ok],
            }
        )
        model._add_groups(frame, ["size"], "size")
        model._add_groups(frame, ["queue", "size"], "queue")
        known_user = frame[frame["user"] != ""]
        model._add_groups(known_user, ["queue", "user"], "user")
        model._add_groups(known_user, ["queue", "user", "size"], "user")
        model.strata[("all",)] = np.sort(frame["ratio"].to_numpy())
        return model

    def _add_groups(self, frame: pd.DataFrame, by: list[str], tag: str) -> None:
        for values, group in frame.groupby(by, sort=False):
            if len(group) >= self.min_samples:
                key = (tag, *(str(v) for v in (values if isinstance(values, tuple) else (values,))))
                self.strata[key] = np.sort(group["ratio"].to_numpy())

    def ratios_for(self, key: JobKey, elapsed_fraction: float = 0.0) -> np.ndarray:
        """Sorted ratios of the most specific stratum with enough jobs longer than
        ``elapsed_fraction``, restricted to those jobs; empty when there is no history."""
        fallback = np.empty(0)
        for stratum in key.strata():
            ratios = self.strata.get(stratum)
            if ratios is None:
                continue
            tail = ratios[np.searchsorted(ratios, elapsed_fraction, side="left") :]
            if len(tail) >= self.min_tail:
                return tail
            if len(tail) > len(fallback):
                fallback = tail
        return fallback

    def quantile(self, key: JobKey, q: float, elapsed_fraction: float = 0.0) -> float:
        """The ``q`` quantile of runtime / walltime for a job like ``key`` that has run
        ``elapsed_fraction`` of its limit (1.0 when there is no history)."""
        ratios = self.ratios_for(key, elapsed_fraction)
        if not len(ratios):
            return max(MAX_RATIO, elapsed_fraction)
        return float(np.quantile(ratios, q))

    def sample_ends(
        self,
        keys: Sequence[JobKey],
        starts: np.ndarray,
        limits: np.ndarray,
        now: float,
        samples: int,
        rng: np.random.Generator,
    ) -> np.ndarray:
        """End times, shape ``(samples, len(keys))``, of running jobs started at ``starts`` with
        walltime ``limits`` (``inf`` = unlimited), never before ``now`` nor after the limit.

        Each job's end is drawn from its stratum's ratios above the fraction already used; a job
        that has outlived every comparable job ends uniformly between now and its limit.
        """
        n = len(keys)
        ends = np.empty((samples, n))
        starts = np.asarray(starts, dtype=float)
        limits = np.asarray(limits, dtype=float)
        for j in range(n):
            start, limit = starts[j], limits[j]
            hard_end = start + limit
            if not math.isfinite(limit) or hard_end <= now:
                ends[:, j] = max(hard_end, now)
                continue
            used = (now - start) / limit
            ratios = self.ratios_for(keys[j], used)
            if len(ratios):
                picks = ratios[rng.integers(0, len(ratios), size=samples)]
            elif self.fitted:
                picks = rng.uniform(used, MAX_RATIO, size=samples)
            else:
                picks = np.full(samples, MAX_RATIO)
            ends[:, j] = np.clip(start + picks * limit, now, hard_end)
        return ends

    def sample_runtimes(
        self,
        keys: Sequence[JobKey],
        limits: np.ndarray,
        samples: int,
        rng: np.random.Generator,
    ) -> np.ndarray:
        """Runtimes, shape ``(samples, len(keys))``, of jobs that have not started yet."""
        return self.sample_ends(keys, np.zeros(len(keys)), limits, 0.0, samples, rng)


def keys_of(rows: Iterable[tuple[int, str, str]]) -> list[JobKey]:
    """``JobKey`` objects from ``(nodes, queue, user)`` tuples."""
    return [JobKey(int(n), str(q), str(u)) for n, q, u in rows]
