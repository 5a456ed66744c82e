"""A plain-Python reference scheduler: the textbook algorithms, written for clarity, not speed.

It follows the same rules as :func:`parsl_malleable.sim.engine.run_schedule` (same event order,
same durations) but is written independently: FCFS and EASY rescan the whole queue at every event
and compute EASY's shadow time and extra nodes from the running jobs sorted by expected end
(Mu'alem & Feitelson's formulation); conservative keeps a Python list of profile steps and
compresses the schedule by removing and re-inserting each queued job. It tracks node counts only.
Tests compare the two on random traces; the benchmark uses it as the speed baseline.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np


@dataclass
class ReferenceResult:
    """Per-job start, end and first reservation (NaN when none) of a reference run."""

    start: np.ndarray
    end: np.ndarray
    first_res: np.ndarray


def reference_schedule(
    n_nodes: int,
    policy: str,
    submit: np.ndarray,
    run: np.ndarray,
    est: np.ndarray,
    k: np.ndarray,
) -> ReferenceResult:
    """Replay jobs (sorted by submit) under ``"fcfs"``, ``"easy"`` or ``"conservative"``."""
    if policy == "conservative":
        return _conservative(n_nodes, submit, run, est, k)
    return _fcfs_easy(n_nodes, policy == "easy", submit, run, est, k)


def _fcfs_easy(n_nodes, backfill, submit, run, est, k) -> ReferenceResult:
    n = len(submit)
    start = np.full(n, np.nan)
    end = np.full(n, np.nan)
    first_res = np.full(n, np.nan)
    ends: list[tuple[float, int]] = []  # heap of (actual end, job)
    running: list[int] = []
    queue: list[int] = []
    free = n_nodes
    nxt = 0
    while nxt < n or ends:
        now = min(ends[0][0] if ends else math.inf, submit[nxt] if nxt < n else math.inf)
        while ends and ends[0][0] <= now:
            _, j = heapq.heappop(ends)
            running.remove(j)
            free += int(k[j])
        while nxt < n and submit[nxt] <= now:
            queue.append(nxt)
            nxt += 1

        def begin(j: int, now: float = now) -> None:
            nonlocal free
            start[j] = now
            end[j] = now + min(run[j], est[j])
            heapq.heappush(ends, (end[j], j))
            running.append(j)
            free -= int(k[j])

        while queue and k[queue[0]] <= free:
            begin(queue.pop(0))
        if not queue or not backfill:
            continue
        head = queue[0]
        # shadow time: when enough running jobs (by expected end) have ended for the head
        avail = free
        shadow, extra = math.inf, 0
        by_end = sorted((start[j] + est[j], int(k[j])) for j in running)
        i = 0
        while i < len(by_end):
            t = by_end[i][0]
            while i < len(by_end) and by_end[i][0] == t:
                avail += by_end[i][1]
                i += 1
            if avail >= k[head]:
                shadow, extra = t, avail - int(k[head])
                break
        if math.isnan(first_res[head]):
            first_res[head] = shadow
        for j in list(queue[1:]):
            if k[j] <= free and (now + est[j] <= shadow or k[j] <= extra):
                queue.remove(j)
                begin(j)
                if now + est[j] > shadow:
                    extra -= int(k[j])
    return ReferenceResult(start, end, first_res)


class _Profile:
    """Free nodes as a list of ``[time, free]`` steps (the last one lasts forever)."""

    def __init__(self, now: float, free: int) -> None:
        self.steps = [[now, free]]

    def advance(self, now: float) -> None:
        while len(self.steps) > 1 and self.steps[1][0] <= now:
            self.steps.pop(0)
        self.steps[0][0] = now

    def _split(self, t: float) -> int:
        for i, (ti, _) in enumerate(self.steps):
            if ti == t:
                return i
            if ti > t:
                self.steps.insert(i, [t, self.steps[i - 1][1]])
                return i
        self.steps.append([t, self.steps[-1][1]])
        return len(self.steps) - 1

    def add(self, s: float, e: float, delta: int) -> None:
        if not e > s:
            return
        i = self._split(s)
        stop = len(self.steps) if e == math.inf else self._split(e)
        for x in range(i, stop):
            self.steps[x][1] += delta

    def earliest(self, k: int, d: float) -> float:
        for i, (s, _) in enumerate(self.steps):
            window = [f for t, f in self.steps[i:] if t < s + d]
            if min(window) >= k:
                return s
        return math.inf


def _conservative(n_nodes, submit, run, est, k) -> ReferenceResult:
    n = len(submit)
    start = np.full(n, np.nan)
    end = np.full(n, np.nan)
    first_res = np.full(n, np.nan)
    res: dict[int, float] = {}  # queued job -> reservation
    ends: list[tuple[float, int]] = []
    prof = _Profile(float(submit[0]) if n else 0.0, n_nodes)
    nxt = 0
    while nxt < n or ends or res:
        now = min(
            ends[0][0] if ends else math.inf,
            submit[nxt] if nxt < n else math.inf,
            min(res.values(), default=math.inf),
        )
        if now == math.inf:
            break
        prof.advance(now)
        early = False
        while ends and ends[0][0] <= now:
            _, j = heapq.heappop(ends)
            if now < start[j] + est[j]:
                prof.add(now, start[j] + est[j], int(k[j]))
                early = True
        if early:
            for j in sorted(res):
                old = res[j]
                prof.add(old, old + est[j], int(k[j]))
                new = prof.earliest(int(k[j]), est[j])
                prof.add(new, new + est[j], -int(k[j]))
                res[j] = new

        def begin(j: int, now: float = now) -> None:
            start[j] = now
            end[j] = now + min(run[j], est[j])
            heapq.heappush(ends, (end[j], j))

        for j in sorted(res):
            if res[j] <= now:
                del res[j]
                begin(j)
        while nxt < n and submit[nxt] <= now:
            j = nxt
            nxt += 1
            s = prof.earliest(int(k[j]), est[j])
            first_res[j] = s
            prof.add(s, s + est[j], -int(k[j]))
            if s <= now:
                begin(j)
            else:
                res[j] = s
    return ReferenceResult(start, end, first_res)
