"""The masked kernel (jobs restricted to node sets) against the plain kernel and a brute force."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from parsl_malleable.sim.eligibility import ANY, eligibility, node_bitmask
from parsl_malleable.sim.engine import POLICIES, run_schedule
from parsl_malleable.sim.masked_engine import run_schedule_masked
from parsl_malleable.sim.reference_masked import reference_masked


@st.composite
def instances(draw, restricted: bool = True):
    """A few nodes, up to 3 jobs running at t=0 on disjoint nodes, up to 12 arriving later;
    each later job may use any node or one of up to 3 shared node sets (a queue's nodes)."""
    n_nodes = draw(st.integers(1, 8))
    order = draw(st.permutations(range(n_nodes)))
    pre_nodes: list[list[int]] = []
    used = 0
    for _ in range(draw(st.integers(0, 3))):
        if used == n_nodes:
            break
        size = draw(st.integers(1, n_nodes - used))
        pre_nodes.append(sorted(order[used : used + size]))
        used += size
    n_new = draw(st.integers(1, 12))
    arrivals = sorted(draw(st.lists(st.integers(0, 60), min_size=n_new, max_size=n_new)))
    submit = [0.0] * len(pre_nodes) + [float(t) for t in arrivals]
    n = len(submit)
    est = [float(draw(st.integers(1, 50))) for _ in range(n)]
    naive = draw(st.booleans())
    run = est if naive else [float(min(e, draw(st.integers(0, 60)))) for e in est]
    sets = draw(
        st.lists(
            st.sets(st.integers(0, n_nodes - 1), min_size=1).map(sorted), min_size=1, max_size=3
        )
    )
    allowed: list[list[int] | None] = [None] * len(pre_nodes)
    for _ in range(n_new):
        allowed.append(draw(st.one_of(st.none(), st.sampled_from(sets))) if restricted else None)
    # sizes up to the machine: a job larger than its set never starts and must block nobody
    k = [len(ids) for ids in pre_nodes] + [draw(st.integers(1, n_nodes)) for _ in range(n_new)]
    return n_nodes, pre_nodes, submit, run, est, k, allowed, naive


def _arrays(n_nodes, pre_nodes, submit, run, est, k):
    pre_ptr = np.cumsum([0] + [len(ids) for ids in pre_nodes]).astype(np.int64)
    pre_ids = np.array([i for ids in pre_nodes for i in ids], dtype=np.int64)
    est_a = np.array(est, dtype=float)
    return (
        n_nodes,
        np.array(submit, dtype=float),
        np.array(run, dtype=float),
        est_a,
        np.array(k, dtype=np.int64),
        len(pre_nodes),
        pre_ptr,
        pre_ids,
    )


def _plain(policy, arrays):
    n_nodes, submit, run, est, k, n_pre, pre_ptr, pre_ids = arrays
    est = est.copy()
    return run_schedule(
        n_nodes, POLICIES[policy], submit, run, est, k, n_pre, pre_ptr, pre_ids, 0.0, est
    )


def _masked(policy, arrays, elig):
    n_nodes, submit, run, est, k, n_pre, pre_ptr, pre_ids = arrays
    est = est.copy()
    return run_schedule_masked(
        n_nodes, POLICIES[policy], submit, run, est, k, n_pre, pre_ptr, pre_ids, 0.0, est,
        elig.job_class, elig.class_mask, elig.class_ptr, elig.class_atoms, elig.node_atom,
        elig.atom_mask,
    )  # fmt: skip


def _nodes_of(out, j: int) -> list[int]:
    run_off, run_cnt, run_first, run_len = out[4], out[5], out[6], out[7]
    ids: list[int] = []
    for r in range(run_off[j], run_off[j] + run_cnt[j]):
        ids.extend(range(run_first[r], run_first[r] + run_len[r]))
    return sorted(ids)


@settings(max_examples=150, deadline=None)
@given(instances(restricted=False), st.sampled_from(sorted(POLICIES)))
def test_without_node_sets_the_masked_kernel_is_the_plain_one(case, policy):
    n_nodes, pre_nodes, submit, run, est, k, allowed, _ = case
    arrays = _arrays(n_nodes, pre_nodes, submit, run, est, k)
    plain = _plain(policy, arrays)
    free = eligibility(n_nodes, allowed)
    # every job in one class that holds every node: the restricted code paths, same answer
    whole = free.with_classes(np.zeros(len(submit), dtype=np.int64))
    whole = type(whole)(
        whole.job_class,
        node_bitmask(np.arange(n_nodes), n_nodes)[None, :],
        np.array([0, 1]),
        np.array([0]),
        whole.node_atom,
        whole.atom_mask,
    )
    for elig in (free, whole):
        masked = _masked(policy, arrays, elig)
        for got, want in zip(masked, plain, strict=True):
            assert np.array_equal(got, want, equal_nan=True)


@settings(max_examples=300, deadline=None)
@given(instances(), st.sampled_from(sorted(POLICIES)))
def test_masked_kernel_matches_the_brute_force(case, policy):
    n_nodes, pre_nodes, submit, run, est, k, allowed, naive = case
    arrays = _arrays(n_nodes, pre_nodes, submit, run, est, k)
    elig = eligibility(n_nodes, [None if a is None else np.array(a) for a in allowed])
    out = _masked(policy, arrays, elig)
    ref = reference_masked(n_nodes, policy, 0.0, submit, run, est, k, pre_nodes, allowed)
    start, end, first_res = out[0], out[1], out[2]
    assert np.array_equal(start, np.array(ref.start), equal_nan=True)
    busy: dict[int, list[tuple[float, float]]] = {}
    for j in range(len(submit)):
        ids = _nodes_of(out, j)
        assert ids == ref.nodes[j], f"job {j}"
        if allowed[j] is not None:
            assert set(ids) <= set(allowed[j]), f"job {j} ran outside its node set"
        for i in ids:
            busy.setdefault(i, []).append((start[j], end[j]))
    for spans in busy.values():
        spans.sort()
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), "a node ran two jobs"
    if naive and policy != "fcfs":
        # with every job lasting its limit, no backfill delays a job past its first
        # reservation (conservative: every job starts exactly there)
        booked = ~np.isnan(first_res) & np.isfinite(first_res)
        assert np.all(start[booked] <= first_res[booked])
        if policy == "conservative":
            assert np.array_equal(start[booked], first_res[booked])


def test_atoms_group_nodes_of_the_same_sets_lowest_id_first():
    elig = eligibility(6, [None, np.array([4, 5]), np.array([0, 4, 5]), np.arange(6)])
    assert elig.job_class.tolist() == [ANY, 0, 1, ANY]  # the whole machine restricts nothing
    assert elig.node_atom.tolist() == [0, 1, 1, 1, 2, 2]
    assert elig.class_atoms[elig.class_ptr[0] : elig.class_ptr[1]].tolist() == [2]
    assert elig.class_atoms[elig.class_ptr[1] : elig.class_ptr[2]].tolist() == [0, 2]
    assert elig.restricted and not eligibility(3, [None, None]).restricted


def test_a_job_waits_for_its_own_nodes_while_others_are_free():
    # nodes 0-1 busy until 100; a job allowed only nodes 0-1 waits for them although 2-3 are
    # free, and a later job of any node backfills on 2 (ends after 100, holds no node of the
    # head's set); under conservative, the same; FCFS lets nothing pass the waiting job
    arrays = _arrays(4, [[0, 1]], [0.0, 0.0, 0.0], [100.0, 50.0, 500.0], [100.0, 50.0, 500.0],
                     [2, 2, 1])  # fmt: skip
    elig = eligibility(4, [None, np.array([0, 1]), None])
    for policy in ("easy", "conservative"):
        out = _masked(policy, arrays, elig)
        assert out[0].tolist() == [0.0, 100.0, 0.0], policy
        assert _nodes_of(out, 1) == [0, 1] and _nodes_of(out, 2) == [2]
    assert _masked("fcfs", arrays, elig)[0].tolist() == [0.0, 100.0, 100.0]


def test_a_backfill_keeps_clear_of_the_head_s_nodes_when_it_can():
    # nodes 0-1 busy until 100; the head may use 0-2 and needs 3, so it waits for 100 with no
    # spare node of its set. A 500 s job of any node would take node 2 (lowest id) and delay
    # it; it starts now on node 3 instead, as a scheduler keeping clear of a reservation does.
    arrays = _arrays(4, [[0, 1]], [0.0, 0.0, 0.0], [100.0, 50.0, 500.0], [100.0, 50.0, 500.0],
                     [2, 3, 1])  # fmt: skip
    elig = eligibility(4, [None, np.array([0, 1, 2]), None])
    out = _masked("easy", arrays, elig)
    assert out[0].tolist() == [0.0, 100.0, 0.0]
    assert _nodes_of(out, 2) == [3] and _nodes_of(out, 1) == [0, 1, 2]


def test_warm_up_loads_the_kernel():
    from parsl_malleable.sim.masked_engine import warm_up

    assert warm_up() >= 0.0


def test_a_backfill_may_take_the_head_s_spare_node():
    # nodes 0-1 busy until 100; the head may use 0-2 and needs 2: at 100 it has one node of its
    # set to spare, so a 500 s job of any node takes its lowest ids, 2 (the spare) and 3, and
    # leaves node 4 free
    arrays = _arrays(5, [[0, 1]], [0.0, 0.0, 0.0], [100.0, 50.0, 500.0], [100.0, 50.0, 500.0],
                     [2, 2, 2])  # fmt: skip
    elig = eligibility(5, [None, np.array([0, 1, 2]), None])
    out = _masked("easy", arrays, elig)
    assert out[0].tolist() == [0.0, 100.0, 0.0]
    assert _nodes_of(out, 2) == [2, 3] and _nodes_of(out, 1) == [0, 1]
