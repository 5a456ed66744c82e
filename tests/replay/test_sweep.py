"""A pruned search replayed (replay/sweep.py, replay/curves.py): the curves, the engine's and the
scavenger's marks, pruning by the campaign's own SearchRun, nodes by promise, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from parsl_malleable.allocate.curve import ScalingCurve
from parsl_malleable.campaign.search_memory import memory_search
from parsl_malleable.controller.core import ControllerCore
from parsl_malleable.errors import ConfigError
from parsl_malleable.replay.curves import SPACE, CurveFamily
from parsl_malleable.replay.engine import Replay
from parsl_malleable.replay.idle import IdleTimeline
from parsl_malleable.replay.policies import make_policy
from parsl_malleable.replay.scavenger import scavenger_replay
from parsl_malleable.replay.sweep import SweepSetup, sweep_replay
from parsl_malleable.replay.workload import ReplayJob

LINEAR = ScalingCurve((0, 1, 8), (0.0, 10.0, 80.0))
ASHA = {"type": "asha", "min_resource": 1, "reduction_factor": 3}


def timeline(nodes: int, t1: float = 200_000.0) -> IdleTimeline:
    """``nodes`` nodes idle from 0 to ``t1``."""
    node = np.arange(nodes)
    start, end = np.zeros(nodes), np.full(nodes, t1)
    return IdleTimeline.build(tuple(f"n{i}" for i in node), node, start, end, "hand", 0.0, t1)


def job(name: str, samples: float = 1e9, max_nodes: int = 8) -> ReplayJob:
    return ReplayJob(name, LINEAR, 1, max_nodes, 10.0, 5.0, samples, 0.0)


def setup(trials: int = 9, epochs: int = 3, seed: int = 0) -> SweepSetup:
    # An epoch is 1,000 samples: 100 s on one node.
    return SweepSetup(trials, job("t"), 0.0, epochs, 1000.0, CurveFamily(seed))


def searcher(trials: int = 9, seed: int = 0, promise: bool = True):
    return lambda: memory_search(
        "sweep",
        SPACE,
        trials,
        pruner=ASHA,
        sampler={"type": "random", "seed": seed},
        nodes_by_promise=promise,
    )


def decisions(result) -> list[tuple[str, str, int, float | None]]:
    return [(t.name, t.state, len(t.reports), t.ended) for t in result.trials]


# --------------------------------------------------------------------------- curves


def test_curves_are_deterministic_and_configs_differ():
    rng = np.random.default_rng(3)
    configs = [
        {"lr": 10 ** rng.uniform(-4, 0), "weight_decay": 10 ** rng.uniform(-6, -2)}
        for _ in range(300)
    ]
    family = CurveFamily(seed=7)
    curves = [family.curve(c) for c in configs]
    assert curves == [CurveFamily(seed=7).curve(c) for c in configs]
    assert curves != [CurveFamily(seed=8).curve(c) for c in configs]
    finals = np.array([c.value(27) for c in curves if not c.diverged])
    diverged = sum(c.diverged for c in curves)
    # Some diverge, many are mediocre, a few are good: a real spread, not one curve.
    assert 0.05 < diverged / len(curves) < 0.3
    assert finals.max() > 0.65 and np.median(finals) < finals.max() - 0.05
    assert (finals >= 0.99 * finals.max()).sum() < 0.05 * len(finals)
    # Curves rise and saturate; some cross (a slow starter ends above a fast one).
    for c in curves[:20]:
        values = [c.value(e) for e in range(1, 28)]
        assert values == sorted(values) and values[-1] <= c.asymptote
    live = [c for c in curves if not c.diverged]
    assert any(
        a.value(1) > b.value(1) and a.value(27) < b.value(27) for a in live[:30] for b in live[:30]
    )


def test_reports_are_noisy_and_repeatable():
    family = CurveFamily(seed=1, noise=0.01)
    curve = family.curve({"lr": 0.05, "weight_decay": 5e-5})
    first = [family.report(curve, 4, e) for e in range(1, 10)]
    assert first == [family.report(curve, 4, e) for e in range(1, 10)]
    assert first != [family.report(curve, 5, e) for e in range(1, 10)]
    errors = [r - curve.value(e) for e, r in enumerate(first, start=1)]
    assert 0 < max(abs(x) for x in errors) < 0.05


def test_bad_curve_inputs_are_named():
    with pytest.raises(ConfigError, match="weight_decay missing"):
        CurveFamily().curve({"lr": 0.1})
    with pytest.raises(ConfigError, match="finite and > 0"):
        CurveFamily().curve({"lr": -1.0, "weight_decay": 1e-4})
    with pytest.raises(ConfigError, match="noise"):
        CurveFamily(noise=-0.1)
    with pytest.raises(ConfigError, match="epoch 1"):
        CurveFamily().curve({"lr": 0.05, "weight_decay": 5e-5}).value(0)


# ---------------------------------------------------------------------------- marks


class StopFirst:
    """Marks every 1,000 samples; stops job ``a`` at its first."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, float]] = []

    def next_mark(self, name: str) -> float:
        return 1000.0 * (1 + sum(n == name for n, _ in self.seen))

    def reached(self, name: str, now: float) -> bool:
        self.seen.append((name, now))
        return name == "a"


@pytest.mark.parametrize("policy", ["freetrain", "scavenger"])
def test_a_stopped_job_frees_its_node_at_once(policy: str):
    """One node: ``a`` starts, is stopped at its first mark (10 s start + 100 s), and ``b``
    gets the node at that instant (FreeTrain's physics: a start pauses the job's 10 s Tcup;
    the scavenger's start-up set to the same, and no scheduling delay)."""
    tl, jobs, marks = timeline(1), [job("a", 5000.0), job("b", 2000.0)], StopFirst()
    if policy == "scavenger":
        stopped: dict[str, float] = {}
        result = scavenger_replay(
            tl, jobs, marks=marks, stopped=stopped, startup_s=10.0, schedule_delay_s=0.0
        )
    else:
        replay = Replay(
            tl, jobs, make_policy(policy), max_jobs=None, marks=marks, physics="freetrain"
        )
        result = replay.run()
        stopped = replay.stopped
    a, b = sorted(result.jobs, key=lambda j: j.name)
    assert stopped == {"a": pytest.approx(110.0)}
    assert a.finished is None and a.trained == pytest.approx(1000.0)
    assert a.node_seconds == pytest.approx(110.0)
    assert b.first_start == pytest.approx(110.0)
    assert b.finished == pytest.approx(110.0 + 10.0 + 200.0)
    assert [n for n, _ in marks.seen] == ["a", "b", "b"]


# ---------------------------------------------------------------------------- sweeps


@pytest.mark.parametrize("policy", ["ours", "freetrain", "scavenger"])
def test_pruned_trials_end_early_and_read_pruned(policy: str):
    result = sweep_replay(timeline(3), searcher(), setup(), policy)
    pruned = [t for t in result.trials if t.state == "pruned"]
    done = [t for t in result.trials if t.state == "done"]
    assert pruned and done and len(pruned) + len(done) == 9
    outcomes = {j.name: j for j in result.replay.jobs}
    # ASHA judges at epochs 1 and 3 (rungs 0 and 1): the last epoch is a rung too.
    assert any(len(t.reports) < 3 for t in pruned)
    for t in pruned:
        assert t.ended == t.reports[-1][0] and t.reports[-1][1] in (1, 3)
        assert outcomes[t.name].finished is None
        assert outcomes[t.name].trained == pytest.approx(1000.0 * len(t.reports))
    for t in done:
        assert len(t.reports) == 3 and outcomes[t.name].finished == pytest.approx(t.ended)
    # The search ended when the last trial did; pruning saved node-time against 9 x 3 epochs.
    assert result.search_s == pytest.approx(max(t.ended for t in result.trials))
    assert result.samples < 9 * 3 * 1000.0
    assert 0 < result.pruned_node_hours < result.node_hours
    assert result.time_to_best_s is not None and result.time_to_best_s <= result.search_s


def test_the_same_seed_gives_the_same_decisions():
    # A solver limit that never binds here: the decisions do not depend on the machine's load.
    def sweep(seed: int):
        return sweep_replay(
            timeline(3), searcher(seed=seed), setup(seed=seed), "freetrain", time_limit_s=10.0
        )

    first, again, other = sweep(4), sweep(4), sweep(5)
    assert decisions(first) == decisions(again)
    assert [t.params for t in first.trials] == [t.params for t in again.trials]
    assert [t.params for t in first.trials] != [t.params for t in other.trials]


def test_promises_are_given_to_the_core_only_when_on(monkeypatch: pytest.MonkeyPatch):
    calls: list[tuple[str, float, bool]] = []
    original = ControllerCore.revalue

    def spy(self, name: str, now: float, *, priority: float, grow: bool) -> bool:
        calls.append((name, priority, grow))
        return original(self, name, now, priority=priority, grow=grow)

    monkeypatch.setattr(ControllerCore, "revalue", spy)
    on = sweep_replay(timeline(3), searcher(), setup(), "freetrain")
    weights = {p for _, p, _ in calls}
    assert on.revalued > 0 and 3.0 in weights
    assert weights <= {1.0, 3.0, 9.0}  # reduction_factor ** rungs passed
    calls.clear()
    off = sweep_replay(timeline(3), searcher(promise=False), setup(), "freetrain")
    assert off.revalued == 0 and {(p, g) for _, p, g in calls} <= {(1.0, True)}


def test_bad_sweeps_are_refused_with_a_clear_error():
    with pytest.raises(ConfigError, match="trials=0: Input should be greater than or equal to 1"):
        SweepSetup(0, job("t"), 0.0)
    with pytest.raises(ConfigError, match="epochs=0: Input should be greater than or equal to 1"):
        SweepSetup(3, job("t"), 0.0, epochs=0)
    with pytest.raises(ConfigError, match="trials=True"):
        SweepSetup(True, job("t"), 0.0)
    with pytest.raises(ConfigError, match="samples_per_epoch"):
        SweepSetup(3, job("t"), 0.0, samples_per_epoch=math.nan)
    with pytest.raises(ConfigError, match=r"search 'sweep': pruner.*'asha'"):
        memory_search("sweep", SPACE, 3, pruner={"type": "sha"})
    with pytest.raises(ConfigError, match="reduction_factor"):
        memory_search("sweep", SPACE, 3, pruner={"type": "asha", "reduction_factor": 1})
    with pytest.raises(ConfigError, match="space"):
        memory_search("sweep", {}, 3)
    with pytest.raises(ConfigError, match="trials"):
        memory_search("sweep", SPACE, 0)
