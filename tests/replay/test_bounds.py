"""The bounds of what the idle nodes allow (replay/bounds.py), computed by hand."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from parsl_malleable.allocate.curve import ScalingCurve
from parsl_malleable.replay.bounds import concave_marginals, offline_bound, replay_bounds
from parsl_malleable.replay.engine import Replay
from parsl_malleable.replay.idle import IdleTimeline
from parsl_malleable.replay.policies import make_policy
from parsl_malleable.replay.scavenger import scavenger_replay
from parsl_malleable.replay.scenario import hpo_sweep, summit_timeline
from parsl_malleable.replay.workload import Physics, ReplayJob


def _timeline(intervals: list[tuple[int, float, float]], t1: float) -> IdleTimeline:
    node = np.array([n for n, _, _ in intervals])
    start = np.array([s for _, s, _ in intervals], dtype=float)
    end = np.array([e for _, _, e in intervals], dtype=float)
    names = tuple(f"n{i}" for i in range(int(node.max()) + 1))
    return IdleTimeline.build(names, node, start, end, "hand", 0.0, t1)


def _job(
    name: str,
    curve: ScalingCurve,
    samples: float = math.inf,
    submit: float = 0.0,
    scale_up_s: float = 0.0,
) -> ReplayJob:
    top = curve.nodes[-1]
    return ReplayJob(name, curve, 1, top, scale_up_s, 5.0, samples, submit, family="f")


def test_concave_marginals_take_the_upper_envelope():
    # 0 -> 10 -> 12 -> 30 (at 4): not concave; the envelope through (0,0) is the chord to 4.
    curve = ScalingCurve((1, 2, 4), (10.0, 12.0, 30.0))
    assert concave_marginals(curve, 1, 4) == pytest.approx([10.0, 20 / 3, 20 / 3, 20 / 3])
    # Concave already: the marginals are the curve's own steps.
    assert concave_marginals(ScalingCurve((1, 2), (10.0, 15.0)), 1, 2) == [10.0, 5.0]


def test_the_offline_bound_shares_each_instant_s_nodes_by_marginal_rates():
    # Two nodes idle 0-100, a third 50-100; one job that scales 10, 15, 18.
    timeline = _timeline([(0, 0, 100), (1, 0, 100), (2, 50, 100)], 100.0)
    curve = ScalingCurve((1, 2, 3), (10.0, 15.0, 18.0))
    one = [_job("a", curve)]
    assert offline_bound(timeline, one, 100.0) == pytest.approx(15 * 50 + 18 * 50)
    # A second identical job takes the second node at 10/s instead of the first job's 5/s.
    two = [*one, _job("b", curve)]
    assert offline_bound(timeline, two, 100.0) == pytest.approx(20 * 50 + 25 * 50)
    # Submitted at 50: before then only the first job counts.
    late = [*one, _job("b", curve, submit=50.0)]
    assert offline_bound(timeline, late, 100.0) == pytest.approx(15 * 50 + 25 * 50)
    # A finite workload caps the bound at what the jobs ask for.
    small = [_job("a", curve, samples=400.0)]
    assert offline_bound(timeline, small, 100.0) == pytest.approx(400.0)


def test_the_offline_bound_charges_each_interval_the_smallest_start_pause():
    # A node trains nothing in the first scale_up_s of its interval (whoever takes it pauses).
    timeline = _timeline([(0, 0, 100), (1, 0, 100), (2, 50, 100)], 100.0)
    curve = ScalingCurve((1, 2, 3), (10.0, 15.0, 18.0))
    jobs = [_job("a", curve, scale_up_s=20.0), _job("b", curve, scale_up_s=30.0)]
    # 20-100: nodes 0 and 1 (20/s); 70-100: node 2 as well (25/s).
    assert offline_bound(timeline, jobs, 100.0) == pytest.approx(20 * 50 + 25 * 30)
    short = _timeline([(0, 0, 15)], 100.0)  # shorter than the pause: nothing to train
    assert offline_bound(short, jobs, 100.0) == 0.0


def test_upper_bound_is_idle_node_seconds_times_the_best_per_node_rate():
    timeline = _timeline([(0, 0, 100), (1, 20, 60)], 100.0)
    curve = ScalingCurve((1, 2), (10.0, 16.0))
    bounds = replay_bounds(timeline, [_job("a", curve)], 100.0)
    assert bounds.idle_node_seconds == pytest.approx(140.0)
    assert bounds.upper == pytest.approx(1400.0)
    # One job: two nodes train 16/s, not 20/s, while both are idle.
    assert bounds.offline == pytest.approx(10 * 60 + 16 * 40)


@pytest.mark.parametrize("policy", ["freetrain", "ours"])
def test_no_policy_trains_more_than_either_bound(policy):
    timeline = summit_timeline(100, 0.25)
    jobs = [replace(j, submit=timeline.t0) for j in hpo_sweep(timeline, 40, samples=math.inf)]
    result = Replay(timeline, jobs, make_policy(policy), max_jobs=None).run()
    assert 0 < result.trained <= result.offline_bound * (1 + 1e-9)
    assert result.offline_bound <= result.upper_bound * (1 + 1e-9)
    # One family that scales best at one node and a backlog larger than the idle nodes: the
    # offline bound is every idle interval less one start (the runtime's start-up and
    # regroup), at the one-node rate, which is what one-node scavenger jobs train (they never
    # rescale) when each start costs that and nothing else (no hold, delay or lost work).
    lead = Physics().costs(jobs[0]).lead_s
    usable = np.clip(timeline.end - timeline.start - lead, 0.0, None).sum()
    assert result.offline_bound == pytest.approx(usable * jobs[0].curve(1), rel=1e-9)
    free = {"checkpoint_s": 0.0, "requeue_hold_s": 0.0, "schedule_delay_s": 0.0}
    scavenger = scavenger_replay(timeline, jobs, startup_s=lead, **free)
    assert scavenger.trained == pytest.approx(result.offline_bound, rel=1e-9)
    assert scavenger.offline_bound == pytest.approx(result.offline_bound, rel=1e-9)
