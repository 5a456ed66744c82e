"""Job-trace mode: ``ours`` plans with the scheduler-plan predictor on the simulated queue."""

from __future__ import annotations

import pytest

from parsl_malleable.allocate.curve import ScalingCurve
from parsl_malleable.replay.engine import Replay
from parsl_malleable.replay.idle import idle_from_sim
from parsl_malleable.replay.policies import make_policy
from parsl_malleable.replay.queue_windows import QueueWindows
from parsl_malleable.replay.workload import ReplayJob
from parsl_malleable.sim.handmade import handmade_trace
from parsl_malleable.sim.trace_replay import simulate


def blocked_head():
    # 4 nodes: a 3-node job holds n0000-n0002 until 1000 (its limit); a 4-node job queued at
    # 1 is the head, planned at 1000. n0003 is idle from 0 and needed at 1000.
    trace = handmade_trace([(0, 1000, 1000, 3), (1, 100, 100, 4)], nodes=4)
    return trace, simulate(trace, "easy", end_cut="last_end")


def test_an_idle_nodes_window_ends_when_the_queue_needs_it():
    trace, sim = blocked_head()
    windows = QueueWindows(trace, sim)
    assert windows(["n0003"], 10.0) == {"n0003": pytest.approx(990.0)}
    assert windows(["n0003"], 400.0) == {"n0003": pytest.approx(600.0)}
    assert windows.predictions == 2
    # A busy node has no window: it is not a hole.
    assert windows(["n0000"], 500.0) == {}


def test_the_replay_plans_with_the_windows_it_is_given():
    trace, sim = blocked_head()
    timeline = idle_from_sim(sim, source="hand")
    assert timeline.names[3] == "n0003"
    seen: list[float] = []

    class Spy(QueueWindows):
        def __call__(self, nodes, now):
            seen.append(now)
            return super().__call__(nodes, now)

    job = ReplayJob("j", ScalingCurve((0, 1), (0.0, 10.0)), 1, 1, 10.0, 5.0, 5000.0, 0.0)
    replay = Replay(timeline, [job], make_policy("ours"), windows=Spy(trace, sim))
    result = replay.run()
    assert seen and replay.history is None
    (outcome,) = result.jobs
    # The one idle node until 1000: 10 s start, then 10 samples/s.
    assert outcome.trained == pytest.approx(min(5000.0, 10.0 * (1000.0 - 10.0)))
