"""Availability profile: the free-node count of a machine as a step function of time.

This is the planner core shared by the trace simulator (:mod:`parsl_malleable.sim.engine`) and
the live-queue planner (:func:`parsl_malleable.sim.queue_forecast.plan_queue`).

A profile is two arrays and a length ``m``: ``pt[0:m]`` (strictly increasing times, ``pt[0]`` is
"now") and ``pf[0:m]`` (free nodes on ``[pt[i], pt[i+1])``; the last step lasts forever).
The numba functions below work in place on preallocated arrays and return the new length, so the
event loop never allocates; :class:`AvailabilityProfile` wraps the same functions for Python
callers. Every operation costs O(m) at most (a scan or a shift of the arrays).
"""

from __future__ import annotations

import numpy as np
from numba import njit

INF = np.inf


@njit(cache=True)
def prof_find(pt: np.ndarray, m: int, t: float) -> int:
    """Index of the step that contains time ``t`` (the last ``i`` with ``pt[i] <= t``)."""
    return int(np.searchsorted(pt[:m], t, side="right")) - 1


@njit(cache=True)
def prof_split(pt: np.ndarray, pf: np.ndarray, m: int, t: float) -> tuple[int, int]:
    """Make ``t`` a breakpoint; return (its index, new length). ``t`` must be >= ``pt[0]``."""
    i = prof_find(pt, m, t)
    if pt[i] == t:
        return i, m
    for x in range(m, i + 1, -1):  # shift right; arrays overlap, so walk backwards
        pt[x] = pt[x - 1]
        pf[x] = pf[x - 1]
    pt[i + 1] = t
    pf[i + 1] = pf[i]
    return i + 1, m + 1


@njit(cache=True)
def prof_add(pt: np.ndarray, pf: np.ndarray, m: int, s: float, e: float, delta: int) -> int:
    """Add ``delta`` free nodes on ``[s, e)`` (``delta < 0`` reserves); return the new length."""
    if not e > s:
        return m
    i, m = prof_split(pt, pf, m, s)
    if e == INF:
        stop = m
    else:
        stop, m = prof_split(pt, pf, m, e)
    for x in range(i, stop):
        pf[x] += delta
    return m


@njit(cache=True)
def prof_earliest(pt: np.ndarray, pf: np.ndarray, m: int, k: int, d: float) -> float:
    """Earliest breakpoint ``s`` with at least ``k`` free nodes on all of ``[s, s + d)``.

    Returns ``inf`` when no such time exists (``k`` exceeds what is ever free).
    """
    i = 0
    while i < m:
        if pf[i] < k:
            i += 1
            continue
        s = pt[i]
        e = s + d
        j = i + 1
        ok = True
        while j < m and pt[j] < e:
            if pf[j] < k:
                ok = False
                break
            j += 1
        if ok:
            return s
        i = j + 1
    return INF


@njit(cache=True)
def prof_earliest_moving(
    pt: np.ndarray,
    pf: np.ndarray,
    m: int,
    k: int,
    d: float,
    own_s: float,
    limit: float,
) -> float:
    """Like :func:`prof_earliest` for a job that already holds ``[own_s, own_s + d)`` in the
    profile, searching only starts before ``limit``; returns ``limit`` when none is earlier.

    The job's own reservation is counted as free, so the search needs no remove/re-insert.
    """
    own_e = own_s + d
    i = 0
    while i < m and pt[i] < limit:
        v = pf[i] + (k if own_s <= pt[i] < own_e else 0)
        if v < k:
            i += 1
            continue
        s = pt[i]
        e = s + d
        j = i + 1
        ok = True
        while j < m and pt[j] < e:
            if pf[j] + (k if own_s <= pt[j] < own_e else 0) < k:
                ok = False
                break
            j += 1
        if ok:
            return s
        i = j + 1
    return limit


@njit(cache=True)
def prof_fits_now(pt: np.ndarray, pf: np.ndarray, m: int, k: int, d: float) -> bool:
    """True when ``k`` nodes are free on all of ``[pt[0], pt[0] + d)``."""
    e = pt[0] + d
    j = 0
    while j < m and pt[j] < e:
        if pf[j] < k:
            return False
        j += 1
    return True


@njit(cache=True)
def prof_fit_length(pt: np.ndarray, pf: np.ndarray, m: int, k: int) -> float:
    """How long from ``pt[0]`` ``k`` nodes stay free (``inf``: for good)."""
    for j in range(m):
        if pf[j] < k:
            return pt[j] - pt[0]
    return np.inf


@njit(cache=True)
def prof_advance(pt: np.ndarray, pf: np.ndarray, m: int, now: float) -> int:
    """Drop the past: make ``now`` the first breakpoint; return the new length."""
    i = prof_find(pt, m, now)
    if i > 0:
        for x in range(i, m):
            pt[x - i] = pt[x]
            pf[x - i] = pf[x]
        m -= i
    pt[0] = now
    return m


@njit(cache=True)
def prof_coalesce(pt: np.ndarray, pf: np.ndarray, m: int) -> int:
    """Merge neighbouring steps with the same free count; return the new length."""
    if m == 0:
        return 0
    w = 1
    for x in range(1, m):
        if pf[x] != pf[w - 1]:
            pt[w] = pt[x]
            pf[w] = pf[x]
            w += 1
    return w


@njit(cache=True)
def prof_build(
    pt: np.ndarray,
    pf: np.ndarray,
    now: float,
    free_now: int,
    ends: np.ndarray,
    counts: np.ndarray,
    n: int,
) -> int:
    """Fill a profile from ``free_now`` and running jobs sorted by expected end.

    ``ends[0:n]`` (ascending) are expected end times and ``counts[0:n]`` the nodes each frees;
    ends at or before ``now`` count as free now, infinite ends never free their nodes.
    """
    pt[0] = now
    pf[0] = free_now
    m = 1
    c = free_now
    for x in range(n):
        t = ends[x]
        if t == INF:
            break
        c += counts[x]
        if t <= pt[m - 1]:
            pf[m - 1] = c
        else:
            pt[m] = t
            pf[m] = c
            m += 1
    return m


class AvailabilityProfile:
    """Free nodes over time, for planning from Python (the simulator uses the functions directly).

    >>> p = AvailabilityProfile(now=0.0, free_now=2, running_ends=[(100.0, 2)])
    >>> p.earliest_start(4, 50.0)
    100.0
    >>> p.reserve(100.0, 150.0, 4)
    >>> p.free_at(120.0)
    0
    """

    def __init__(
        self,
        now: float,
        free_now: int,
        running_ends: list[tuple[float, int]] | None = None,
        capacity: int = 64,
    ) -> None:
        running = sorted(running_ends or [])
        cap = max(capacity, 2 * len(running) + 8)
        self._pt = np.empty(cap, dtype=np.float64)
        self._pf = np.empty(cap, dtype=np.int64)
        ends = np.array([float(t) for t, _ in running], dtype=np.float64)
        counts = np.array([int(c) for _, c in running], dtype=np.int64)
        self._m = int(
            prof_build(self._pt, self._pf, float(now), int(free_now), ends, counts, len(running))
        )

    def _room(self, extra: int) -> None:
        if self._m + extra > len(self._pt):
            size = 2 * (self._m + extra)
            self._pt = np.resize(self._pt, size)
            self._pf = np.resize(self._pf, size)

    @property
    def now(self) -> float:
        """The profile's first breakpoint."""
        return float(self._pt[0])

    def steps(self) -> list[tuple[float, int]]:
        """The step function as ``(time, free nodes from that time on)`` pairs."""
        return [
            (float(t), int(f))
            for t, f in zip(self._pt[: self._m], self._pf[: self._m], strict=True)
        ]

    def free_at(self, t: float) -> int:
        """Free nodes at time ``t`` (``t >= now``)."""
        return int(self._pf[max(prof_find(self._pt, self._m, float(t)), 0)])

    def earliest_start(self, nodes: int, duration: float) -> float:
        """Earliest time at which ``nodes`` stay free for ``duration`` seconds (inf: never)."""
        return float(prof_earliest(self._pt, self._pf, self._m, int(nodes), float(duration)))

    def fits_now(self, nodes: int, duration: float) -> bool:
        """Whether ``nodes`` can start now and run ``duration`` without breaking the plan."""
        return bool(prof_fits_now(self._pt, self._pf, self._m, int(nodes), float(duration)))

    def reserve(self, start: float, end: float, nodes: int) -> None:
        """Take ``nodes`` on ``[start, end)``; ``end`` may be ``inf``."""
        if start < self.now:
            raise ValueError(f"reservation starts at {start}, before the profile's now {self.now}")
        self._room(2)
        self._m = int(prof_add(self._pt, self._pf, self._m, float(start), float(end), -int(nodes)))

    def release(self, start: float, end: float, nodes: int) -> None:
        """Give back ``nodes`` on ``[start, end)`` (the inverse of :meth:`reserve`)."""
        self._room(2)
        self._m = int(prof_add(self._pt, self._pf, self._m, float(start), float(end), int(nodes)))
