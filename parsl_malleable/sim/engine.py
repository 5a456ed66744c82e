"""The event loop of the simulator: one numba function that replays jobs on ``n_nodes`` nodes.

Semantics (documented for users in ``docs/sim.md``):

* Jobs are queued in index order (the caller sorts by submit time); that is the priority order.
* At one instant, completions are handled before arrivals, then the queue is scheduled.
* A job holds its nodes for ``min(run, est)`` seconds; plans use ``est`` (the requested
  walltime) as its duration.
* FCFS starts queued jobs in order and stops at the first that does not fit.
* EASY does the same, then reserves the first blocked job (the head) at its earliest start in
  the availability profile and starts any later job that fits now without touching that
  reservation (``prof_fits_now`` on the profile that holds the head's reservation).
* Conservative gives every job a reservation when it arrives (its earliest start in the profile
  holding all earlier reservations), starts it when the reservation comes due, and after a job
  ends early re-plans each queued job in priority order, moving it only to an earlier start
  (remove, then re-insert no later than before), so no job ever starts after its first
  reservation.
* Nodes are taken lowest free ids first (:mod:`parsl_malleable.sim.nodes`).

Work avoided (this is what makes long queues cheap): EASY/FCFS rescan the queue only when a job
has ended; an arrival alone can only let the new jobs start (nothing else changed), so only
they are checked. A scan rejects a job needing more nodes than are free in O(1), stops as soon
as no node is free, and builds the profile (O(running jobs)) once when a job first becomes the
blocked head (to record its reservation) and otherwise only when a job both fits the free count
and has to be checked against the head's reservation. Started jobs leave tombstones in the
queue array, compacted when they are the majority.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from parsl_malleable.sim.availability import (
    prof_add,
    prof_advance,
    prof_build,
    prof_coalesce,
    prof_earliest,
    prof_earliest_moving,
    prof_fit_length,
    prof_fits_now,
)
from parsl_malleable.sim.nodes import bits_all_free, bits_clear_ids, bits_give, bits_take

FCFS, EASY, CONSERVATIVE = 0, 1, 2
POLICIES = {"fcfs": FCFS, "easy": EASY, "conservative": CONSERVATIVE}

# indices into the counters array the kernel returns
C_FULL_SCANS, C_ARRIVAL_SCANS, C_PROFILE_BUILDS, C_QUEUE_MAX, C_COMPRESSIONS = 0, 1, 2, 3, 4
N_COUNTERS = 5


@njit(cache=True)
def _push(h_t: np.ndarray, h_j: np.ndarray, hn: int, t: float, j: int) -> int:
    i = hn
    h_t[i] = t
    h_j[i] = j
    while i > 0:
        p = (i - 1) // 2
        if h_t[p] <= h_t[i]:
            break
        h_t[p], h_t[i] = h_t[i], h_t[p]
        h_j[p], h_j[i] = h_j[i], h_j[p]
        i = p
    return hn + 1


@njit(cache=True)
def _pop(h_t: np.ndarray, h_j: np.ndarray, hn: int) -> tuple[int, int]:
    """Remove the heap's earliest entry; return (its job, new size)."""
    j = h_j[0]
    hn -= 1
    h_t[0] = h_t[hn]
    h_j[0] = h_j[hn]
    i = 0
    while True:
        a = 2 * i + 1
        if a >= hn:
            break
        b = a + 1
        c = b if b < hn and h_t[b] < h_t[a] else a
        if h_t[i] <= h_t[c]:
            break
        h_t[c], h_t[i] = h_t[i], h_t[c]
        h_j[c], h_j[i] = h_j[i], h_j[c]
        i = c
    return j, hn


@njit(cache=True)
def _rs_insert(rs_t, rs_k, rs_j, rn, t, kk, j) -> int:
    """Insert a running job into the arrays sorted by expected end."""
    pos = np.searchsorted(rs_t[:rn], t, side="right")
    for x in range(rn, pos, -1):
        rs_t[x] = rs_t[x - 1]
        rs_k[x] = rs_k[x - 1]
        rs_j[x] = rs_j[x - 1]
    rs_t[pos] = t
    rs_k[pos] = kk
    rs_j[pos] = j
    return rn + 1


@njit(cache=True)
def _rs_remove(rs_t, rs_k, rs_j, rn, t, j) -> int:
    pos = np.searchsorted(rs_t[:rn], t, side="left")
    while rs_j[pos] != j:
        pos += 1
    for x in range(pos, rn - 1):
        rs_t[x] = rs_t[x + 1]
        rs_k[x] = rs_k[x + 1]
        rs_j[x] = rs_j[x + 1]
    return rn - 1


@njit(cache=True)
def _grow_i4(a: np.ndarray, need: int) -> np.ndarray:
    if need <= a.shape[0]:
        return a
    b = np.empty(max(2 * a.shape[0], need), dtype=a.dtype)
    b[: a.shape[0]] = a
    return b


@njit(cache=True)
def _grow_f8(a: np.ndarray, need: int) -> np.ndarray:
    if need <= a.shape[0]:
        return a
    b = np.empty(max(2 * a.shape[0], need), dtype=a.dtype)
    b[: a.shape[0]] = a
    return b


@njit(cache=True)
def run_schedule(
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
):
    """Replay jobs ``0..n-1`` on ``n_nodes`` nodes under ``policy`` (FCFS, EASY, CONSERVATIVE).

    Jobs ``0..n_pre-1`` are already running at ``t_begin`` on the node ids
    ``pre_ids[pre_ptr[p]:pre_ptr[p+1]]`` (used by the live-queue planner); the others arrive at
    ``submit`` (ascending, all ``>= t_begin``). Every job needs ``1 <= k <= n_nodes`` nodes and
    ``est >= 1``. Under EASY a job with ``est_min < est`` (Slurm's ``--time-min``) that does not
    fit before the head's reservation with ``est`` starts anyway when the hole lasts at least
    ``est_min``, with its limit cut to the hole: ``est`` is overwritten with the granted limit
    (pass ``est`` itself as ``est_min`` when no job has a minimum).

    Returns ``(start, end, first_res, backfilled, run_off, run_cnt, run_first, run_len,
    idle_first, idle_count, idle_start, idle_end, last_free, counters)``:

    * per job: start and end (NaN when never started), the first reservation made for it (NaN
      when none was needed), whether it started ahead of an earlier waiting job, and its node
      ids as ``run_cnt`` runs ``(run_first, run_len)`` from index ``run_off``;
    * the holes ended by allocations, as runs of ``idle_count`` consecutive nodes from
      ``idle_first`` idle on the same interval (holes still open at the end start at
      ``last_free`` per node: the caller closes them);
    * work counters (``C_*`` indices).
    """
    n = submit.shape[0]
    start = np.full(n, np.nan)
    end = np.full(n, np.nan)
    first_res = np.full(n, np.nan)
    res = np.full(n, np.inf)  # conservative: current reservation of each queued job
    backfilled = np.zeros(n, dtype=np.bool_)
    run_off = np.zeros(n, dtype=np.int64)
    run_cnt = np.zeros(n, dtype=np.int64)
    counters = np.zeros(N_COUNTERS, dtype=np.int64)

    bits = bits_all_free(n_nodes)
    lo = 0
    free = n_nodes
    last_free = np.full(n_nodes, t_begin)
    scratch = np.empty(n_nodes, dtype=np.int64)

    run_first = np.empty(2 * n + 16, dtype=np.int32)
    run_len = np.empty(2 * n + 16, dtype=np.int32)
    nr = 0
    idle_node = np.empty(2 * n + n_nodes + 16, dtype=np.int32)  # first node of a hole run
    idle_cnt = np.empty(2 * n + n_nodes + 16, dtype=np.int32)  # nodes in the run
    idle_s = np.empty(2 * n + n_nodes + 16, dtype=np.float64)
    idle_e = np.empty(2 * n + n_nodes + 16, dtype=np.float64)
    ni = 0

    h_t = np.empty(n + 1, dtype=np.float64)  # running jobs by actual end
    h_j = np.empty(n + 1, dtype=np.int64)
    hn = 0
    rs_t = np.empty(n + 1, dtype=np.float64)  # running jobs by expected end (FCFS/EASY)
    rs_k = np.empty(n + 1, dtype=np.int64)
    rs_j = np.empty(n + 1, dtype=np.int64)
    rn = 0
    queue = np.empty(n + 1, dtype=np.int64)
    qn = 0
    qh = 0  # FCFS/EASY: first live queue slot
    ntomb = 0  # FCFS/EASY: started jobs still in queue[qh:qn]

    # a profile never has more steps than running jobs plus two per queued job, plus now
    cap = n_nodes + 2 * n + 8
    pt = np.empty(cap, dtype=np.float64)
    pf = np.empty(cap, dtype=np.int64)
    m = 0
    if policy == CONSERVATIVE:
        pt[0] = t_begin
        pf[0] = n_nodes
        m = 1

    # jobs already running at t_begin, on the nodes they hold
    for p in range(n_pre):
        ids = np.sort(pre_ids[pre_ptr[p] : pre_ptr[p + 1]])
        bits_clear_ids(bits, ids)
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
        if policy == CONSERVATIVE:
            m = prof_add(pt, pf, m, t_begin, rs_ee, -k[p])
        else:
            rn = _rs_insert(rs_t, rs_k, rs_j, rn, rs_ee, k[p], p)
    while lo < bits.shape[0] and bits[lo] == 0:
        lo += 1

    ai = n_pre
    head_blocked = False  # FCFS/EASY: the scan stopped at (or reserved) a waiting head
    head = -1
    prof_valid = False  # FCFS/EASY: pt/pf hold running jobs + the head's reservation
    next_res = np.inf  # conservative: earliest reservation of a queued job
    now = t_begin

    while True:
        tc = h_t[0] if hn > 0 else np.inf
        ta = submit[ai] if ai < n else np.inf
        now = min(tc, ta, next_res)
        if now == np.inf:
            break
        if policy == CONSERVATIVE:
            m = prof_advance(pt, pf, m, now)

        # completions first
        completed = False
        early = False
        while hn > 0 and h_t[0] <= now:
            j, hn = _pop(h_t, h_j, hn)
            for r in range(run_off[j], run_off[j] + run_cnt[j]):
                f = run_first[r]
                c = run_len[r]
                bits_give(bits, f, c)
                last_free[f : f + c] = now
                if (f >> 6) < lo:
                    lo = f >> 6
            free += k[j]
            ee = start[j] + est[j]
            if policy == CONSERVATIVE:
                if now < ee:  # ended before its walltime: give back the rest of its slot
                    m = prof_add(pt, pf, m, now, ee, k[j])
                    early = True
            else:
                rn = _rs_remove(rs_t, rs_k, rs_j, rn, ee, j)
            completed = True

        if policy == CONSERVATIVE:
            if early:
                # compress: each queued job in priority order moves to its earliest start,
                # never later than its current reservation
                counters[C_COMPRESSIONS] += 1
                for r in range(qn):
                    j = queue[r]
                    old = res[j]
                    s = prof_earliest_moving(pt, pf, m, k[j], est[j], old, old)
                    if s < old:
                        if old != np.inf:
                            m = prof_add(pt, pf, m, old, old + est[j], k[j])
                        m = prof_add(pt, pf, m, s, s + est[j], -k[j])
                        res[j] = s
                m = prof_coalesce(pt, pf, m)
            # start the jobs whose reservation is due (their slot is already in the profile)
            w = 0
            next_res = np.inf
            for r in range(qn):
                j = queue[r]
                if res[j] <= now:
                    lo, nr, ni, run_first, run_len, idle_node, idle_cnt, idle_s, idle_e = _place(
                        j, now, k[j], bits, lo, scratch, last_free, run_first, run_len, nr,
                        run_off, run_cnt, idle_node, idle_cnt, idle_s, idle_e, ni,
                    )  # fmt: skip
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
                s = prof_earliest(pt, pf, m, k[j], est[j])
                first_res[j] = s
                if s == np.inf:  # nodes held forever by jobs that never end: never starts
                    queue[qn] = j
                    qn += 1
                    continue
                m = prof_add(pt, pf, m, s, s + est[j], -k[j])
                if s <= now:
                    lo, nr, ni, run_first, run_len, idle_node, idle_cnt, idle_s, idle_e = _place(
                        j, now, k[j], bits, lo, scratch, last_free, run_first, run_len, nr,
                        run_off, run_cnt, idle_node, idle_cnt, idle_s, idle_e, ni,
                    )  # fmt: skip
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

        # FCFS / EASY. The queue is queue[qh:qn] in priority order; started jobs leave a
        # tombstone (-1) that later scans skip, and the array is compacted once tombstones are
        # the majority, so removing a job costs O(1) amortised instead of a shift of the tail.
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
            # nothing ended: jobs that could not start before still cannot; check new ones
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
            if kj <= free:
                ok = True
                if head_blocked:
                    if policy == FCFS:
                        ok = False
                    else:
                        if not prof_valid:
                            m, s = _easy_profile(pt, pf, now, free, rs_t, rs_k, rn, k, est, head)
                            if np.isnan(first_res[head]):
                                first_res[head] = s
                            prof_valid = True
                            counters[C_PROFILE_BUILDS] += 1
                        ok = prof_fits_now(pt, pf, m, kj, est[j])
                        if not ok and est_min[j] < est[j]:
                            hole = prof_fit_length(pt, pf, m, kj)
                            if hole >= est_min[j]:
                                est[j] = min(hole, est[j])
                                ok = True
                if ok:
                    lo, nr, ni, run_first, run_len, idle_node, idle_cnt, idle_s, idle_e = _place(
                        j, now, kj, bits, lo, scratch, last_free, run_first, run_len, nr,
                        run_off, run_cnt, idle_node, idle_cnt, idle_s, idle_e, ni,
                    )  # fmt: skip
                    free -= kj
                    start[j] = now
                    end[j] = now + min(run[j], est[j])
                    hn = _push(h_t, h_j, hn, end[j], j)
                    rn = _rs_insert(rs_t, rs_k, rs_j, rn, now + est[j], kj, j)
                    backfilled[j] = head_blocked
                    if prof_valid:
                        m = prof_add(pt, pf, m, now, now + est[j], -kj)
                    queue[r - 1] = -1
                    ntomb += 1
                    continue
            if not head_blocked:
                head_blocked = True
                head = j
                if policy == FCFS:
                    break
                if np.isnan(first_res[j]):  # record the head's reservation when first made
                    m, s = _easy_profile(pt, pf, now, free, rs_t, rs_k, rn, k, est, j)
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
def _easy_profile(pt, pf, now, free, rs_t, rs_k, rn, k, est, head):
    """Profile of the running jobs plus the head's reservation; return (length, its start)."""
    m = prof_build(pt, pf, now, free, rs_t, rs_k, rn)
    s = prof_earliest(pt, pf, m, k[head], est[head])
    m = prof_add(pt, pf, m, s, s + est[head], -k[head])
    return m, s


@njit(cache=True)
def _place(
    j, now, kj, bits, lo, scratch, last_free, run_first, run_len, nr,
    run_off, run_cnt, idle_node, idle_cnt, idle_s, idle_e, ni,
):  # fmt: skip
    """Give job ``j`` the ``kj`` lowest free node ids; record its runs and the holes it ends.

    Holes are stored as runs too: consecutive nodes idle since the same time (usually freed
    together by one job) share one record ``(first node, count, start, end)``.
    """
    lo = bits_take(bits, lo, kj, scratch)
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
        i = scratch[c]
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
    return lo, nr, ni, run_first, run_len, idle_node, idle_cnt, idle_s, idle_e
