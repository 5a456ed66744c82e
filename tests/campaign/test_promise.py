"""Nodes by promise: a trial's weight follows the rungs it passed, the prediction of a pruning
agrees with Optuna's own decision, and the controller keeps a trial that may not grow at its
size while a promoted one grows."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import optuna
import pytest
from pydantic import ValidationError

from parsl_malleable.allocate.curve import ScalingCurve
from parsl_malleable.campaign.promise import EQUAL, Promise, promise, promotable
from parsl_malleable.campaign.search import SearchBook
from parsl_malleable.campaign.spec import Campaign
from parsl_malleable.controller import ControllerCore, CoreSettings, JobSpec
from parsl_malleable.elastic.metric_book import MetricRecord

LINEAR = ScalingCurve((1, 4), (100.0, 400.0))
CONCAVE = ScalingCurve((1, 2, 4), (100.0, 190.0, 360.0))  # two one-node jobs beat one of two


def study(reduction: int, direction: str) -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    pruner = optuna.pruners.SuccessiveHalvingPruner(min_resource=2, reduction_factor=reduction)
    return optuna.create_study(direction=direction, pruner=pruner)


@pytest.mark.parametrize(("reduction", "direction"), [(3, "maximize"), (2, "minimize")])
def test_the_prediction_is_optunas_decision_at_the_next_rung(reduction: int, direction: str):
    """Each trial reports a value a step before a rung (no judgement), the promise predicts
    from it, then the same value is reported at the rung's step: Optuna prunes exactly where
    the promise said the trial would not grow, at rung 0 and, for the promoted ones, at 1."""
    rng = random.Random(reduction)
    s = study(reduction, direction)
    maximize = direction == "maximize"
    checked = {0: 0, 1: 0}
    for _ in range(40):
        trial = s.ask()
        alive = True
        for rung, step in enumerate((2, 2 * reduction)):  # the rungs of min_resource 2
            value = rng.random()
            trial.report(value, step - 1)  # before the rung: no judgement
            frozen = s.get_trials(deepcopy=False)
            said = promise(frozen[trial.number], frozen, "asha", reduction, maximize)
            assert said.rung == rung and said.weight == reduction**rung
            trial.report(value, step)
            pruned = trial.should_prune()
            assert said.grow == (not pruned), (rung, value)
            checked[rung] += 1
            if pruned:
                s.tell(trial, state=optuna.trial.TrialState.PRUNED)
                alive = False
                break
        if alive:
            s.tell(trial, 0.5)
    assert checked[0] == 40 and checked[1] >= 5  # both rungs were really exercised


def test_promotable_keeps_the_best_share_and_the_first_one():
    assert promotable(0.9, [0.9], 3, maximize=True)  # alone at its rung: promoted
    assert not promotable(0.5, [0.9, 0.5], 3, maximize=True)  # fewer than 3: only the best
    assert promotable(0.8, [0.1, 0.2, 0.3, 0.4, 0.9, 0.8], 3, maximize=True)  # top 2 of 6
    assert not promotable(0.4, [0.1, 0.2, 0.3, 0.4, 0.9, 0.8], 3, maximize=True)
    assert promotable(0.1, [0.1, 0.2, 0.3], 3, maximize=False)


def test_pruners_without_rungs_weigh_every_trial_the_same():
    s = study(3, "maximize")
    trial = s.ask()
    trial.report(0.1, 5)
    frozen = s.get_trials(deepcopy=False)
    for kind in ("median", "none"):
        assert promise(frozen[0], frozen, kind, None, True) == EQUAL
    # hyperband counts rungs (Optuna's default reduction factor, 3) but never holds growth
    frozen[0].system_attrs["completed_rung_0"] = 0.1
    assert promise(frozen[0], frozen, "hyperband", None, True) == Promise(1, 3.0, True)


def campaign(**search: Any) -> Campaign:
    entry = {
        "name": "s",
        "app": "apps.digits:train_elastic",
        "epochs": 9,
        "space": {"lr": {"type": "float", "low": 0.001, "high": 0.5, "log": True}},
        "trials": 6,
        "parallel": 3,
        "sampler": {"type": "random", "seed": 0},
        "pruner": {"type": "asha", "min_resource": 1, "reduction_factor": 3},
        "resource": "epoch",
        **search,
    }
    return Campaign(metric={"name": "acc", "direction": "max"}, searches=[entry])


@pytest.mark.parametrize("hold_back", [True, False])
def test_a_search_book_gives_each_live_trial_its_promise(tmp_path: Path, hold_back: bool):
    book = SearchBook.open(campaign(hold_back=hold_back), tmp_path / "on", 3)
    names = [name for name, _, _ in book.ask()]
    assert book.promises() == dict.fromkeys(names, EQUAL)  # nothing reported yet
    # s-000 reaches rung 0 first (promoted); s-001 and s-002 report just before it, compared
    # with s-000 at the same step (0.5), not at the rung (0.9): a curve still rising
    first = [
        MetricRecord(5, 0.0, {"acc": 0.5, "epoch": 0}),
        MetricRecord(10, 0.0, {"acc": 0.9, "epoch": 1}),
    ]
    assert book.observe(names[0], first) is None
    assert book.observe(names[1], [MetricRecord(5, 0.0, {"acc": 0.2, "epoch": 0})]) is None
    assert book.observe(names[2], [MetricRecord(5, 0.0, {"acc": 0.6, "epoch": 0})]) is None
    said = book.promises()
    assert said[names[0]] == Promise(1, 3.0, True)
    # 0.2 < 0.5, s-000's at the same step: held back only where the search asks for it
    assert said[names[1]] == Promise(0, 1.0, not hold_back)
    assert said[names[2]] == Promise(0, 1.0, True)  # 0.6 > 0.5, though < 0.9 at the rung
    off = SearchBook.open(campaign(nodes_by_promise=False), tmp_path / "off", 3)
    names = [name for name, _, _ in off.ask()]
    off.observe(names[0], [MetricRecord(10, 0.0, {"acc": 0.9, "epoch": 1})])
    assert off.promises() == dict.fromkeys(names, EQUAL)


@pytest.mark.parametrize("key", ["nodes_by_promise", "hold_back"])
def test_the_promise_options_must_be_booleans(key: str):
    with pytest.raises(ValidationError, match=key):
        campaign(**{key: "yes"})
    assert not campaign().searches[0].hold_back and campaign().searches[0].nodes_by_promise


@pytest.mark.parametrize("grow", [True, False])
def test_the_core_does_not_grow_a_trial_to_be_pruned(grow: bool):
    """Two one-node trials, two more nodes: on this curve a 2 + 2 split beats 3 + 1, so b grows
    unless it may not (the control, grow=True, shows the cap is what holds it)."""
    core = ControllerCore(CoreSettings(debounce_s=0.5, max_delay_s=2.0, drain_margin_s=30.0))
    core.block_update("b", 0.0)
    for i in range(2):
        core.node_ready(f"n{i}", "b", 0.0, name=f"n{i}")
    core.add_job(JobSpec("a", 1, 4, curve=CONCAVE, scale_up_s=0, scale_down_s=0), 0.0)
    core.add_job(JobSpec("b", 1, 4, curve=CONCAVE, scale_up_s=0, scale_down_s=0), 0.0)
    core.step(1.0)
    assert sorted(n.job or "" for n in core.nodes.values()) == ["a", "b"]
    assert core.revalue("b", 2.0, priority=1.0, grow=grow) is not grow
    assert not core.revalue("b", 2.0, priority=1.0, grow=grow)  # no change, no new decision
    for i in range(2, 4):
        core.node_ready(f"n{i}", "b", 2.0, name=f"n{i}")
    core.step(3.0)
    sizes = {job: len(core.decisions[-1].nodes_of(job)) for job in ("a", "b")}
    assert sizes == ({"a": 2, "b": 2} if grow else {"a": 3, "b": 1})
    assert core.jobs["b"].grow is grow


def test_a_promoted_trial_outweighs_a_new_one():
    core = ControllerCore(CoreSettings(debounce_s=0.5, max_delay_s=2.0, drain_margin_s=30.0))
    core.block_update("b", 0.0)
    for i in range(2):
        core.node_ready(f"n{i}", "b", 0.0, name=f"n{i}")
    core.add_job(JobSpec("a", 1, 2, curve=CONCAVE, scale_up_s=0, scale_down_s=0), 0.0)
    core.step(1.0)
    assert len(core.decisions[-1].nodes_of("a")) == 2
    # a new trial arrives: at equal weight it would take a node (100 > 190 - 100); a's three
    # rungs' worth (weight 3) keeps both of a's nodes
    assert core.revalue("a", 2.0, priority=3.0, grow=True)
    core.add_job(JobSpec("c", 1, 2, curve=CONCAVE, scale_up_s=0, scale_down_s=0), 2.0)
    core.step(3.0)
    assert len(core.decisions[-1].nodes_of("a")) == 2 and not core.decisions[-1].nodes_of("c")


def test_a_revalue_alone_makes_a_new_decision():
    """No node or holding changed, only the weights: the core decides again (its shortcut for
    node events that cannot change the answer must not swallow it)."""
    core = ControllerCore(CoreSettings(debounce_s=0.5, max_delay_s=2.0, drain_margin_s=30.0))
    core.block_update("b", 0.0)
    for i in range(3):
        core.node_ready(f"n{i}", "b", 0.0, name=f"n{i}")
    core.add_job(JobSpec("a", 1, 3, curve=LINEAR), 0.0)
    core.add_job(JobSpec("b", 1, 3, curve=LINEAR), 0.0)
    core.step(1.0)
    before = {n: len(core.decisions[-1].nodes_of(n)) for n in ("a", "b")}
    small = min(before, key=lambda n: before[n])
    assert core.revalue(small, 2.0, priority=10.0, grow=True)
    core.step(3.0)
    assert len(core.decisions) == 2 and len(core.decisions[-1].nodes_of(small)) > before[small]
