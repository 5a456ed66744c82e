"""Nodes by promise: what a running trial is worth to the allocator, from its pruner's rungs.

Successive halving (``asha``) and ``hyperband`` judge a trial at rungs: at each, only the best
``1 / reduction_factor`` of the trials that reached it go on. A trial that has passed ``k``
rungs has beaten most of the trials judged there, and the pruner means it to get
``reduction_factor ** k`` times the resource of one at rung 0; so the allocator weighs its
samples that much more (a promoted trial grows before new trials start and before trials
still to be judged grow).

A trial whose last value would not be promoted at its next rung (Optuna's own rule, applied
without writing anything) against the trials already judged there, each taken at the same step
(its learning curve where this trial is now), will most likely be pruned when it gets there: it
keeps the nodes it has, but is not grown onto new ones. Its value can still improve before the
rung, so this only holds back growth; the pruner decides.

``median`` and ``none`` have no rungs: every trial weighs the same and may grow. For
``hyperband`` the rungs count, but the prediction is not made (its brackets compare trials
among themselves, and the bracket of a trial is Optuna's private hash).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# Optuna's defaults, for a pruner spec that leaves reduction_factor out.
DEFAULT_REDUCTION = {"asha": 4, "hyperband": 3}
RUNG_KEY = "completed_rung_{}"  # Optuna's SuccessiveHalvingPruner's trial system attribute


@dataclass(frozen=True)
class Promise:
    """A running trial's worth: ``rung`` rungs passed, ``weight`` its samples' weight (a
    factor on the job's priority), ``grow`` False where it would be pruned at its next rung."""

    rung: int = 0
    weight: float = 1.0
    grow: bool = True


EQUAL = Promise()


def rungs_passed(trial: Any) -> int:
    """How many rungs ``trial`` (a FrozenTrial) has reached: a running trial passed them all."""
    rung = 0
    while RUNG_KEY.format(rung) in trial.system_attrs:
        rung += 1
    return rung


def promotable(value: float, competing: Sequence[float], reduction: int, maximize: bool) -> bool:
    """Optuna's successive-halving rule: ``value`` (one of ``competing``) is in the best
    ``len // reduction`` of them (the best one while there are fewer than ``reduction``)."""
    ranked = sorted(competing, reverse=maximize)
    keep = max(len(ranked) // reduction, 1)
    cutoff = ranked[keep - 1]
    return value >= cutoff if maximize else value <= cutoff


def promise(
    trial: Any, trials: Sequence[Any], pruner: str, reduction: int | None, maximize: bool
) -> Promise:
    """The promise of the running ``trial`` among the study's ``trials`` (FrozenTrials), for a
    pruner of type ``pruner`` with ``reduction`` (None: Optuna's default)."""
    if pruner not in DEFAULT_REDUCTION:
        return EQUAL
    factor = reduction or DEFAULT_REDUCTION[pruner]
    rung = rungs_passed(trial)
    weight = float(factor**rung)
    if pruner != "asha" or trial.last_step is None:
        return Promise(rung, weight, True)
    step = trial.last_step
    value = trial.intermediate_values[step]
    key = RUNG_KEY.format(rung)
    # Compared at the same step: a value an epoch short of the rung against the others' at the
    # rung would hold back a good trial that is still learning.
    there = [
        t.intermediate_values[step]
        for t in trials
        if t.number != trial.number and key in t.system_attrs and step in t.intermediate_values
    ]
    if not there:
        return Promise(rung, weight, True)  # first at its next rung: promoted, as Optuna does
    return Promise(rung, weight, promotable(value, [*there, value], factor, maximize))


__all__ = ["EQUAL", "Promise", "promise", "promotable", "rungs_passed"]
