"""The event loop of :mod:`~.engine` for jobs that may run only on some nodes.

``run_schedule_masked`` takes the arguments of :func:`~.engine.run_schedule` plus an
:class:`~.eligibility.Eligibility` (as arrays) and returns the same tuple. The window planner
calls it only when a queued job has an allowed node set (a PBS queue's vnodes, a Slurm
partition), so snapshots without one keep the plain kernel and its speed. With every job free to
use any node it gives exactly the plain kernel's schedule (tested), and so does it when every
job's set is the whole machine.

What changes with node sets (the rules, for users in ``docs/windows.md``):

* A job starts only when its allowed nodes hold enough free ones, and takes the lowest free ids
  among them; a job whose allowed free nodes are too few waits even when other nodes are free.
* FCFS/EASY: the head (the first job that cannot start) is reserved at the earliest time its
  *allowed* nodes hold enough free ones with every running job ending at its limit, and the
  profile that guards that reservation counts only the head's allowed nodes. A later job may
  start now when the head's nodes it would hold (at any moment of its run) still leave the head
  its reservation. When its lowest ids would not, it takes its allowed free nodes outside the
  head's set first (a scheduler keeps clear of a reservation when it can), and starts if that
  fits. For a head free to use any node all of this is the plain EASY rule.
* Conservative: a reservation is a count per *atom* (nodes that belong to the same classes),
  found as the earliest time at which the least free count of each allowed atom over the run
  adds up to the job's size, split over the atoms in order (low ids first); the job takes the
  lowest free ids of each atom when it starts. Counts per atom keep every reservation feasible,
  as counts of identical nodes do in the plain kernel; compression moves a job only earlier.
"""

from __future__ import annotations

import time

import numpy as np
from numba import njit

from parsl_malleable.sim.atoms import (
    ALL_NODES,
    IN_MASK,
    OUT_OF_MASK,
    ap_add,
    ap_advance,
    ap_coalesce,
    ap_earliest,
    atoms_add_run,
    atoms_free,
    atoms_free_in,
    count_lowest_in,
    take_lowest,
)
from parsl_malleable.sim.availability import (
    prof_add,
    prof_advance,
    prof_earliest,
    prof_fit_length,
    prof_fits_now,
)
from parsl_malleable.sim.eligibility import eligibility
from parsl_malleable.sim.engine import (
    C_ARRIVAL_SCANS,
    C_COMPRESSIONS,
    C_FULL_SCANS,
    C_PROFILE_BUILDS,
    C_QUEUE_MAX,
    CONSERVATIVE,
    FCFS,
    N_COUNTERS,
    _grow_f8,
    _grow_i4,
    _pop,
    _push,
    _rs_insert,
    _rs_remove,
)
from parsl_malleable.sim.nodes import bits_all_free, bits_clear_ids, bits_give


@njit(cache=True)
def run_schedule_masked(
    n_nodes: int,
    policy: int,
    submit: np.ndarray,
    run: np.ndarray,
    est: np.ndarray,
    k: np.ndarray,
    n_pre: int,
    pre_ptr: np.ndarray,
    pre_ids: np.ndarray,
    t_begin: float,
    est_min: np.ndarray,
    job_class: np.ndarray,
    class_mask: np.ndarray,
    class_ptr: np.ndarray,
    class_atoms: np.ndarray,
    node_atom: np.ndarray,
    atom_mask: np.ndarray,
):
    """:func:`~.engine.run_schedule` where job ``j`` may use only the nodes of its class
    ``job_class[j]`` (``-1``: any node; the other arrays as :class:`~.eligibility.Eligibility`
    holds them). Same returns. A job larger than its class never starts (blocks nobody)."""
    n = submit.shape[0]
    n_atoms = atom_mask.shape[0]
    start = np.full(n, np.nan)
    end = np.full(n, np.nan)
    first_res = np.full(n, np.nan)
    res = np.full(n, np.inf)
    backfilled = np.zeros(n, dtype=np.bool_)
    run_off = np.zeros(n, dtype=np.int64)
    run_cnt = np.zeros(n, dtype=np.int64)
    counters = np.zeros(N_COUNTERS, dtype=np.int64)

    bits = bits_all_free(n_nodes)
    lo = 0
    free = n_nodes
    last_free = np.full(n_nodes, t_begin)
    scratch = np.empty(n_nodes, dtype=np.int64)
    all_atoms = np.arange(n_atoms)
    afree = np.zeros(n_atoms, dtype=np.int64)  # free nodes per atom
    seg_end = np.empty(n_nodes, dtype=np.int64)  # first node after i in another atom
    for i in range(n_nodes - 1, -1, -1):
        last = i == n_nodes - 1 or node_atom[i + 1] != node_atom[i]
        seg_end[i] = i + 1 if last else seg_end[i + 1]
        afree[node_atom[i]] += 1
    no_mask = np.zeros(bits.shape[0], dtype=np.uint64)
    # one row at least, so that class_mask[max(c, 0)] is valid when no job is restricted
    cmask = np.zeros((max(class_mask.shape[0], 1), bits.shape[0]), dtype=np.uint64)
    cmask[: class_mask.shape[0], :] = class_mask

    run_first = np.empty(2 * n + 16, dtype=np.int32)
    run_len = np.empty(2 * n + 16, dtype=np.int32)
    nr = 0
    idle_node = np.empty(2 * n + n_nodes + 16, dtype=np.int32)
    idle_cnt = np.empty(2 * n + n_nodes + 16, dtype=np.int32)
    idle_s = np.empty(2 * n + n_nodes + 16, dtype=np.float64)
    idle_e = np.empty(2 * n + n_nodes + 16, dtype=np.float64)
    ni = 0

    h_t = np.empty(n + 1, dtype=np.float64)
    h_j = np.empty(n + 1, dtype=np.int64)
    hn = 0
    rs_t = np.empty(n + 1, dtype=np.float64)
    rs_k = np.empty(n + 1, dtype=np.int64)
    rs_j = np.empty(n + 1, dtype=np.int64)
    rn = 0
    queue = np.empty(n + 1, dtype=np.int64)
    qn = 0
    qh = 0
    ntomb = 0

    cap = n_nodes + 2 * n + 8
    pt = np.empty(cap, dtype=np.float64)
    pf = np.empty(cap, dtype=np.int64)  # FCFS/EASY: free nodes of the head's set
    m = 0
    # conservative: free nodes per atom over time, and each job's nodes per atom
    cons = policy == CONSERVATIVE
    pfa = np.empty((n_atoms, cap if cons else 0), dtype=np.int64)
    split = np.zeros((n if cons else 0, n_atoms), dtype=np.int64)
    new_split = np.zeros(n_atoms, dtype=np.int64)
    low = np.empty(n_atoms, dtype=np.int64)
    if cons:
        pt[0] = t_begin
        pfa[:, 0] = afree
        m = 1

    for p in range(n_pre):
        ids = np.sort(pre_ids[pre_ptr[p] : pre_ptr[p + 1]])
        bits_clear_ids(bits, ids)
        for i in ids:
            afree[node_atom[i]] -= 1
            if cons:
                split[p, node_atom[i]] += 1
        run_first = _grow_i4(run_first, nr + ids.shape[0])
        run_len = _grow_i4(run_len, nr + ids.shape[0])
        run_off[p] = nr
        prev = -2
        for i in ids:
            if i == prev + 1:
                run_len[nr - 1] += 1
            else:
                run_first[nr] = i
                run_len[nr] = 1
                nr += 1
            prev = i
        run_cnt[p] = nr - run_off[p]
        free -= ids.shape[0]
        start[p] = t_begin
        end[p] = t_begin + min(run[p], est[p])
        hn = _push(h_t, h_j, hn, end[p], p)
        rs_ee = t_begin + est[p]
        if cons:
            m = ap_add(pt, pfa, m, t_begin, rs_ee, split[p], -1)
        else:
            rn = _rs_insert(rs_t, rs_k, rs_j, rn, rs_ee, k[p], p)
    while lo < bits.shape[0] and bits[lo] == 0:
        lo += 1

    ai = n_pre
    head_blocked = False
    head = -1
    hc = -1  # the head's class
    head_in = np.zeros(n_atoms, dtype=np.bool_)  # atoms of the head's class
    prof_valid = False
    next_res = np.inf
    now = t_begin

    while True:
        tc = h_t[0] if hn > 0 else np.inf
        ta = submit[ai] if ai < n else np.inf
        now = min(tc, ta, next_res)
        if now == np.inf:
            break
        if cons:
            m = ap_advance(pt, pfa, m, now)

        completed = False
        early = False
        while hn > 0 and h_t[0] <= now:
            j, hn = _pop(h_t, h_j, hn)
            for r in range(run_off[j], run_off[j] + run_cnt[j]):
                f = run_first[r]
                c = run_len[r]
                bits_give(bits, f, c)
                last_free[f : f + c] = now
                atoms_add_run(afree, node_atom, seg_end, f, c, 1)
                if (f >> 6) < lo:
                    lo = f >> 6
            free += k[j]
            ee = start[j] + est[j]
            if cons:
                if now < ee:
                    m = ap_add(pt, pfa, m, now, ee, split[j], 1)
                    early = True
            else:
                rn = _rs_remove(rs_t, rs_k, rs_j, rn, ee, j)
            completed = True

        if cons:
            if early:
                counters[C_COMPRESSIONS] += 1
                for r in range(qn):
                    j = queue[r]
                    old = res[j]
                    atoms = _atoms_of(job_class[j], class_ptr, class_atoms, all_atoms)
                    s = ap_earliest(
                        pt, pfa, m, atoms, k[j], est[j], old, split[j], old, new_split, low
                    )
                    if s < old:
                        if old != np.inf:
                            m = ap_add(pt, pfa, m, old, old + est[j], split[j], 1)
                        split[j, :] = new_split
                        m = ap_add(pt, pfa, m, s, s + est[j], split[j], -1)
                        res[j] = s
                m = ap_coalesce(pt, pfa, m)
            w = 0
            next_res = np.inf
            for r in range(qn):
                j = queue[r]
                if res[j] <= now:
                    _take_split(bits, lo, atom_mask, split[j], k[j], scratch)
                    nr, ni, run_first, run_len, idle_node, idle_cnt, idle_s, idle_e = _record(
                        j, now, k[j], scratch, last_free, run_first, run_len, nr,
                        run_off, run_cnt, idle_node, idle_cnt, idle_s, idle_e, ni,
                    )  # fmt: skip
                    lo = _booked(j, bits, lo, afree, node_atom, seg_end, run_first, run_len,
                                 run_off, run_cnt)  # fmt: skip
                    free -= k[j]
                    start[j] = now
                    end[j] = now + min(run[j], est[j])
                    hn = _push(h_t, h_j, hn, end[j], j)
                    backfilled[j] = w > 0
                else:
                    queue[w] = j
                    w += 1
                    if res[j] < next_res:
                        next_res = res[j]
            qn = w
            while ai < n and submit[ai] <= now:
                j = ai
                ai += 1
                atoms = _atoms_of(job_class[j], class_ptr, class_atoms, all_atoms)
                s = ap_earliest(
                    pt, pfa, m, atoms, k[j], est[j], np.inf, split[j], np.inf, new_split, low
                )
                first_res[j] = s
                if s == np.inf:
                    queue[qn] = j
                    qn += 1
                    continue
                split[j, :] = new_split
                m = ap_add(pt, pfa, m, s, s + est[j], split[j], -1)
                if s <= now:
                    _take_split(bits, lo, atom_mask, split[j], k[j], scratch)
                    nr, ni, run_first, run_len, idle_node, idle_cnt, idle_s, idle_e = _record(
                        j, now, k[j], scratch, last_free, run_first, run_len, nr,
                        run_off, run_cnt, idle_node, idle_cnt, idle_s, idle_e, ni,
                    )  # fmt: skip
                    lo = _booked(j, bits, lo, afree, node_atom, seg_end, run_first, run_len,
                                 run_off, run_cnt)  # fmt: skip
                    free -= k[j]
                    start[j] = now
                    end[j] = now + min(run[j], est[j])
                    hn = _push(h_t, h_j, hn, end[j], j)
                    backfilled[j] = qn > 0
                else:
                    res[j] = s
                    queue[qn] = j
                    qn += 1
                    if s < next_res:
                        next_res = s
            if qn > counters[C_QUEUE_MAX]:
                counters[C_QUEUE_MAX] = qn
            continue

        # FCFS / EASY, as in the plain kernel (tombstones, arrival-only scans, lazy profile)
        live_before = qn - qh - ntomb
        first_new = qn
        while ai < n and submit[ai] <= now:
            queue[qn] = ai
            qn += 1
            ai += 1
        if qn - qh - ntomb > counters[C_QUEUE_MAX]:
            counters[C_QUEUE_MAX] = qn - qh - ntomb
        if completed:
            r = qh
            head_blocked = False
            prof_valid = False
            counters[C_FULL_SCANS] += 1
        else:
            r = first_new
            if live_before == 0:
                head_blocked = False
                prof_valid = False
            counters[C_ARRIVAL_SCANS] += 1
            if prof_valid:
                m = prof_advance(pt, pf, m, now)
        while r < qn:
            j = queue[r]
            r += 1
            if j < 0:
                continue
            kj = k[j]
            cj = job_class[j]
            fj = free
            if cj >= 0 and kj <= free:
                fj = atoms_free(afree, class_atoms[class_ptr[cj] : class_ptr[cj + 1]])
            if kj <= fj:
                ok = True
                mode = ALL_NODES  # which free nodes first: lowest ids (or outside the head's)
                a = kj  # the head's nodes the job holds
                if head_blocked:
                    if policy == FCFS:
                        ok = False
                    else:
                        if not prof_valid:
                            m, s = _head_profile(
                                pt, pf, now, afree, all_atoms, head_in, hc, rs_t, rs_j, rn, k,
                                est, head, run_off, run_cnt, run_first, run_len, node_atom,
                                seg_end,
                            )  # fmt: skip
                            if np.isnan(first_res[head]):
                                first_res[head] = s
                            prof_valid = True
                            counters[C_PROFILE_BUILDS] += 1
                        a_min = kj
                        if hc >= 0:
                            a = count_lowest_in(bits, lo, cmask[max(cj, 0)], cj >= 0, cmask[hc], kj)
                            atoms = _atoms_of(cj, class_ptr, class_atoms, all_atoms)
                            outside = fj - atoms_free_in(afree, atoms, head_in)
                            a_min = max(0, kj - outside)
                        ok = a == 0 or prof_fits_now(pt, pf, m, a, est[j])
                        if not ok and a_min < a:
                            ok = a_min == 0 or prof_fits_now(pt, pf, m, a_min, est[j])
                            if ok:
                                a = a_min
                                mode = OUT_OF_MASK
                        if not ok and est_min[j] < est[j]:
                            hole = prof_fit_length(pt, pf, m, a_min)
                            if hole >= est_min[j]:
                                est[j] = min(hole, est[j])
                                ok = True
                                if a_min < a:
                                    a = a_min
                                    mode = OUT_OF_MASK
                if ok:
                    head_mask = cmask[max(hc, 0)] if hc >= 0 else no_mask
                    _take(bits, lo, cmask[max(cj, 0)], cj >= 0, head_mask, mode, kj, scratch)
                    nr, ni, run_first, run_len, idle_node, idle_cnt, idle_s, idle_e = _record(
                        j, now, kj, scratch, last_free, run_first, run_len, nr,
                        run_off, run_cnt, idle_node, idle_cnt, idle_s, idle_e, ni,
                    )  # fmt: skip
                    lo = _booked(j, bits, lo, afree, node_atom, seg_end, run_first, run_len,
                                 run_off, run_cnt)  # fmt: skip
                    free -= kj
                    start[j] = now
                    end[j] = now + min(run[j], est[j])
                    hn = _push(h_t, h_j, hn, end[j], j)
                    rn = _rs_insert(rs_t, rs_k, rs_j, rn, now + est[j], kj, j)
                    backfilled[j] = head_blocked
                    if prof_valid and a > 0:
                        m = prof_add(pt, pf, m, now, now + est[j], -a)
                    queue[r - 1] = -1
                    ntomb += 1
                    continue
            if not head_blocked:
                head_blocked = True
                head = j
                hc = cj
                for x in range(n_atoms):
                    head_in[x] = hc < 0
                if hc >= 0:
                    for x in range(class_ptr[hc], class_ptr[hc + 1]):
                        head_in[class_atoms[x]] = True
                if policy == FCFS:
                    break
                if np.isnan(first_res[j]):
                    m, s = _head_profile(
                        pt, pf, now, afree, all_atoms, head_in, hc, rs_t, rs_j, rn, k, est,
                        head, run_off, run_cnt, run_first, run_len, node_atom, seg_end,
                    )  # fmt: skip
                    first_res[j] = s
                    prof_valid = True
                    counters[C_PROFILE_BUILDS] += 1
            elif free == 0 or policy == FCFS:
                break
        while qh < qn and queue[qh] < 0:
            qh += 1
            ntomb -= 1
        if ntomb > 64 and 2 * ntomb > qn - qh:
            w = 0
            for x in range(qh, qn):
                if queue[x] >= 0:
                    queue[w] = queue[x]
                    w += 1
            qh = 0
            qn = w
            ntomb = 0

    return (
        start,
        end,
        first_res,
        backfilled,
        run_off,
        run_cnt,
        run_first[:nr],
        run_len[:nr],
        idle_node[:ni],
        idle_cnt[:ni],
        idle_s[:ni],
        idle_e[:ni],
        last_free,
        counters,
    )


@njit(cache=True)
def _atoms_of(c, class_ptr, class_atoms, all_atoms):
    """The atoms of class ``c`` (every atom for ``-1``)."""
    if c < 0:
        return all_atoms
    return class_atoms[class_ptr[c] : class_ptr[c + 1]]


@njit(cache=True)
def _head_profile(
    pt, pf, now, afree, all_atoms, head_in, hc, rs_t, rs_j, rn, k, est, head,
    run_off, run_cnt, run_first, run_len, node_atom, seg_end,
):  # fmt: skip
    """Free nodes of the head's set over time (running jobs end at their limits) with the
    head's reservation taken out; return (length, the reservation's start)."""
    pt[0] = now
    pf[0] = atoms_free_in(afree, all_atoms, head_in)
    m = 1
    c = pf[0]
    for x in range(rn):
        t = rs_t[x]
        if t == np.inf:
            break
        j = rs_j[x]
        if hc < 0:
            c += k[j]
        else:
            for r in range(run_off[j], run_off[j] + run_cnt[j]):
                i = run_first[r]
                stop = i + run_len[r]
                while i < stop:  # one step per stretch of one atom
                    e = min(seg_end[i], stop)
                    if head_in[node_atom[i]]:
                        c += e - i
                    i = e
        if t <= pt[m - 1]:
            pf[m - 1] = c
        else:
            pt[m] = t
            pf[m] = c
            m += 1
    s = prof_earliest(pt, pf, m, k[head], est[head])
    m = prof_add(pt, pf, m, s, s + est[head], -k[head])
    return m, s


@njit(cache=True)
def _take(bits, lo, allow, use_allow, head_mask, mode, kj, scratch):
    """Take ``kj`` allowed free nodes into ``scratch[0:kj]`` (ascending): the lowest ids, or
    with ``mode == OUT_OF_MASK`` those outside ``head_mask`` first."""
    if mode == OUT_OF_MASK:
        c = take_lowest(bits, lo, allow, use_allow, head_mask, OUT_OF_MASK, kj, scratch, 0)
        got = take_lowest(bits, lo, allow, use_allow, head_mask, IN_MASK, kj - c, scratch, c)
        if 0 < c < kj:  # two ascending parts
            scratch[:kj].sort()
    else:
        got = take_lowest(bits, lo, allow, use_allow, head_mask, ALL_NODES, kj, scratch, 0)
    if got != kj:  # the counts promised these nodes; never write past what was taken
        raise RuntimeError("masked kernel: fewer free allowed nodes than counted")


@njit(cache=True)
def _take_split(bits, lo, atom_mask, split, kj, scratch):
    """Take the lowest free ids of each atom, as many as ``split`` books there."""
    c = 0
    parts = 0
    for a in range(split.shape[0]):
        if split[a] > 0:
            c = take_lowest(bits, lo, atom_mask[a], True, atom_mask[a], ALL_NODES, split[a],
                            scratch, c)  # fmt: skip
            parts += 1
    if c != kj:  # the profile promised these nodes; never write past what was taken
        raise RuntimeError("masked kernel: fewer free nodes than the reservation booked")
    if parts > 1:  # each atom's part is ascending; the job's runs want them merged
        scratch[:kj].sort()


@njit(cache=True)
def _booked(j, bits, lo, afree, node_atom, seg_end, run_first, run_len, run_off, run_cnt):
    """Count job ``j``'s nodes (its recorded runs) out of their atoms; return the new ``lo``."""
    for r in range(run_off[j], run_off[j] + run_cnt[j]):
        atoms_add_run(afree, node_atom, seg_end, run_first[r], run_len[r], -1)
    while lo < bits.shape[0] and bits[lo] == 0:
        lo += 1
    return lo


@njit(cache=True)
def _record(
    j, now, kj, ids, last_free, run_first, run_len, nr,
    run_off, run_cnt, idle_node, idle_cnt, idle_s, idle_e, ni,
):  # fmt: skip
    """Record job ``j``'s nodes ``ids[0:kj]`` (ascending) as runs, and the holes it ends (as
    :func:`~.engine._place` does after taking the nodes)."""
    run_first = _grow_i4(run_first, nr + kj)
    run_len = _grow_i4(run_len, nr + kj)
    idle_node = _grow_i4(idle_node, ni + kj)
    idle_cnt = _grow_i4(idle_cnt, ni + kj)
    idle_s = _grow_f8(idle_s, ni + kj)
    idle_e = _grow_f8(idle_e, ni + kj)
    run_off[j] = nr
    prev = -2
    prev_hole = -2
    for c in range(kj):
        i = ids[c]
        if i == prev + 1:
            run_len[nr - 1] += 1
        else:
            run_first[nr] = i
            run_len[nr] = 1
            nr += 1
        prev = i
        lf = last_free[i]
        if now > lf:
            if i == prev_hole + 1 and idle_s[ni - 1] == lf:
                idle_cnt[ni - 1] += 1
            else:
                idle_node[ni] = i
                idle_cnt[ni] = 1
                idle_s[ni] = lf
                idle_e[ni] = now
                ni += 1
            prev_hole = i
    run_cnt[j] = nr - run_off[j]
    return nr, ni, run_first, run_len, idle_node, idle_cnt, idle_s, idle_e


def warm_up() -> float:
    """Load (or compile, on a fresh install: about as long as the plain kernel) the masked
    kernel in this process; return the seconds taken. The window planner first needs it on
    the first snapshot with a restricted queued job; a caller that must not pause there (the
    provider's first poll) calls this beforehand."""
    began = time.perf_counter()
    one = np.ones(1)
    elig = eligibility(2, [np.zeros(1, dtype=np.int64)])
    run_schedule_masked(  # one compiled function serves every policy
        2, CONSERVATIVE, one * 0, one, one, np.ones(1, np.int64), 0, np.zeros(1, np.int64),
        np.zeros(0, np.int64), 0.0, one, elig.job_class, elig.class_mask, elig.class_ptr,
        elig.class_atoms, elig.node_atom, elig.atom_mask,
    )  # fmt: skip
    return time.perf_counter() - began
