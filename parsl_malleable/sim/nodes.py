"""Concrete node ids for the simulator: a bitset of free nodes, lowest free ids first.

Taking the lowest free ids keeps busy nodes packed at the low end and leaves the idle holes on
contiguous high ids, so a job's nodes are usually one or a few runs ``(first id, count)``; the
simulator stores runs rather than one id per node to keep memory linear in jobs.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.cpython.unsafe.numbers import trailing_zeros

ONE = np.uint64(1)
ALL = np.uint64(0xFFFFFFFFFFFFFFFF)


@njit(cache=True)
def bits_all_free(n_nodes: int) -> np.ndarray:
    """A bitset (one uint64 word per 64 nodes) with nodes ``0 .. n_nodes-1`` free."""
    words = (n_nodes + 63) // 64
    bits = np.zeros(words, dtype=np.uint64)
    for w in range(n_nodes // 64):
        bits[w] = ALL
    rest = n_nodes % 64
    if rest:
        bits[words - 1] = (ONE << np.uint64(rest)) - ONE
    return bits


@njit(cache=True)
def bits_take(bits: np.ndarray, lo: int, k: int, out: np.ndarray) -> int:
    """Clear the ``k`` lowest set bits, writing their ids ascending to ``out[0:k]``.

    ``lo`` is a word index below which every word is known to be empty; returns the new one.
    The caller guarantees that ``k`` nodes are free.
    """
    c = 0
    w = lo
    while c < k:
        x = bits[w]
        if x == ALL and k - c >= 64:  # a whole free word: no bit twiddling
            base = w * 64
            for b in range(64):
                out[c + b] = base + b
            c += 64
            bits[w] = np.uint64(0)
            w += 1
            continue
        while x != 0 and c < k:
            # numba passes the typing context itself; mypy reads the intrinsic's raw signature
            low = np.int64(trailing_zeros(x))  # type: ignore[call-arg]
            out[c] = w * 64 + low
            c += 1
            x &= x - ONE
        bits[w] = x
        if x == 0:
            w += 1
    while w < bits.shape[0] and bits[w] == 0:
        w += 1
    return w


@njit(cache=True)
def bits_clear_ids(bits: np.ndarray, ids: np.ndarray) -> None:
    """Mark the nodes in ``ids`` busy."""
    for i in ids:
        bits[i >> 6] &= ~(ONE << np.uint64(i & 63))


@njit(cache=True)
def bits_give(bits: np.ndarray, first: int, count: int) -> None:
    """Mark nodes ``first .. first+count-1`` free (whole words at once where possible)."""
    i = first
    stop = first + count
    while i < stop:
        if (i & 63) == 0 and stop - i >= 64:
            bits[i >> 6] = ALL
            i += 64
        else:
            bits[i >> 6] |= ONE << np.uint64(i & 63)
            i += 1
