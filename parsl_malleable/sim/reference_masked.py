"""A brute-force scheduler that honours each job's allowed nodes: the masked kernel's reference.

Written for clarity, independently of :mod:`parsl_malleable.sim.masked_engine`: it keeps every
node's holder explicitly, rescans the whole queue at every event, computes EASY's shadow time
and spare nodes of the head's set from the running jobs (Mu'alem & Feitelson's formulation,
counted over the head's allowed nodes), and books conservative reservations in a Python list of
per-atom counts, searched at every step without shortcuts. The rules are those the kernel's
module docstring states; the tests compare the two schedules node by node.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class MaskedResult:
    """Per job: start (NaN: never) and the node ids it ran on."""

    start: list[float]
    nodes: list[list[int]]


def reference_masked(
    n_nodes: int,
    policy: str,
    t_begin: float,
    submit: Sequence[float],
    run: Sequence[float],
    est: Sequence[float],
    k: Sequence[int],
    pre_nodes: Sequence[Sequence[int]],
    allowed: Sequence[Sequence[int] | None],
) -> MaskedResult:
    """Jobs ``0 .. len(pre_nodes)-1`` run at ``t_begin`` on ``pre_nodes``; the others arrive at
    ``submit`` (ascending) and may use the nodes ``allowed[j]`` (None: any)."""
    sim = _Sim(n_nodes, t_begin, submit, run, est, k, pre_nodes, allowed)
    if policy == "conservative":
        sim.conservative()
    else:
        sim.fcfs_easy(policy == "easy")
    return MaskedResult(sim.start, sim.nodes)


class _Sim:
    def __init__(
        self,
        n_nodes: int,
        t_begin: float,
        submit: Sequence[float],
        run: Sequence[float],
        est: Sequence[float],
        k: Sequence[int],
        pre_nodes: Sequence[Sequence[int]],
        allowed: Sequence[Sequence[int] | None],
    ) -> None:
        self.n_nodes = n_nodes
        self.submit, self.run, self.est, self.k = submit, run, est, k
        n = len(submit)
        everything = set(range(n_nodes))
        self.allow = [everything if a is None else set(a) for a in allowed]
        self.start = [math.nan] * n
        self.nodes: list[list[int]] = [[] for _ in range(n)]
        self.holder: list[int | None] = [None] * n_nodes
        self.ends: list[tuple[float, int]] = []
        self.n_pre = len(pre_nodes)
        self.t_begin = t_begin
        for p, ids in enumerate(pre_nodes):
            self.begin(p, t_begin, sorted(ids))

    def begin(self, j: int, now: float, ids: list[int]) -> None:
        assert len(ids) == self.k[j] and set(ids) <= self.allow[j]
        assert all(self.holder[i] is None for i in ids), "node taken twice"
        self.start[j] = now
        self.nodes[j] = sorted(ids)
        for i in ids:
            self.holder[i] = j
        heapq.heappush(self.ends, (now + min(self.run[j], self.est[j]), j))

    def free_of(self, j: int) -> list[int]:
        return sorted(i for i in self.allow[j] if self.holder[i] is None)

    def finish(self, now: float) -> list[int]:
        done = []
        while self.ends and self.ends[0][0] <= now:
            _, j = heapq.heappop(self.ends)
            for i in self.nodes[j]:
                self.holder[i] = None
            done.append(j)
        return done

    # FCFS / EASY -------------------------------------------------------------------------
    def fcfs_easy(self, backfill: bool) -> None:
        queue: list[int] = []
        nxt = self.n_pre
        n = len(self.submit)
        while nxt < n or self.ends:
            now = min(
                self.ends[0][0] if self.ends else math.inf,
                self.submit[nxt] if nxt < n else math.inf,
            )
            self.finish(now)
            while nxt < n and self.submit[nxt] <= now:
                queue.append(nxt)
                nxt += 1
            head = None
            shadow, extra, head_set = math.inf, 0, set()
            for j in list(queue):
                free = self.free_of(j)
                if head is None:
                    if len(free) >= self.k[j]:
                        queue.remove(j)
                        self.begin(j, now, free[: self.k[j]])
                        continue
                    head = j
                    if not backfill:
                        break
                    head_set = self.allow[j]
                    shadow, extra = self.shadow(j, now)
                    continue
                if len(free) < self.k[j]:
                    continue
                low = free[: self.k[j]]
                if now + self.est[j] <= shadow:
                    queue.remove(j)
                    self.begin(j, now, low)
                    continue
                a_low = sum(i in head_set for i in low)
                if a_low <= extra:
                    queue.remove(j)
                    self.begin(j, now, low)
                    extra -= a_low
                    continue
                outside = [i for i in free if i not in head_set]
                inside = [i for i in free if i in head_set]
                a_min = max(0, self.k[j] - len(outside))
                if a_min <= extra:
                    queue.remove(j)
                    self.begin(j, now, outside[: self.k[j]] + inside[:a_min])
                    extra -= a_min

    def shadow(self, head: int, now: float) -> tuple[float, int]:
        """When the head's allowed nodes first hold enough free ones, with every running job
        ending at its limit; and how many of them are spare then."""
        head_set = self.allow[head]
        avail = sum(1 for i in head_set if self.holder[i] is None)
        running = sorted({j for j in self.holder if j is not None})
        by_end = sorted(
            (self.start[j] + self.est[j], sum(i in head_set for i in self.nodes[j]))
            for j in running
        )
        x = 0
        while x < len(by_end):
            t = by_end[x][0]
            if t == math.inf:
                break
            while x < len(by_end) and by_end[x][0] == t:
                avail += by_end[x][1]
                x += 1
            if avail >= self.k[head]:
                return t, avail - self.k[head]
        return math.inf, 0

    # conservative ------------------------------------------------------------------------
    def conservative(self) -> None:
        atoms = self.atoms()
        n_atoms = len(atoms)
        job_atoms = [[a for a, ids in enumerate(atoms) if ids <= allow] for allow in self.allow]
        prof = _AtomProfile(self.t_begin, [len(a) for a in atoms])
        node_atom = {i: a for a, ids in enumerate(atoms) for i in ids}
        split: dict[int, list[int]] = {}
        for p in range(self.n_pre):
            split[p] = [0] * n_atoms
            for i in self.nodes[p]:
                split[p][node_atom[i]] += 1
            prof.add(self.start[p], self.start[p] + self.est[p], split[p], -1)
        res: dict[int, float] = {}  # queued job -> reservation, in priority order
        nxt = self.n_pre
        n = len(self.submit)
        while True:
            now = min(
                self.ends[0][0] if self.ends else math.inf,
                self.submit[nxt] if nxt < n else math.inf,
                min(res.values(), default=math.inf),
            )
            if now == math.inf:
                break
            prof.advance(now)
            early = False
            for j in self.finish(now):
                if now < self.start[j] + self.est[j]:
                    prof.add(now, self.start[j] + self.est[j], split[j], 1)
                    early = True
            if early:
                for j in list(res):
                    old = res[j]
                    s, new = prof.earliest(job_atoms[j], self.k[j], self.est[j], old, split[j], old)
                    if s < old:
                        if old != math.inf:
                            prof.add(old, old + self.est[j], split[j], 1)
                        split[j] = new
                        prof.add(s, s + self.est[j], new, -1)
                        res[j] = s
            for j in list(res):
                if res[j] <= now:
                    del res[j]
                    self.begin(j, now, self.take(atoms, split[j]))
            while nxt < n and self.submit[nxt] <= now:
                j = nxt
                nxt += 1
                zero = [0] * n_atoms
                s, new = prof.earliest(
                    job_atoms[j], self.k[j], self.est[j], math.inf, zero, math.inf
                )
                split[j] = new if new is not None else zero
                if s == math.inf:
                    res[j] = s
                    continue
                prof.add(s, s + self.est[j], split[j], -1)
                if s <= now:
                    self.begin(j, now, self.take(atoms, split[j]))
                else:
                    res[j] = s

    def atoms(self) -> list[set[int]]:
        """Nodes grouped by the allowed sets they belong to, in order of their lowest id."""
        sets = [s for s in self.allow if len(s) < self.n_nodes]
        groups: dict[tuple[bool, ...], set[int]] = {}
        for i in range(self.n_nodes):
            groups.setdefault(tuple(i in s for s in sets), set()).add(i)
        return sorted(groups.values(), key=min)

    def take(self, atoms: list[set[int]], split: list[int]) -> list[int]:
        ids: list[int] = []
        for a, count in enumerate(split):
            ids += sorted(i for i in atoms[a] if self.holder[i] is None)[:count]
        return ids


class _AtomProfile:
    """Free nodes per atom as a list of ``[time, [count per atom]]`` steps."""

    def __init__(self, now: float, sizes: list[int]) -> None:
        self.steps: list[list] = [[now, list(sizes)]]

    def advance(self, now: float) -> None:
        while len(self.steps) > 1 and self.steps[1][0] <= now:
            self.steps.pop(0)
        self.steps[0][0] = now

    def _split(self, t: float) -> int:
        for i, (ti, _) in enumerate(self.steps):
            if ti == t:
                return i
            if ti > t:
                self.steps.insert(i, [t, list(self.steps[i - 1][1])])
                return i
        self.steps.append([t, list(self.steps[-1][1])])
        return len(self.steps) - 1

    def add(self, s: float, e: float, counts: list[int], sign: int) -> None:
        if not e > s:
            return
        i = self._split(s)
        stop = len(self.steps) if e == math.inf else self._split(e)
        for x in range(i, stop):
            self.steps[x][1] = [f + sign * c for f, c in zip(self.steps[x][1], counts, strict=True)]

    def earliest(self, atoms, k, d, own_s, own, limit):
        """Earliest step start before ``limit`` where the least free count of each atom over
        ``[s, s + d)`` (``own`` counted free on ``[own_s, own_s + d)``) adds up to ``k``."""
        for s, _ in self.steps:
            if s >= limit:
                break
            least = {a: math.inf for a in atoms}
            for t, counts in self.steps:
                if t < s or t >= s + d:
                    continue
                mine = own_s <= t < own_s + d
                for a in atoms:
                    least[a] = min(least[a], counts[a] + (own[a] if mine else 0))
            if sum(max(v, 0) for v in least.values()) >= k:
                split = [0] * len(own)
                rest = k
                for a in atoms:
                    split[a] = min(rest, max(least[a], 0))
                    rest -= split[a]
                return s, split
        return limit, None
