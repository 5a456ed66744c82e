"""The scavenger baseline (fixed-size requeued jobs of a preemptable partition), on timelines
small enough to compute by hand, against a second-by-second reference, and on Summit."""

from __future__ import annotations

import math
import time
from dataclasses import replace

import numpy as np
import pytest

from parsl_malleable.allocate.curve import ScalingCurve
from parsl_malleable.errors import ConfigError
from parsl_malleable.replay.idle import IdleTimeline
from parsl_malleable.replay.result import JobOutcome, ReplayResult
from parsl_malleable.replay.scavenger import (
    CHECKPOINT_S,
    REQUEUE_HOLD_S,
    SCHEDULE_DELAY_S,
    STARTUP_S,
    scavenger_replay,
)
from parsl_malleable.replay.scenario import summit_timeline, workload_jobs
from parsl_malleable.replay.workload import ReplayJob

ONE_PER_S = ScalingCurve((1,), (1.0,))  # 1 sample/s at any size
PER_NODE = ScalingCurve((0, 1, 8), (0.0, 1.0, 8.0))  # 1 sample/s per node


def timeline(rows: list[tuple[int, float, float]], t1: float = 1000.0) -> IdleTimeline:
    node, start, end = (np.array(x, dtype=float) for x in zip(*rows, strict=True))
    names = tuple(f"n{i}" for i in range(int(node.max()) + 1))
    return IdleTimeline.build(names, node.astype(int), start, end, "hand", 0.0, t1)


def job(
    name: str = "j",
    samples: float = 100.0,
    submit: float = 0.0,
    curve: ScalingCurve = ONE_PER_S,
    nodes: tuple[int, int] = (1, 8),
    startup: float = 10.0,
) -> ReplayJob:
    return ReplayJob(
        name, curve, nodes[0], nodes[1], startup, 5.0, samples, submit, startup_s=startup
    )


# Only the start-up charged: the arithmetic of the tests written before the other charges.
FREE = {"checkpoint_s": 0.0, "requeue_hold_s": 0.0, "schedule_delay_s": 0.0}


def scav(tl: IdleTimeline, jobs: list[ReplayJob], **options) -> ReplayResult:
    return scavenger_replay(tl, jobs, **{**FREE, **options})


def only(rows: list[tuple[int, float, float]], one: ReplayJob, **options) -> JobOutcome:
    (outcome,) = scav(timeline(rows), [one], **options).jobs
    return outcome


# ------------------------------------------------------------------- by hand


def test_a_job_pays_its_start_up_then_trains_at_its_curve():
    result = scav(timeline([(0, 0.0, 1000.0)]), [job()])
    (out,) = result.jobs
    # 0-10 s start-up, then 100 samples at 1/s.
    assert out.first_start == out.admitted == 0.0
    assert out.finished == pytest.approx(110.0)
    assert out.trained == pytest.approx(100.0)
    assert out.node_seconds == pytest.approx(110.0)
    assert out.paused_s == pytest.approx(10.0)
    assert out.ideal == pytest.approx(110.0)
    assert out.rescales == 0
    assert result.policy == "scavenger"
    assert result.decisions == 1
    assert result.t1 == pytest.approx(110.0)
    assert result.idle_node_seconds == pytest.approx(110.0)
    assert result.efficiency == pytest.approx(100.0 / 110.0)


def test_a_preempted_job_keeps_its_progress_and_pays_the_start_up_again():
    out = only([(0, 0.0, 50.0), (0, 100.0, 1000.0)], job())
    # 40 samples in 10-50 s, checkpointed; restart at 100 s: 10 s start-up, 60 samples.
    assert out.finished == pytest.approx(170.0)
    assert out.first_start == 0.0
    assert out.rescales == 1
    assert out.paused_s == pytest.approx(20.0)
    assert out.node_seconds == pytest.approx(120.0)


def test_training_since_the_last_checkpoint_is_lost_at_a_preemption():
    rows = [(0, 0.0, 50.0), (0, 100.0, 1000.0)]
    # 5 s lost: the first run keeps 35 samples, 65 left after the restart's start-up.
    assert only(rows, job(), lost_on_preempt_s=5.0).finished == pytest.approx(175.0)
    # More lost than trained: the first run keeps nothing.
    assert only(rows, job(), lost_on_preempt_s=100.0).finished == pytest.approx(210.0)


def test_a_job_done_when_its_node_leaves_has_finished():
    out = only([(0, 0.0, 110.0), (0, 200.0, 1000.0)], job())
    assert out.finished == pytest.approx(110.0)
    assert out.rescales == 0


def test_a_multi_node_job_waits_until_enough_nodes_are_idle_at_once():
    two = job(curve=PER_NODE, nodes=(2, 8))
    out = only([(0, 0.0, 1000.0), (1, 300.0, 1000.0)], two)
    # Both nodes from 300 s; 10 s start-up; 100 samples at 2/s.
    assert out.first_start == pytest.approx(300.0)
    assert out.finished == pytest.approx(360.0)
    assert out.node_seconds == pytest.approx(120.0)
    assert out.ideal == pytest.approx(120.0)
    # Never two nodes at once: never starts; the replay runs to the timeline's end.
    result = scav(timeline([(0, 0.0, 100.0), (1, 200.0, 300.0)]), [two])
    (never,) = result.jobs
    assert never.first_start is None and never.finished is None
    assert never.trained == 0.0 and never.node_seconds == 0.0
    assert result.t1 == 1000.0


def test_a_node_idle_for_less_than_the_start_up_trains_nothing():
    out = only([(0, 0.0, 5.0)], job())
    assert out.trained == 0.0
    assert out.first_start == 0.0 and out.finished is None
    assert out.node_seconds == pytest.approx(5.0)
    assert out.paused_s == pytest.approx(5.0)


def test_jobs_wait_for_their_submit_time_and_run_first_come_first_served():
    result = scav(
        timeline([(0, 0.0, 1000.0)]), [job("late", submit=80.0), job("early", submit=50.0)]
    )
    early, late = result.jobs  # outcomes come in queue order
    assert early.name == "early"
    assert early.first_start == pytest.approx(50.0)
    assert early.finished == pytest.approx(160.0)
    assert late.first_start == pytest.approx(160.0)
    assert late.finished == pytest.approx(270.0)


def test_a_requeued_job_keeps_its_place_in_the_queue():
    rows = [(0, 0.0, 50.0), (0, 100.0, 1000.0)]
    first, second = scav(timeline(rows), [job("a"), job("b", submit=10.0)]).jobs
    # a is preempted at 50 s and restarts at 100 s ahead of b, which never started.
    assert first.finished == pytest.approx(170.0)
    assert second.first_start == pytest.approx(170.0)
    assert second.finished == pytest.approx(280.0)


def test_a_preempted_job_frees_its_other_nodes_and_blocks_the_queue():
    rows = [(0, 0.0, 50.0), (1, 0.0, 1000.0), (2, 60.0, 1000.0)]
    big = job("big", samples=1000.0, curve=PER_NODE, nodes=(2, 2))
    small = job("small", samples=10.0, submit=1.0)
    a, b = scav(timeline(rows), [big, small]).jobs
    # big: 80 samples in 10-50 s; node 1 is free at 50 s but big, at the head, needs two:
    # small waits (no backfill). At 60 s big restarts on nodes 1 and 2: 920 left at 2/s.
    assert a.finished == pytest.approx(530.0)
    assert a.node_seconds == pytest.approx(2 * 50.0 + 2 * 470.0)
    assert b.first_start == pytest.approx(530.0)
    assert b.finished == pytest.approx(550.0)


def test_the_node_idle_the_longest_is_taken():
    # At 60 s node 0 has been idle for 60 s, node 1 for 10 s: the job takes node 0, which
    # leaves at 100 s (30 samples trained), then restarts on node 1.
    out = only([(0, 0.0, 100.0), (1, 50.0, 1000.0)], job(submit=60.0))
    assert out.finished == pytest.approx(180.0)
    assert out.rescales == 1


@pytest.mark.parametrize(
    ("nodes_per_job", "size", "policy"),
    [
        (None, 2, "scavenger"),
        (1, 2, "scavenger (1 node)"),
        (3, 3, "scavenger (3 nodes)"),
        (8, 4, "scavenger (8 nodes)"),
    ],
)
def test_the_size_is_clamped_to_the_jobs_bounds(nodes_per_job, size, policy):
    rows = [(n, 0.0, 1000.0) for n in range(6)]
    one = job(samples=120.0, curve=PER_NODE, nodes=(2, 4))
    result = scav(timeline(rows), [one], nodes_per_job=nodes_per_job, startup_s=0.0)
    (out,) = result.jobs
    assert out.finished == pytest.approx(120.0 / size)
    assert out.node_seconds == pytest.approx(120.0)
    assert result.policy == policy


def test_a_start_up_given_overrides_the_jobs_scale_up_cost():
    rows = [(0, 0.0, 1000.0)]
    assert only(rows, job(), startup_s=0.0).finished == pytest.approx(100.0)
    assert only(rows, job(), startup_s=30.0).finished == pytest.approx(130.0)


def test_no_job_makes_an_empty_result():
    result = scav(timeline([(0, 0.0, 1000.0)]), [])
    assert result.jobs == []
    assert result.t1 == 0.0 and result.idle_node_seconds == 0.0


# ------------------------------------------------- what a preemptable job pays


def test_the_default_start_up_is_the_measured_cold_start():
    bare = ReplayJob("j", ONE_PER_S, 1, 1, 18.0, 12.0, 100.0, 0.0)  # no start-up of its own
    (out,) = scavenger_replay(timeline([(0, 0.0, 1000.0)]), [bare], **FREE).jobs
    assert out.finished == pytest.approx(STARTUP_S + 100.0)
    assert bare.scale_up_s != STARTUP_S


def test_every_start_waits_for_the_scheduling_pass():
    rows = [(0, 0.0, 50.0), (0, 100.0, 1000.0)]
    # Each of the two starts holds the node 2 s more: 38 samples, then 62 from 114 s.
    out = only(rows, job(), schedule_delay_s=2.0)
    assert out.finished == pytest.approx(100.0 + 12.0 + 62.0)
    assert out.paused_s == pytest.approx(2 * 12.0)


def test_a_preempted_job_is_held_before_it_may_start_again():
    rows = [(0, 0.0, 50.0), (0, 100.0, 1000.0)]
    # Preempted at 50 s with 40 samples; eligible again at 50 + 120 s, not at 100 s.
    out = only(rows, job(), requeue_hold_s=120.0)
    assert out.first_start == 0.0
    assert out.finished == pytest.approx(170.0 + 10.0 + 60.0)


def test_a_held_job_lets_the_jobs_behind_it_start():
    rows = [(0, 0.0, 50.0), (0, 100.0, 1000.0)]
    a, b = scav(timeline(rows), [job("a"), job("b", submit=10.0)], requeue_hold_s=120.0).jobs
    # a is held until 170 s; b, never started, takes the node at 100 s and finishes at 210 s;
    # a then starts.
    assert b.first_start == pytest.approx(100.0)
    assert b.finished == pytest.approx(210.0)
    assert a.finished == pytest.approx(210.0 + 10.0 + 60.0)


def test_a_preemption_loses_the_training_since_the_last_checkpoint():
    rows = [(0, 0.0, 50.0), (0, 100.0, 1000.0)]
    # 40 s of training, a checkpoint every 15 s: 30 kept, 10 lost; 70 left after 110 s.
    assert only(rows, job(), checkpoint_s=15.0).finished == pytest.approx(180.0)
    # Checkpoints rarer than the run: all of it lost.
    assert only(rows, job(), checkpoint_s=600.0).finished == pytest.approx(210.0)
    # A job that finishes, or one the timeline's end stops, loses nothing.
    assert only([(0, 0.0, 1000.0)], job(), checkpoint_s=600.0).trained == pytest.approx(100.0)


def test_the_defaults_charge_every_cost():
    rows = [(0, 0.0, 50.0), (0, 100.0, 1000.0)]
    charged = scavenger_replay(timeline(rows), [job(startup=10.0)])
    (out,) = charged.jobs
    # 10 s start-up + 0.5 s scheduling; preempted at 50 s, its 39.5 s since the start lost
    # (10-minute checkpoints); held until 170 s; then 100 samples after 10.5 s.
    assert SCHEDULE_DELAY_S == 0.5 and REQUEUE_HOLD_S == 120.0 and CHECKPOINT_S == 600.0
    assert out.finished == pytest.approx(170.0 + 10.5 + 100.0)
    assert charged.trained < scav(timeline(rows), [job(startup=10.0)]).trained + 1e-9


# --------------------------------------------------------- unlimited backlog


def random_timeline(seed: int, nodes: int = 4, t1: float = 2000.0) -> IdleTimeline:
    rng = np.random.default_rng(seed)
    rows = []
    for n in range(nodes):
        edges = np.sort(rng.choice(np.arange(0, int(t1) + 200), size=16, replace=False))
        rows += [(n, float(a), float(b)) for a, b in edges.reshape(-1, 2)]
    return timeline(rows, t1)


@pytest.mark.parametrize("seed", range(5))
def test_an_unlimited_backlog_trains_every_interval_past_its_start_up(seed):
    tl = random_timeline(seed)
    backlog = [job(f"j{i}", samples=math.inf, curve=PER_NODE, nodes=(1, 1)) for i in range(6)]
    length = tl.end - tl.start
    result = scav(tl, backlog)
    assert result.trained == pytest.approx(np.maximum(0.0, length - 10.0).sum())
    # Every idle node-second is held; no job finishes; the replay runs to the end.
    assert result.harvested_node_seconds == pytest.approx(tl.idle_node_seconds())
    assert result.finished == [] and result.t1 == tl.t1
    # 3 s lost at each preemption; an interval cut at the end of the timeline is not one.
    lost = np.where(tl.end < tl.t1, 13.0, 10.0)
    lossy = scav(tl, backlog, lost_on_preempt_s=3.0)
    assert lossy.trained == pytest.approx(np.maximum(0.0, length - lost).sum())


# ------------------------------------------------------------- a reference


def reference(tl: IdleTimeline, jobs: list[ReplayJob], lost_s: float) -> list[tuple]:
    """Second by second, with integer times and 1 sample/s: the same rules, no heaps."""
    order = sorted(range(len(jobs)), key=lambda i: (jobs[i].submit, jobs[i].name))
    jobs = [jobs[i] for i in order]
    rows = list(zip(tl.node.tolist(), tl.start.tolist(), tl.end.tolist(), strict=True))
    done = [0.0] * len(jobs)
    held: dict[int, list[int]] = {}  # job -> intervals
    began: dict[int, int] = {}
    out = [[None, None, 0.0, 0.0, 0] for _ in jobs]  # first, finished, node-s, paused, starts
    owner: dict[int, int] = {}
    waiting: list[int] = []

    def stop(i: int, t: int, lost: float) -> None:
        k, working = len(held[i]), max(0, t - began[i] - jobs[i].scale_up_s)
        out[i][2] += k * (t - began[i])
        out[i][3] += t - began[i] - working
        done[i] = min(jobs[i].samples, done[i] + max(0.0, working - lost))
        for r in held.pop(i):
            owner.pop(r, None)
        del began[i]

    for t in range(int(tl.t0), int(tl.t1) + 1):
        for i in list(began):
            if began[i] + jobs[i].scale_up_s + jobs[i].samples - done[i] == t:
                stop(i, t, 0.0)
                out[i][1] = t
        if all(o[1] is not None for o in out) or t == tl.t1:
            break
        for r, (_, _, end) in enumerate(rows):
            if end == t and r in owner:
                i = owner[r]
                stop(i, t, lost_s)
                waiting.append(i)
        waiting += [i for i, j in enumerate(jobs) if j.submit == t]
        waiting.sort()
        free = sorted(
            (start, node, r)
            for r, (node, start, end) in enumerate(rows)
            if start <= t < end and r not in owner
        )
        while waiting and len(free) >= jobs[waiting[0]].min_nodes:
            i = waiting.pop(0)
            taken, free = free[: jobs[i].min_nodes], free[jobs[i].min_nodes :]
            held[i] = [r for _, _, r in taken]
            owner.update((r, i) for r in held[i])
            began[i] = t
            out[i][0] = t if out[i][0] is None else out[i][0]
            out[i][4] += 1
    for i in list(began):
        stop(i, int(tl.t1), 0.0)
    return [(j.name, *o, done[i]) for i, (j, o) in enumerate(zip(jobs, out, strict=True))]


@pytest.mark.parametrize("seed", range(8))
def test_the_replay_matches_a_second_by_second_reference(seed):
    rng = np.random.default_rng(100 + seed)
    tl = random_timeline(seed, nodes=3, t1=1500.0)
    jobs = []
    for i in range(6):
        k = int(rng.integers(1, 3))
        samples, submit, startup = (
            float(rng.integers(lo, hi)) for lo, hi in ((20, 300), (0, 400), (0, 20))
        )
        jobs.append(job(f"j{i}", samples, submit, nodes=(k, k), startup=startup))
    lost = float(rng.integers(0, 6))
    result = scav(tl, jobs, lost_on_preempt_s=lost)
    got = [
        (o.name, o.first_start, o.finished, o.node_seconds, o.paused_s, o.rescales + 1, o.trained)
        for o in result.jobs
    ]
    want = reference(tl, jobs, lost)
    for g, w in zip(got, want, strict=True):
        if w[1] is None:  # never started
            assert g[1] is None and g[3] == 0.0 and g[6] == 0.0
        else:
            assert g == pytest.approx(w)
    # Conservation: jobs never hold more node-time than was idle, nor train past the ideal.
    assert result.harvested_node_seconds <= result.idle_node_seconds + 1e-9
    assert all(o.trained <= min(o.ideal, o.samples) + 1e-9 for o in result.jobs)


# ------------------------------------------------------------ bad parameters


@pytest.mark.parametrize(
    "options",
    [
        {"nodes_per_job": 0},
        {"nodes_per_job": -2},
        {"nodes_per_job": 1.5},
        {"nodes_per_job": True},
        {"startup_s": -1.0},
        {"startup_s": math.nan},
        {"lost_on_preempt_s": -0.5},
        {"lost_on_preempt_s": math.inf},
        {"checkpoint_s": -1.0},
        {"requeue_hold_s": math.nan},
        {"schedule_delay_s": -0.1},
    ],
)
def test_bad_parameters_are_refused(options):
    name = next(iter(options))
    with pytest.raises(ConfigError, match=name):
        scavenger_replay(timeline([(0, 0.0, 1000.0)]), [job()], **options)


# ---------------------------------------------------------------- real data


def test_a_summit_slice_replays_quickly_within_what_was_idle():
    tl = summit_timeline(200, 0.5)
    jobs = workload_jobs("hps-shufflenet-1000J", tl, limit=100)
    began = time.perf_counter()
    result = scavenger_replay(tl, jobs)
    assert time.perf_counter() - began < 2.0
    assert len(result.jobs) == 100
    assert result.trained > 0
    rate = jobs[0].curve(1)
    assert all(j.curve(1) == rate for j in jobs)
    assert result.trained <= result.idle_node_seconds * rate
    assert result.harvested_node_seconds <= result.idle_node_seconds + 1e-6
    # Unlimited samples: jobs never finish and hold at most the idle node-time.
    backlog = scavenger_replay(tl, [replace(j, samples=math.inf) for j in jobs])
    assert backlog.finished == [] and backlog.t1 == tl.t1
    assert backlog.trained <= backlog.idle_node_seconds * rate
