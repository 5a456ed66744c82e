"""Numba helpers of the masked kernel: choosing allowed nodes, and free nodes per atom over time.

Nodes are taken from the free-node bitset of :mod:`~.nodes` through a filter (a class's or
an atom's bitset), lowest ids first, a whole word at once where all of it passes.

The *atom profile* is the availability profile of :mod:`~.availability` with one free count
per atom: ``pt[0:m]`` strictly increasing times, ``pfa[a, i]`` the free nodes of atom ``a`` on
``[pt[i], pt[i+1])`` (one row per atom, so that a job of one atom scans one contiguous row).
Conservative backfill books a job as a count per atom (its *split*), so any free nodes of those
atoms will do when it starts, as counts of identical nodes do in the plain kernel. With one
atom every function here gives the plain profile's answer.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.cpython.unsafe.numbers import trailing_zeros

ONE = np.uint64(1)
ALL = np.uint64(0xFFFFFFFFFFFFFFFF)
M1 = np.uint64(0x5555555555555555)
M2 = np.uint64(0x3333333333333333)
M4 = np.uint64(0x0F0F0F0F0F0F0F0F)
H01 = np.uint64(0x0101010101010101)
INF = np.inf
BIG = 1 << 62  # more nodes than any atom holds

# filters of pick_lowest: no filter, only nodes of `mask`, only nodes outside `mask`
ALL_NODES, IN_MASK, OUT_OF_MASK = 0, 1, 2


@njit(cache=True)
def _passing(bits: np.ndarray, w: int, allow: np.ndarray, use_allow: bool, mask: np.ndarray,
             mode: int) -> np.uint64:  # fmt: skip
    """Word ``w`` of the free nodes that pass the filters."""
    x = bits[w]
    if use_allow:
        x &= allow[w]
    if mode == IN_MASK:
        x &= mask[w]
    elif mode == OUT_OF_MASK:
        x &= ~mask[w]
    return x


@njit(cache=True)
def take_lowest(
    bits: np.ndarray,
    lo: int,
    allow: np.ndarray,
    use_allow: bool,
    mask: np.ndarray,
    mode: int,
    k: int,
    out: np.ndarray,
    c: int,
) -> int:
    """Take (mark busy) the ``k`` lowest free ids that pass the filters, writing them ascending
    to ``out[c:]``; return the new end of ``out``, short when fewer pass.

    ``allow`` (when ``use_allow``) keeps only its nodes, ``mask`` with ``mode`` (``IN_MASK``,
    ``OUT_OF_MASK``) only those in or out of it; ``lo`` is a word below which no node is free.
    """
    stop = c + k
    for w in range(lo, bits.shape[0]):
        if c >= stop:
            break
        x = _passing(bits, w, allow, use_allow, mask, mode)
        if x == ALL and stop - c >= 64:  # a whole word passes: no bit twiddling
            base = w * 64
            for b in range(64):
                out[c + b] = base + b
            c += 64
            bits[w] = np.uint64(0)
            continue
        taken = np.uint64(0)
        while x != 0 and c < stop:
            # numba passes the typing context itself; mypy reads the intrinsic's raw signature
            low = np.int64(trailing_zeros(x))  # type: ignore[call-arg]
            out[c] = w * 64 + low
            c += 1
            taken |= ONE << np.uint64(low)
            x &= x - ONE
        bits[w] &= ~taken
    return c


@njit(cache=True)
def count_lowest_in(
    bits: np.ndarray, lo: int, allow: np.ndarray, use_allow: bool, inside: np.ndarray, k: int
) -> int:
    """Of the ``k`` lowest free ids that ``allow`` keeps (all when not ``use_allow``), how many
    ``inside`` holds. ``bits`` is not changed."""
    rest = k
    found = 0
    for w in range(lo, bits.shape[0]):
        if rest == 0:
            break
        x = _passing(bits, w, allow, use_allow, inside, ALL_NODES)
        n = popcount(x)
        if n <= rest:
            found += popcount(x & inside[w])
            rest -= n
            continue
        while rest > 0:  # the last word: only its lowest `rest` passing nodes count
            low = x & (~x + ONE)
            if low & inside[w]:
                found += 1
            x &= x - ONE
            rest -= 1
    return found


@njit(cache=True)
def popcount(x: np.uint64) -> int:
    """Set bits of a 64-bit word."""
    x = x - ((x >> np.uint64(1)) & M1)
    x = (x & M2) + ((x >> np.uint64(2)) & M2)
    x = (x + (x >> np.uint64(4))) & M4
    return int((x * H01) >> np.uint64(56))


@njit(cache=True)
def atoms_add_run(
    afree: np.ndarray, node_atom: np.ndarray, seg_end: np.ndarray, f: int, c: int, sign: int
) -> None:
    """Add ``sign`` free nodes per node of ``f .. f+c-1`` to their atoms' counts, one step per
    stretch of one atom (``seg_end[i]``: the first node after ``i`` in another atom)."""
    i = f
    stop = f + c
    while i < stop:
        e = min(seg_end[i], stop)
        afree[node_atom[i]] += sign * (e - i)
        i = e


@njit(cache=True)
def atoms_free(afree: np.ndarray, atoms: np.ndarray) -> int:
    """Free nodes in the atoms ``atoms``."""
    total = 0
    for a in atoms:
        total += afree[a]
    return total


@njit(cache=True)
def atoms_free_in(afree: np.ndarray, atoms: np.ndarray, inside: np.ndarray) -> int:
    """Free nodes in the atoms ``atoms`` that ``inside`` marks."""
    total = 0
    for a in atoms:
        if inside[a]:
            total += afree[a]
    return total


@njit(cache=True)
def ap_split(pt: np.ndarray, pfa: np.ndarray, m: int, t: float) -> tuple[int, int]:
    """Make ``t`` a breakpoint; return (its index, new length). ``t`` must be >= ``pt[0]``."""
    i = int(np.searchsorted(pt[:m], t, side="right")) - 1
    if pt[i] == t:
        return i, m
    for x in range(m, i + 1, -1):
        pt[x] = pt[x - 1]
    pt[i + 1] = t
    for a in range(pfa.shape[0]):
        row = pfa[a]
        for x in range(m, i, -1):  # shifts the row and copies step i into the new step i+1
            row[x] = row[x - 1]
    return i + 1, m + 1


@njit(cache=True)
def ap_add(
    pt: np.ndarray, pfa: np.ndarray, m: int, s: float, e: float, counts: np.ndarray, sign: int
) -> int:
    """Add ``sign * counts`` (per atom) free nodes on ``[s, e)``; return the new length."""
    if not e > s:
        return m
    i, m = ap_split(pt, pfa, m, s)
    if e == INF:
        stop = m
    else:
        stop, m = ap_split(pt, pfa, m, e)
    for a in range(pfa.shape[0]):
        delta = sign * counts[a]
        if delta != 0:
            row = pfa[a]
            for x in range(i, stop):
                row[x] += delta
    return m


@njit(cache=True)
def ap_advance(pt: np.ndarray, pfa: np.ndarray, m: int, now: float) -> int:
    """Drop the past: make ``now`` the first breakpoint; return the new length."""
    i = int(np.searchsorted(pt[:m], now, side="right")) - 1
    if i > 0:
        for x in range(i, m):
            pt[x - i] = pt[x]
        for a in range(pfa.shape[0]):
            row = pfa[a]
            for x in range(i, m):
                row[x - i] = row[x]
        m -= i
    pt[0] = now
    return m


@njit(cache=True)
def ap_coalesce(pt: np.ndarray, pfa: np.ndarray, m: int) -> int:
    """Merge neighbouring steps with the same free counts; return the new length."""
    if m == 0:
        return 0
    w = 1
    for x in range(1, m):
        same = True
        for a in range(pfa.shape[0]):
            if pfa[a, x] != pfa[a, w - 1]:
                same = False
                break
        if not same:
            pt[w] = pt[x]
            for a in range(pfa.shape[0]):
                pfa[a, w] = pfa[a, x]
            w += 1
    return w


@njit(cache=True)
def ap_earliest(
    pt: np.ndarray,
    pfa: np.ndarray,
    m: int,
    atoms: np.ndarray,
    k: int,
    d: float,
    own_s: float,
    own: np.ndarray,
    limit: float,
    split: np.ndarray,
    low: np.ndarray,
) -> float:
    """Earliest breakpoint ``s < limit`` at which the atoms ``atoms`` hold ``k`` nodes free on
    all of ``[s, s + d)`` (``limit`` when none), and the split there in ``split``.

    A job keeps its nodes for its whole run, so it can start at ``s`` when the least free count
    of each atom over the run adds up to ``k``; the split takes atoms in order (low ids first),
    each up to that least count. A job that already holds ``own`` (per atom) on
    ``[own_s, own_s + d)`` counts it as free (pass ``own_s = inf`` for a new job). ``low`` is
    scratch of one entry per atom.
    """
    own_e = own_s + d
    n_at = atoms.shape[0]
    first = pfa[atoms[0]]
    own_first = own[atoms[0]]
    own_all = 0
    for x in range(n_at):
        own_all += own[atoms[x]]
    i = 0
    while i < m and pt[i] < limit:
        e = pt[i] + d
        # a step whose free total is short of k rules out every start whose run covers it:
        # skip past it (the plain profile's shortcut); with one atom the totals are the counts
        j = i
        failed_at = -1
        while j < m and pt[j] < e:
            if n_at == 1:
                total = first[j]
                if own_s <= pt[j] < own_e:
                    total += own_first
            else:
                total = 0
                for x in range(n_at):
                    total += pfa[atoms[x], j]
                if own_s <= pt[j] < own_e:
                    total += own_all
            if total < k:
                failed_at = j
                break
            j += 1
        if failed_at >= 0:
            i = failed_at + 1
            continue
        if _fill_split(pt, pfa, i, j, atoms, k, own_s, own_e, own, split, low):
            return pt[i]
        i += 1
    return limit


@njit(cache=True)
def _fill_split(pt, pfa, i, j, atoms, k, own_s, own_e, own, split, low) -> bool:
    """Whether the least free count of each atom over steps ``i .. j-1`` adds up to ``k``;
    if so, write the split (atoms in order, each up to its least count) to ``split``."""
    total = 0
    for x in range(atoms.shape[0]):
        a = atoms[x]
        least = BIG
        for y in range(i, j):
            v = pfa[a, y] + (own[a] if own_s <= pt[y] < own_e else 0)
            if v < least:
                least = v
        low[a] = max(least, 0)
        total += low[a]
    if total < k:
        return False
    split[:] = 0
    rest = k
    for x in range(atoms.shape[0]):
        a = atoms[x]
        take = min(rest, low[a])
        split[a] = take
        rest -= take
    return True
