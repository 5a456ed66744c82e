"""The exact optimum of small replay instances (replay/exact.py): right on instances small
enough to solve by hand, attained by the engine when a script plays its schedule, and never
beaten by a policy; the offline bound is never below it. Under both physics: the runtime's
(the default) and FreeTrain's."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parsl_malleable.allocate.curve import ScalingCurve
from parsl_malleable.controller.model import DrainRanks, JobSpec, StartRanks
from parsl_malleable.replay.bounds import offline_bound
from parsl_malleable.replay.engine import Replay
from parsl_malleable.replay.exact import (
    ExactOptimum,
    PauseRule,
    change_points,
    exact_optimum,
    random_instance,
)
from parsl_malleable.replay.idle import IdleTimeline
from parsl_malleable.replay.policies import POLICIES, make_policy
from parsl_malleable.replay.scavenger import scavenger_replay
from parsl_malleable.replay.workload import FREETRAIN_PHYSICS, Physics, ReplayJob

LINEAR = ScalingCurve((0, 1, 8), (0.0, 10.0, 80.0))
# Relative slack for floating point only: the MILP is solved to a zero gap.
REL = 1e-7
FT = FREETRAIN_PHYSICS


def timeline(rows: list[tuple[int, float, float]], t1: float) -> IdleTimeline:
    node, start, end = (np.array(x, dtype=float) for x in zip(*rows, strict=True))
    names = tuple(f"n{i}" for i in range(int(node.max()) + 1))
    return IdleTimeline.build(names, node.astype(int), start, end, "hand", 0.0, t1)


def job(
    name: str = "j",
    curve: ScalingCurve = LINEAR,
    *,
    lo: int = 1,
    hi: int = 8,
    up: float = 10.0,
    down: float = 30.0,
    submit: float = 0.0,
    startup: float = 20.0,
    regroup: float = 5.0,
    leave: float = 2.0,
) -> ReplayJob:
    return ReplayJob(
        name,
        curve,
        lo,
        hi,
        up,
        down,
        math.inf,
        submit,
        startup_s=startup,
        regroup_s=regroup,
        leave_s=leave,
    )


# ------------------------------------------------------- by hand: the runtime's physics


def test_runtime_a_first_start_pays_start_up_and_regroup():
    tl = timeline([(0, 0.0, 1000.0), (1, 0.0, 1000.0)], 1000.0)
    best = exact_optimum(tl, [job()])
    assert best.trained == pytest.approx(20.0 * (1000.0 - 25.0))
    assert best.physics == Physics()


def test_runtime_kept_nodes_train_while_a_new_one_starts():
    # One node from 0, a second from 500 s: the first trains alone (10/s) until the second is
    # up at 520 s, then both pause 5 s (the regroup) and train at 20/s.
    tl = timeline([(0, 0.0, 1000.0), (1, 500.0, 1000.0)], 1000.0)
    best = exact_optimum(tl, [job()])
    assert best.trained == pytest.approx(10.0 * 475.0 + 10.0 * 20.0 + 20.0 * 475.0)


def test_runtime_a_loss_pauses_the_rest_and_a_move_keeps_the_kept_training():
    # Two nodes to 500 s, then node 1 goes and node 2 comes. At 500 s the job keeps node 0:
    # a 2 s leave pause, then node 0 trains until node 2 is up (520 s), a 5 s regroup, two
    # nodes again. Keeping one node all along instead: 10/s less for 475 s, more than the move.
    tl = timeline([(0, 0.0, 1000.0), (1, 0.0, 500.0), (2, 500.0, 1000.0)], 1000.0)
    best = exact_optimum(tl, [job(hi=2)])
    first = 20.0 * (500.0 - 25.0)
    second = 10.0 * (20.0 - 2.0) + 20.0 * (500.0 - 25.0)
    assert best.trained == pytest.approx(first + second)


def test_runtime_refuses_a_leave_longer_than_a_start():
    tl = timeline([(0, 0.0, 1000.0)], 1000.0)
    with pytest.raises(ValueError, match="leave pause"):
        exact_optimum(tl, [job(leave=40.0)])


# ---------------------------------------------------- by hand: FreeTrain's physics


def test_one_node_one_job_trains_all_but_its_start():
    tl = timeline([(0, 0.0, 1000.0)], 1000.0)
    for pauses in ("split", "step"):
        best = exact_optimum(tl, [job()], pauses=pauses, physics=FT)
        assert best.trained == pytest.approx(10.0 * (1000.0 - 10.0))
        assert best.schedule == {"j": (frozenset({"n0"}),)}


def test_a_reclaimed_node_costs_the_cheaper_pause_only_when_changes_may_split():
    # Two nodes to 500 s, one after. Both nodes: 20/s after a 10 s start; at 500 s node 1 is
    # taken back. In one step the job pauses scale_down_s (30 s); drained to nothing and
    # restarted on node 0 it pauses scale_up_s (10 s). Either beats one node all along (9,900).
    tl = timeline([(0, 0.0, 1000.0), (1, 0.0, 500.0)], 1000.0)
    step = exact_optimum(tl, [job()], pauses="step", physics=FT)
    split = exact_optimum(tl, [job()], pauses="split", physics=FT)
    assert step.trained == pytest.approx(20.0 * 490.0 + 10.0 * 470.0)
    assert split.trained == pytest.approx(20.0 * 490.0 + 10.0 * 490.0)
    assert split.schedule["j"] == (frozenset({"n0", "n1"}), frozenset({"n0"}))


def test_a_one_node_job_moves_when_its_node_goes_and_pays_by_the_pause_rule():
    # Node 0 idle to 600 s, node 1 from 300 s; the job runs on exactly one node. It must move
    # to node 1 by 600 s: one step pays down + up (40 s), a drain then a start up only.
    tl = timeline([(0, 0.0, 600.0), (1, 300.0, 1000.0)], 1000.0)
    one = job(lo=1, hi=1)
    assert exact_optimum(tl, [one], pauses="step", physics=FT).trained == pytest.approx(
        10.0 * (1000 - 50)
    )
    assert exact_optimum(tl, [one], pauses="split", physics=FT).trained == pytest.approx(
        10.0 * (1000 - 20)
    )


def test_two_jobs_share_by_the_curves_not_equally():
    # The flat job gains nothing past one node (15/s); the linear one 10/s per node: 3 + 1.
    flat = ScalingCurve((0, 1, 8), (0.0, 15.0, 15.0))
    tl = timeline([(n, 0.0, 5000.0) for n in range(4)], 5000.0)
    best = exact_optimum(tl, [job("linear"), job("flat", flat)], physics=FT)
    assert best.trained == pytest.approx(45.0 * 4990.0)
    assert best.per_job == pytest.approx({"linear": 30.0 * 4990.0, "flat": 15.0 * 4990.0})
    assert [len(s[0]) for s in best.schedule.values()] == [3, 1]


def test_a_job_waits_for_its_submit_and_respects_min_nodes():
    # Submitted at 400 s and needing two nodes: of three idle nodes it takes two (max 2).
    tl = timeline([(n, 0.0, 1000.0) for n in range(3)], 1000.0)
    late = job(lo=2, hi=2, submit=400.0)
    best = exact_optimum(tl, [late], physics=FT)
    assert best.edges == (0.0, 400.0, 1000.0)
    assert best.trained == pytest.approx(20.0 * (600.0 - 10.0))
    assert best.schedule["j"][0] == frozenset()
    assert len(best.schedule["j"][1]) == 2


def test_a_pause_costs_the_rate_of_the_count_then_held():
    # Superlinear to two nodes (10, then 40/s). Node 2 idle to 400 s, node 1 from 400 s: two
    # nodes all along means moving one of them at 400 s, a pause at 40/s; split, it costs
    # scale_up_s (10 s), in one step down + up (40 s).
    curve = ScalingCurve((0, 1, 2), (0.0, 10.0, 40.0))
    tl = timeline([(0, 0.0, 1000.0), (1, 400.0, 1000.0), (2, 0.0, 400.0)], 1000.0)
    best = exact_optimum(tl, [job(curve=curve, hi=2)], physics=FT)
    two_all_along = 40.0 * (400.0 - 10.0) + 40.0 * (600.0 - 10.0)
    assert best.trained == pytest.approx(two_all_along)
    step = exact_optimum(tl, [job(curve=curve, hi=2)], pauses="step", physics=FT)
    # Still better than one node to 400 s, then a grow (10 x 390 + 40 x 590 = 27,500).
    assert step.trained == pytest.approx(max(40.0 * 390.0 + 40.0 * 560.0, 10 * 390 + 40 * 590))


def test_instances_outside_the_model_are_refused():
    tl = timeline([(0, 0.0, 1000.0), (1, 0.0, 20.0)], 1000.0)
    with pytest.raises(ValueError, match="shorter than the longest pause"):
        exact_optimum(tl, [job()], physics=FT)
    finite = ReplayJob("f", LINEAR, 1, 8, 10.0, 30.0, 5000.0, 0.0)
    with pytest.raises(ValueError, match="could finish"):
        exact_optimum(timeline([(0, 0.0, 1000.0)], 1000.0), [finite])
    with pytest.raises(ValueError, match="pauses"):
        exact_optimum(timeline([(0, 0.0, 1000.0)], 1000.0), [job()], pauses="sum")  # type: ignore[arg-type]


# ------------------------------------------------- the engine attains the optimum


class _Script:
    """A stand-in for the controller that plays an optimal schedule: at every step it moves
    each job to its node set for the current interval. With ``pauses="split"`` a change is a
    drain of all the job's nodes, then a start in a second step at the same instant (a change
    that only loses nodes drains just those when ``scale_down_s`` is the cheaper pause)."""

    def __init__(self, best: ExactOptimum, jobs: list[ReplayJob]) -> None:
        self.best = best
        self.jobs = {j.name: j for j in jobs}
        self.held: dict[str, set[str]] = {name: set() for name in best.schedule}
        self.waiting: dict[str, set[str]] = {}  # job -> nodes to start at the next step
        self.again = False
        self.admitted: set[str] = set()
        self.taken: set[str] = set()  # jobs whose node the engine took back in this pass
        self.decisions: list[object] = []

    def _want(self, name: str, now: float) -> set[str]:
        edges = self.best.edges
        k = int(np.searchsorted(edges, now, side="right")) - 1
        return set(self.best.schedule[name][min(k, len(edges) - 2)])

    def next_due(self, now: float) -> float | None:
        # A new pass of the engine's loop: the starts held back last pass may go now.
        due, self.again = (now if self.again else None), False
        self.taken.clear()
        return due

    def step(self, now: float) -> list[StartRanks | DrainRanks]:
        actions: list[StartRanks | DrainRanks] = []
        if self.waiting and not self.again:
            for name, nodes in self.waiting.items():
                actions += [StartRanks(name, v) for v in sorted(nodes)]
                self.held[name] |= nodes
            self.waiting = {}
            return actions
        if self.again:
            return actions  # the same pass: the starts wait for the next one
        starts: list[StartRanks | DrainRanks] = []
        for name, held in self.held.items():
            want = self._want(name, now) if name in self.admitted else set()
            loses = bool(held - want) or name in self.taken  # in this pass of the engine
            gains = want - held
            if not loses and not gains:
                continue
            down, up = self.jobs[name].scale_down_s, self.jobs[name].scale_up_s
            split = self.best.pauses == "split" and self.best.physics.model == "freetrain"
            if split and loses and want and (gains or up < down):
                # Drained to nothing the job pays no pause; its start next pass pays up.
                actions += [DrainRanks(name, v, "script") for v in sorted(held)]
                held.clear()
                self.waiting[name] = want
                self.again = True
                continue
            actions += [DrainRanks(name, v, "script") for v in sorted(held - want)]
            held &= want
            # Every drain goes first: the engine does not check that a node is free.
            starts += [StartRanks(name, v) for v in sorted(gains)]
            held |= gains
        return actions + starts

    # The engine's other calls: the script needs only which jobs are in and which nodes left.
    def add_job(self, spec: JobSpec, now: float) -> None:
        self.admitted.add(spec.name)

    def block_gone(self, name: str, now: float) -> None:
        for job, held in self.held.items():
            if name in held:
                held.discard(name)
                self.taken.add(job)

    def __getattr__(self, name: str) -> object:
        return lambda *args, **kwargs: None


class ScriptedReplay(Replay):
    def __init__(self, tl: IdleTimeline, jobs: list[ReplayJob], best: ExactOptimum) -> None:
        super().__init__(tl, jobs, make_policy("freetrain"), physics=best.physics)
        self.core = _Script(best, jobs)  # type: ignore[assignment]


def _play(tl: IdleTimeline, jobs: list[ReplayJob], pauses: PauseRule, physics: Physics) -> None:
    best = exact_optimum(tl, jobs, pauses=pauses, physics=physics)
    result = ScriptedReplay(tl, jobs, best).run()
    played = {o.name: o.trained for o in result.jobs}
    assert played == pytest.approx(best.per_job, rel=REL, abs=1e-6)


@pytest.mark.parametrize(("pauses", "physics"), [("split", Physics()), ("split", FT), ("step", FT)])
def test_the_engine_trains_the_optimum_when_a_script_plays_its_schedule(pauses, physics):
    # The MILP prices exactly what the engine charges: its optimum is attained, not just a bound.
    rng = np.random.default_rng(7)
    played = 0
    for _ in range(25):
        tl, jobs = random_instance(rng)
        _play(tl, jobs, pauses, physics)
        played += 1
    assert played == 25


# --------------------------------------------------- no policy above the optimum


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(seed=st.integers(0, 2**32 - 1))
def test_no_policy_beats_the_exact_optimum_nor_it_the_offline_bound(seed):
    tl, jobs = random_instance(np.random.default_rng(seed))
    # Each seed under one physics, in turn: both are covered, in the time of one.
    physics = Physics() if seed % 2 else FT
    best = exact_optimum(tl, jobs, physics=physics)
    bound = offline_bound(tl, physics.bound_jobs(jobs), tl.t1)
    if physics == FT:
        step = exact_optimum(tl, jobs, pauses="step", physics=FT)
        assert step.trained <= best.trained * (1 + REL) + 1e-6
    assert best.trained <= bound * (1 + REL) + 1e-6
    for policy in POLICIES:
        result = Replay(tl, jobs, make_policy(policy), physics=physics).run()
        assert result.trained <= best.trained * (1 + REL) + 1e-6, (policy, seed)
        assert result.offline_bound == pytest.approx(bound)
    # The scavenger's one-node jobs are schedules the engine could run, each start costing at
    # least a start under this physics (its own start-up set to that, the rest only costs).
    lead = [replace(j, startup_s=physics.costs(j).lead_s) for j in jobs]
    scavenger = scavenger_replay(tl, lead)
    assert scavenger.trained <= best.trained * (1 + REL) + 1e-6


def test_solving_the_optimum_leaves_the_allocator_working():
    # HiGHS keeps one thread pool per process; a solve with another thread count used to make
    # every later allocator solve fail at once (and fall back to the greedy rule).
    flat = ScalingCurve((0, 1, 8), (0.0, 15.0, 15.0))
    tl = timeline([(n, 0.0, 5000.0) for n in range(4)], 5000.0)
    jobs = [job("linear"), job("flat", flat)]
    best = exact_optimum(tl, jobs, physics=FT)
    result = Replay(tl, jobs, make_policy("freetrain"), physics=FT).run()
    assert result.decisions > 0
    assert result.fallbacks == 0
    assert result.trained == pytest.approx(best.trained)


def test_random_instances_cover_what_the_model_must_price():
    # The property test above means little unless its instances reclaim held nodes, submit
    # jobs late and make the two pause rules differ.
    rng = np.random.default_rng(0)
    differ = late = gaps = 0
    for _ in range(30):
        tl, jobs = random_instance(rng)
        late += any(j.submit > tl.t0 for j in jobs)
        gaps += len(change_points(tl, jobs)) > 3
        split = exact_optimum(tl, jobs, physics=FT)
        step = exact_optimum(tl, jobs, pauses="step", physics=FT)
        differ += split.trained > step.trained * (1 + 1e-6)
    assert differ >= 5 and late >= 5 and gaps >= 25
