"""The replay's physics and bookkeeping, on timelines small enough to compute by hand, and every
policy on a slice of the real Summit trace."""

from __future__ import annotations

import math

import numpy as np
import pytest

from parsl_malleable.allocate.curve import ScalingCurve
from parsl_malleable.controller.model import DrainRanks, JobSpec, StartRanks
from parsl_malleable.replay.engine import Replay
from parsl_malleable.replay.idle import IdleTimeline
from parsl_malleable.replay.policies import POLICIES, make_policy
from parsl_malleable.replay.scenario import summit_timeline, workload_jobs
from parsl_malleable.replay.workload import FREETRAIN_PHYSICS, Physics, ReplayJob

LINEAR = ScalingCurve((0, 1, 8), (0.0, 10.0, 80.0))
FT = FREETRAIN_PHYSICS
# The runtime's physics with round figures: 10 s start-up, 2 s regroup, 5 s leave.
RT = Physics(startup_s=10.0, regroup_s=2.0, leave_s=5.0)


def timeline(rows: list[tuple[int, float, float]], t1: float = 10_000.0) -> IdleTimeline:
    node, start, end = (np.array(x, dtype=float) for x in zip(*rows, strict=True))
    names = tuple(f"n{i}" for i in range(int(node.max()) + 1))
    return IdleTimeline.build(names, node.astype(int), start, end, "hand", 0.0, t1)


def job(name: str = "j", samples: float = 10_000.0, submit: float = 0.0) -> ReplayJob:
    return ReplayJob(name, LINEAR, 1, 8, 10.0, 5.0, samples, submit)


def test_a_job_pays_its_start_then_trains_at_its_curve():
    tl = timeline([(0, 0.0, 5000.0), (1, 0.0, 5000.0)])
    result = Replay(tl, [job()], make_policy("freetrain"), physics=FT).run()
    (outcome,) = result.jobs
    # Both nodes at t=0, a 10 s start pause, then 20 samples/s: 10,000 samples at t=510.
    assert outcome.finished == pytest.approx(510.0)
    assert outcome.trained == pytest.approx(10_000.0)
    assert outcome.ideal == pytest.approx(20.0 * 510.0)
    assert result.efficiency == pytest.approx(10_000.0 / 10_200.0)
    assert outcome.node_seconds == pytest.approx(2 * 510.0)


def test_a_reclaimed_node_costs_a_scale_down_pause():
    tl = timeline([(0, 0.0, 5000.0), (1, 0.0, 200.0)])
    result = Replay(tl, [job()], make_policy("freetrain"), physics=FT).run()
    (outcome,) = result.jobs
    # 0-10 s start pause; 10-200 s at 20/s (3,800); node 1 taken back at 200 s: 5 s pause;
    # 205 s on at 10/s: 6,200 samples left take 620 s.
    assert outcome.finished == pytest.approx(825.0)
    assert outcome.rescales == 2
    assert outcome.paused_s == pytest.approx(15.0)


def test_greedy_shares_equally_where_freetrain_follows_the_curves():
    # Four nodes, two jobs: one scales linearly, one gains nothing past a node.
    flat = ScalingCurve((0, 1, 8), (0.0, 10.0, 10.0))
    jobs = [
        ReplayJob("linear", LINEAR, 1, 8, 10.0, 5.0, 1e9, 0.0),
        ReplayJob("flat", flat, 1, 8, 10.0, 5.0, 1e9, 0.0),
    ]
    tl = timeline([(n, 0.0, 5000.0) for n in range(4)], t1=5000.0)
    equal = {o.name: o.node_seconds for o in Replay(tl, jobs, make_policy("greedy")).run().jobs}
    curves = {o.name: o.node_seconds for o in Replay(tl, jobs, make_policy("freetrain")).run().jobs}
    assert equal["linear"] == pytest.approx(equal["flat"]) == pytest.approx(2 * 5000.0)
    assert curves["linear"] == pytest.approx(3 * 5000.0)
    assert curves["flat"] == pytest.approx(5000.0)


class CheckedReplay(Replay):
    """A replay that checks, at every step of its clock, that no node is held by two jobs
    and that every held node is idle in the timeline for the whole step."""

    def _advance(self, to: float) -> None:
        seen: dict[str, str] = {}
        for name, run in self.active.items():
            for node in run.nodes:
                assert node not in seen, f"{node} held by {seen.get(node)} and {name}"
                seen[node] = name
                index = self.timeline.names.index(node)
                mine = self.timeline.node == index
                inside = (self.timeline.start[mine] <= self.now) & (self.timeline.end[mine] >= to)
                assert inside.any(), f"{node} held outside its idle interval at {self.now}"
        super()._advance(to)


@pytest.fixture(scope="module")
def summit_slice() -> tuple[IdleTimeline, list[ReplayJob]]:
    tl = summit_timeline(nodes=300, days=0.25)
    return tl, workload_jobs("imagenet-imgps-1001J", tl, limit=6)


@pytest.mark.parametrize("name", POLICIES)
def test_every_policy_keeps_the_invariants_on_summit(name, summit_slice):
    tl, jobs = summit_slice
    result = CheckedReplay(tl, jobs, make_policy(name, time_limit_s=2.0), seed=1).run()
    assert result.trained > 0
    assert 0.5 < result.efficiency <= 1.0 + 1e-9
    assert result.harvested_node_seconds <= result.idle_node_seconds + 1e-6
    for outcome in result.jobs:
        assert outcome.trained <= outcome.samples + 1e-6
        assert outcome.trained <= outcome.ideal + 1e-6
        if outcome.finished is not None:
            assert outcome.trained == pytest.approx(outcome.samples)
            assert outcome.finished >= outcome.submit


def test_same_seed_same_replay(summit_slice):
    tl, jobs = summit_slice
    runs = [Replay(tl, jobs, make_policy("malletrain"), seed=3).run() for _ in range(2)]
    assert runs[0].trained == runs[1].trained
    assert [j.finished for j in runs[0].jobs] == [j.finished for j in runs[1].jobs]


def test_at_most_max_jobs_run_and_they_are_admitted_in_submit_order():
    tl = timeline([(i, 0.0, 9000.0) for i in range(4)])
    jobs = [job(f"j{i}", samples=2000.0, submit=float(i)) for i in range(5)]
    result = Replay(tl, jobs, make_policy("freetrain"), max_jobs=2).run()
    admitted = [j.admitted for j in result.jobs]
    assert admitted == sorted(admitted)
    for k, outcome in enumerate(result.jobs):
        assert outcome.finished is not None
        start = outcome.admitted
        running = [o for o in result.jobs if o.admitted <= start < o.finished]
        assert len(running) <= 2, k
    assert math.isfinite(result.time_to_result_s)


def test_user_curves_reach_the_controller_only_when_the_policy_gives_them(summit_slice):
    tl, jobs = summit_slice
    given = Replay(tl, jobs, make_policy("freetrain"))
    learned = Replay(tl, jobs, make_policy("malletrain"))
    assert given._spec(jobs[0]).curve is jobs[0].curve
    assert learned._spec(jobs[0]).curve is None
    assert learned._spec(jobs[0]).scale_up_s is None


def test_skipping_decisions_that_cannot_change_changes_nothing(summit_slice, monkeypatch):
    from parsl_malleable.controller.core import ControllerCore

    tl, jobs = summit_slice
    policy = make_policy("freetrain", time_limit_s=5.0)
    with_rule = Replay(tl, jobs, policy)
    first = with_rule.run()
    # The rule has no public switch (it is an optimization users never turn off): the run
    # without it is the same controller whose "nothing changed" check always says no.
    monkeypatch.setattr(ControllerCore, "_same_as_last", lambda self, holdings, usable: False)
    second = Replay(tl, jobs, policy).run()
    assert with_rule.core.skipped > 0
    assert first.decisions + with_rule.core.skipped == second.decisions
    assert first.trained == pytest.approx(second.trained, rel=1e-9)
    assert [j.rescales for j in first.jobs] == [j.rescales for j in second.jobs]


def test_a_node_lost_during_the_start_pause_does_not_shorten_it():
    # Start on both nodes at 0: a 100 s start pause. Node 1 leaves at 50 s, a 5 s scale-down
    # pause, which used to replace the start's and let the job train from 55 s.
    slow_start = ReplayJob("j", LINEAR, 1, 8, 100.0, 5.0, 1_000.0, 0.0)
    tl = timeline([(0, 0.0, 5000.0), (1, 0.0, 50.0)])
    result = Replay(tl, [slow_start], make_policy("freetrain"), physics=FT).run()
    (outcome,) = result.jobs
    assert outcome.first_start == 0.0
    # 100 s paused (two nodes until 50 s, one after), then 1,000 samples at 10/s.
    assert outcome.finished == pytest.approx(200.0)
    assert outcome.paused_s == pytest.approx(100.0)
    assert outcome.rescales == 2


@pytest.mark.parametrize("name", POLICIES)
def test_no_policy_beats_the_offline_bound_when_a_node_leaves_during_a_start(name):
    # Node 1's interval is shorter than any start pause: the offline bound gives it nothing,
    # and a job that starts on it must not gain from losing it (it trained 100.5 % before).
    slow_start = ReplayJob("j", LINEAR, 1, 8, 100.0, 5.0, math.inf, 0.0)
    tl = timeline([(0, 0.0, 1000.0), (1, 0.0, 50.0)], t1=1000.0)
    result = Replay(tl, [slow_start], make_policy(name), physics=FT).run()
    assert result.offline_bound == pytest.approx(10.0 * 900.0)
    assert 0 < result.trained <= result.offline_bound * (1 + 1e-9)


# ----------------------------------------------------------- the runtime's physics


def test_runtime_a_first_start_pays_start_up_and_regroup_for_every_node():
    tl = timeline([(0, 0.0, 5000.0), (1, 0.0, 5000.0)])
    result = Replay(tl, [job()], make_policy("freetrain"), physics=RT).run()
    (outcome,) = result.jobs
    # Both nodes start 0-10 s, regroup 10-12 s, then 20 samples/s: 10,000 samples at 512 s.
    assert outcome.finished == pytest.approx(512.0)
    assert outcome.paused_s == pytest.approx(12.0)
    assert outcome.ideal == pytest.approx(20.0 * 512.0)
    # The offline bound's lead is a start under this physics (12 s), not the job's Tcup.
    assert result.offline_bound == pytest.approx(result.jobs[0].samples)


def test_runtime_the_job_trains_on_while_a_new_node_starts():
    tl = timeline([(0, 0.0, 2000.0), (1, 1000.0, 2000.0)], t1=2000.0)
    unlimited = job(samples=math.inf)
    (outcome,) = Replay(tl, [unlimited], make_policy("freetrain"), physics=RT).run().jobs
    # Node 0 trains from 12 s; node 1 starts at 1000 s while node 0 trains on, is up at
    # 1010 s, both regroup to 1012 s, then 20/s.
    assert outcome.trained == pytest.approx(10.0 * 988.0 + 10.0 * 10.0 + 20.0 * 988.0)
    assert outcome.paused_s == pytest.approx(12.0 + 2.0)


def test_runtime_a_reclaimed_node_pauses_the_rest_its_leave():
    tl = timeline([(0, 0.0, 5000.0), (1, 0.0, 200.0)])
    (outcome,) = Replay(tl, [job()], make_policy("freetrain"), physics=RT).run().jobs
    # 0-12 s start; 12-200 s at 20/s (3,760); node 1 taken back: 5 s leave; 6,240 at 10/s.
    assert outcome.finished == pytest.approx(205.0 + 624.0)
    assert outcome.paused_s == pytest.approx(17.0)


def test_runtime_a_node_lost_while_it_starts_costs_the_others_nothing():
    # Node 1 joins at 100 s and is taken back at 105 s, before it is up: node 0 never pauses.
    tl = timeline([(0, 0.0, 1000.0), (1, 100.0, 105.0)], t1=1000.0)
    unlimited = job(samples=math.inf)
    (outcome,) = Replay(tl, [unlimited], make_policy("freetrain"), physics=RT).run().jobs
    assert outcome.trained == pytest.approx(10.0 * (1000.0 - 12.0))


class _Mover:
    """A stand-in controller: starts ``first`` at once, and at ``when`` moves the job to
    ``then``: in one step, or (``restart``) by draining every node in one pass of the engine
    and starting the new set in the next pass at the same instant."""

    def __init__(self, first: set[str], then: set[str], when: float, restart: bool) -> None:
        self.held: set[str] = set()
        self.plan = [(0.0, first), (when, then)]
        self.restart = restart
        self.pending: set[str] | None = None
        self.name = ""
        self.decisions: list[object] = []

    def add_job(self, spec: JobSpec, now: float) -> None:
        self.name = spec.name

    def next_due(self, now: float) -> float | None:
        if self.pending is not None:
            return now
        return next((t for t, _ in self.plan if t > now), None)

    def step(self, now: float) -> list[StartRanks | DrainRanks]:
        if self.pending is not None:
            starts, self.pending = self.pending, None
            self.held = set(starts)
            return [StartRanks(self.name, v) for v in sorted(starts)]
        due = [want for t, want in self.plan if t <= now]
        if not self.name or not due or due[-1] == self.held:
            return []
        want = due[-1]
        if self.restart and self.held:
            drains = [DrainRanks(self.name, v, "move") for v in sorted(self.held)]
            self.held, self.pending = set(), set(want)
            return drains
        drains = [DrainRanks(self.name, v, "move") for v in sorted(self.held - want)]
        starts = [StartRanks(self.name, v) for v in sorted(want - self.held)]
        self.held = set(want)
        return [*drains, *starts]

    def __getattr__(self, name: str) -> object:
        return lambda *args, **kwargs: None


def _moved(restart: bool) -> float:
    tl = timeline([(n, 0.0, 1000.0) for n in range(3)], t1=1000.0)
    replay = Replay(tl, [job(samples=math.inf)], make_policy("freetrain"), physics=RT)
    replay.core = _Mover({"n0", "n1"}, {"n1", "n2"}, 500.0, restart)  # type: ignore[assignment]
    return replay.run().trained


def test_runtime_a_change_costs_what_its_node_states_say_however_it_is_split():
    # At 500 s the job moves from n0, n1 to n1, n2. In one step n1 stays: a 5 s leave, n1
    # trains 505-510 s while n2 starts, a 2 s regroup. Drained to nothing and started again at
    # the same instant it is a restart from its checkpoint: 10 s start-up and 2 s regroup
    # for every node. Splitting a change never makes it cheaper (it used to, under the old
    # rule, where a job drained to nothing paid nothing).
    before = 20.0 * (500.0 - 12.0)
    assert _moved(False) == pytest.approx(before + 10.0 * 5.0 + 20.0 * (500.0 - 12.0))
    assert _moved(True) == pytest.approx(before + 20.0 * (500.0 - 12.0))


def test_a_clock_that_stops_moving_is_an_error_not_a_hang(monkeypatch):
    from parsl_malleable.replay import engine

    monkeypatch.setattr(engine, "MAX_PASSES_AT_ONE_TIME", 50)
    tl = timeline([(0, 0.0, 5000.0)])
    run = Replay(tl, [job()], make_policy("ours"), physics=RT)
    # A controller that always says a decision is due now and never makes one.
    monkeypatch.setattr(run.core, "next_due", lambda now: now)
    monkeypatch.setattr(run.core, "step", lambda now: [])
    with pytest.raises(RuntimeError, match="clock has not moved"):
        run.run()
