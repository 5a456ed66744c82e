"""ControllerCore with a hand-driven clock: decisions, orders and their invariants."""

from __future__ import annotations

import pytest

from parsl_malleable.allocate.curve import ScalingCurve
from parsl_malleable.controller import ControllerCore, CoreSettings, DrainRanks, JobSpec
from parsl_malleable.controller.model import StartRanks
from parsl_malleable.controller.policy import PolicySettings
from parsl_malleable.errors import ConfigError

FLAT_AFTER_ONE = ScalingCurve((1, 2), (100.0, 110.0))  # a second node adds little
LINEAR = ScalingCurve((1, 4), (100.0, 400.0))


def core(**settings: object) -> ControllerCore:
    options = {"debounce_s": 0.5, "max_delay_s": 2.0, "drain_margin_s": 30.0, **settings}
    return ControllerCore(CoreSettings(**options))  # type: ignore[arg-type]


def add_nodes(c: ControllerCore, now: float, count: int, block: str = "b1", **block_kw) -> None:
    c.block_update(block, now, **block_kw)
    for i in range(count):
        c.node_ready(f"{block}-n{i}", block, now, name=f"{block}-n{i}")


def holders(c: ControllerCore) -> dict[str, str | None]:
    return {n.node_id: n.job for n in c.nodes.values()}


def test_two_jobs_split_the_nodes_as_the_allocator_decides():
    c = core()
    add_nodes(c, 0.0, 2)
    c.add_job(JobSpec("a", 1, 2, curve=FLAT_AFTER_ONE), 0.0)
    c.add_job(JobSpec("b", 1, 2, curve=FLAT_AFTER_ONE), 0.0)
    assert c.step(0.1) == []  # debounced: events are 0.1 s old
    actions = c.step(0.6)
    decision = c.decisions[-1]
    assert sorted(decision.nodes_of("a") + decision.nodes_of("b")) == ["b1-n0", "b1-n1"]
    assert len(decision.nodes_of("a")) == len(decision.nodes_of("b")) == 1
    assert sorted(actions, key=str) == sorted(
        [StartRanks(job, node) for node, job in decision.owner.items()], key=str
    )
    assert sorted(holders(c).values()) == ["a", "b"]
    assert c.step(0.7) == []  # nothing changed: no order repeated


def test_a_node_moves_only_after_its_ranks_have_left():
    c = core()
    add_nodes(c, 0.0, 2)
    c.add_job(JobSpec("a", 1, 2, curve=LINEAR), 0.0)
    c.step(1.0)
    assert set(holders(c).values()) == {"a"}
    c.add_job(JobSpec("b", 1, 1, curve=LINEAR, priority=10.0), 2.0)
    actions = c.step(3.0)
    drained = [a for a in actions if isinstance(a, DrainRanks)]
    assert len(drained) == 1 and drained[0].job == "a" and "given to b" in drained[0].reason
    node = drained[0].node
    # Until a's ranks report that they left, b gets nothing there: never two jobs on a node.
    assert not [a for a in c.step(3.1) if isinstance(a, StartRanks)]
    assert c.nodes[node].job == "a"
    c.ranks_left(node, 4.0)
    assert c.step(4.1) == [StartRanks("b", node)]


def test_a_yielding_block_drains_at_once_and_gets_nothing_new():
    c = core()
    add_nodes(c, 0.0, 2, block="b1")
    add_nodes(c, 0.0, 1, block="b2")
    c.add_job(JobSpec("a", 1, 4, curve=LINEAR), 0.0)
    c.step(1.0)
    assert list(holders(c).values()) == ["a"] * 3
    c.block_update("b1", 5.0, yielding=True, reason="yields to a native job")
    actions = c.step(5.0)  # no debounce for the drain: enforcement sees unusable nodes now
    assert {a.node for a in actions} == {"b1-n0", "b1-n1"}
    assert all(isinstance(a, DrainRanks) and a.reason == "yields to a native job" for a in actions)
    for node in ("b1-n0", "b1-n1"):
        c.ranks_left(node, 6.0)
    c.step(8.0)
    assert holders(c) == {"b1-n0": None, "b1-n1": None, "b2-n0": "a"}
    assert c.decisions[-1].nodes_of("a") == ["b2-n0"]


def test_ranks_leave_drain_margin_before_the_deadline():
    c = core(drain_margin_s=30.0)
    add_nodes(c, 0.0, 1, deadline=100.0)
    c.add_job(JobSpec("a", 1, 1), 0.0)
    c.step(1.0)
    assert holders(c) == {"b1-n0": "a"}
    assert c.step(69.0) == []
    actions = c.step(70.0)
    assert actions == [DrainRanks("a", "b1-n0", "deadline near")]


def test_windows_steer_a_short_job_to_the_longer_lived_nodes():
    # Two nodes, one ends in 10 minutes and one in an hour; one job fits one node: it must take
    # the one that lasts (a start costs 60 s, so the short window is worth less).
    c = core(policy=PolicySettings(scale_up_s=60.0))
    add_nodes(c, 0.0, 1, block="short", deadline=600.0)
    add_nodes(c, 0.0, 1, block="long", deadline=3600.0)
    c.add_job(JobSpec("a", 1, 1, curve=LINEAR), 0.0)
    c.step(1.0)
    assert holders(c) == {"short-n0": None, "long-n0": "a"}


def test_a_lost_node_triggers_a_new_decision_and_below_minimum_replans():
    c = core()
    add_nodes(c, 0.0, 3)
    c.add_job(JobSpec("a", 2, 2, curve=LINEAR), 0.0)
    c.step(1.0)
    held = [n for n, j in holders(c).items() if j == "a"]
    assert len(held) == 2
    c.node_gone(held[0], 2.0)
    actions = c.step(3.0)
    # a holds one node, below its minimum: planned afresh, it gets two nodes again.
    decision = c.decisions[-1]
    assert len(decision.nodes_of("a")) == 2 and held[1] in decision.nodes_of("a")
    assert [a for a in actions if isinstance(a, StartRanks)] == [
        StartRanks("a", n) for n in decision.nodes_of("a") if n != held[1]
    ]


def test_measured_throughput_replaces_the_prior_and_ended_jobs_free_their_nodes():
    c = core(redecide_s=10.0)
    add_nodes(c, 0.0, 2)
    c.add_job(JobSpec("a", 1, 2), 0.0)
    c.step(1.0)
    assert c.decisions[-1].terms["a"].curve_source == "prior"
    c.report_throughput("a", 2, 180.0)
    c.step(5.0)
    assert len(c.decisions) == 1  # measurements alone wait for redecide_s
    c.step(11.5)
    assert len(c.decisions) == 2
    assert c.decisions[-1].terms["a"].curve_source == "profiled"
    c.end_job("a", 12.0)
    actions = c.step(13.0)
    assert {a.reason for a in actions if isinstance(a, DrainRanks)} == {"job ended"}
    assert c.state()["jobs"] == {}


def test_bad_jobs_and_settings_are_refused_by_name():
    with pytest.raises(ConfigError, match="min_nodes=3, max_nodes=2"):
        JobSpec("x", 3, 2)
    with pytest.raises(ConfigError, match="JobSpec 'x': priority=0: Input should be greater"):
        JobSpec("x", priority=0)
    with pytest.raises(ConfigError, match="JobSpec 'x': max_nodes=True: "):
        JobSpec("x", max_nodes=True)  # not a count of 1
    with pytest.raises(ConfigError, match=r"CoreSettings: debounce_s=nan: .*finite"):
        CoreSettings(debounce_s=float("nan"))
    with pytest.raises(ConfigError, match="curve_model='pts': Input should be 'gp' or 'points'"):
        PolicySettings(curve_model="pts")
    with pytest.raises(ConfigError, match="solver 'glpk' is not one of"):
        PolicySettings(solver="glpk")
    with pytest.raises(ConfigError, match="objective 'speed' is not one of"):
        PolicySettings(objective="speed")
    with pytest.raises(ConfigError, match=r"threads=1\.5: .*fractional"):
        PolicySettings(threads=1.5)
    c = core()
    c.add_job(JobSpec("x"), 0.0)
    with pytest.raises(ConfigError, match="already registered"):
        c.add_job(JobSpec("x"), 0.0)


def test_block_diff_drops_a_block_only_when_its_source_stops_listing_it():
    from parsl_malleable.controller.blocks import BlockDiff, BlockView

    c = core()
    diff = BlockDiff()
    # Agents connect from block 0/42 before the provider's next poll lists it as running.
    c.node_ready("pool-a", "0/42", 0.0, name="n1")
    diff.apply([], c, 1.0)
    assert "pool-a" in c.nodes
    view = BlockView("0/42", "0", ("n1",), deadline=500.0, yielding=False)
    diff.apply([view], c, 2.0)
    assert c.blocks["0/42"].deadline == 500.0 and "pool-a" in c.nodes
    diff.apply([], c, 3.0)  # listed before, not now: the block ended
    assert "pool-a" not in c.nodes and "0/42" not in c.blocks


def test_a_window_source_shortens_the_plan_of_nodes_without_a_deadline():
    asked: list[list[str]] = []

    def windows(nodes, now):
        asked.append(list(nodes))
        return {n: 0.0 for n in nodes if n.endswith("n0")}  # n0's idle window is over

    c = ControllerCore(CoreSettings(debounce_s=0.0, max_delay_s=0.0), windows=windows)
    add_nodes(c, 0.0, 2)
    c.add_job(JobSpec("a", 1, 2, curve=LINEAR), 0.0)
    c.step(0.0)
    assert sorted(asked[-1]) == ["b1-n0", "b1-n1"]
    assert c.decisions[-1].nodes_of("a") == ["b1-n1"]


def test_next_due_says_when_the_debounced_decision_falls_due():
    c = core(debounce_s=0.5, max_delay_s=2.0, redecide_s=30.0)
    assert c.next_due(0.0) is None
    add_nodes(c, 0.0, 1, deadline=1000.0)
    assert c.next_due(0.2) == pytest.approx(0.5)
    c.step(0.5)
    # Nothing pending: the next thing due is the drain margin before the block's deadline.
    assert c.next_due(1.0) == pytest.approx(1000.0 - 30.0)


def test_a_clock_that_jumps_to_next_due_gets_the_redecision_there():
    # A time whose sum with 30 s rounds so that (t + 30) - t < 30: the replay jumped to
    # next_due, step found nothing due, and the clock stayed there forever (CI: a 0.5-day
    # replay that never ended).
    t = 8164.3737056069085
    assert (t + 30.0) - t < 30.0
    c = core(debounce_s=0.0, max_delay_s=0.0, redecide_s=30.0)
    add_nodes(c, t, 1)
    c.add_job(JobSpec("a", 1, 1, curve=LINEAR), t)
    c.step(t)
    assert [d.time for d in c.decisions] == [t]
    c.report_throughput("a", 1, 90.0)
    due = c.next_due(t + 1.0)
    assert due == t + 30.0
    c.step(due)
    assert len(c.decisions) == 2
    assert c.next_due(due) is None


def test_completion_objective_favours_the_job_nearest_its_end():
    c = ControllerCore(
        CoreSettings(debounce_s=0.0, max_delay_s=0.0, policy=PolicySettings(objective="completion"))
    )
    add_nodes(c, 0.0, 1)
    c.add_job(JobSpec("far", 1, 1, curve=LINEAR, samples=1e6), 0.0)
    c.add_job(JobSpec("near", 1, 1, curve=LINEAR, samples=1e6), 0.0)
    c.report_progress("near", 9e5)
    c.step(0.0)
    assert c.decisions[-1].nodes_of("near") == ["b1-n0"]


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        ({"objective": "fastest"}, "objective"),
        ({"curve_model": "spline"}, "curve_model"),
    ],
)
def test_policy_settings_refuse_unknown_names(settings, says):
    with pytest.raises(ConfigError, match=says):
        PolicySettings(**settings)


def test_job_spec_refuses_bad_costs_and_totals():
    with pytest.raises(ConfigError, match="scale_up_s"):
        JobSpec("a", scale_up_s=-1.0)
    with pytest.raises(ConfigError, match="samples"):
        JobSpec("a", samples=0.0)


def test_node_events_that_cannot_change_the_answer_make_no_new_decision():
    c = ControllerCore(CoreSettings(debounce_s=0.0, max_delay_s=0.0))
    add_nodes(c, 0.0, 4)
    c.add_job(JobSpec("a", 1, 2, curve=LINEAR), 0.0)
    c.step(0.0)
    c.step(0.0)  # starts on the two nodes it was given
    assert len(c.decisions) == 1 and len(c.decisions[-1].nodes_of("a")) == 2
    spare = next(n for n in c.nodes if n not in c.decisions[-1].owner)
    c.node_gone(spare, 1.0)  # nobody's node leaves
    c.node_ready("late", "b1", 2.0)  # the job is at its maximum: nobody may take it
    c.step(3.0)
    assert len(c.decisions) == 1 and c.skipped == 2 - 1  # both events, one due decision
    held = c.decisions[-1].nodes_of("a")[0]
    c.node_gone(held, 4.0)  # the job's own node leaves: decide again
    c.step(5.0)
    assert len(c.decisions) == 2
    assert len(c.decisions[-1].nodes_of("a")) == 2


def test_completion_weights_rank_by_remaining_work_then_arrival():
    from parsl_malleable.controller.policy import completion_weights

    jobs = [JobSpec(n, samples=1000.0) for n in ("first", "second", "short")]
    weights = completion_weights(
        jobs, {"short": 900.0}, {"first": 1.0, "second": 1.0, "short": 1.0}, decay=0.5
    )
    # short has 100 samples of work left, the others 1000 each (ties: arrival order)
    assert weights == {"short": 1.0, "first": 0.5, "second": 0.25}
