"""Objective value of a given allocation, computed directly (no solver).

Used to score the greedy fallback and to check solver answers: it mirrors the MILP term by term
(see docs/allocate.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from parsl_malleable.allocate.horizon import HorizonClasses
from parsl_malleable.allocate.objectives import combine, job_scale
from parsl_malleable.allocate.piecewise import best_envelope_rate
from parsl_malleable.allocate.settings import PauseRate
from parsl_malleable.allocate.spec import TrainingJob


def _best_rate(job: TrainingJob, left: int, coefficient: float) -> float:
    """Forecast rate in a later segment with ``left`` nodes still there.

    Later segments are valued on the curve's concave envelope (as in the MILP); the job runs
    on the best count up to ``left``, or stops when the pause outlasts the segment.
    """
    hi = min(left, job.max_nodes)
    if coefficient <= 0 or hi <= 0:
        return 0.0
    return best_envelope_rate(job, hi)


def job_score(
    job: TrainingJob,
    per_class: Sequence[int],
    classes: HorizonClasses,
    objective: str,
    *,
    charge_start: bool = True,
    shrink_pauses: bool = True,
    pause_rate: PauseRate = "before",
) -> float:
    """``alpha_j * (V_j - L_j) / H`` for a job holding ``per_class[b]`` nodes of class ``b``.

    In the first segment the job runs on all its nodes; when a class ends the job pays a
    scale-down pause and runs on what is left, or stops if that is better. A rescale now
    costs its pause at the rate before it (``pause_rate="before"``, FreeTrain's model) or after
    it (``"after"``: every rank pauses, the new ones too, as the elastic runtime does).
    """
    lengths = classes.lengths
    if not lengths:
        return 0.0  # no usable node at all
    n_now = sum(per_class)
    rate_now = job.curve(n_now) if n_now else 0.0
    value = lengths[0] * rate_now
    held = [len(h) for h in classes.held[job.name]]
    loss = 0.0
    if sum(held) == 0:
        if charge_start:
            loss += job.scale_up_cost * rate_now
    elif list(per_class) != held:
        grew = all(x >= c for x, c in zip(per_class, held, strict=True))
        paused = rate_now if pause_rate == "after" else job.current_rate
        loss += (job.scale_up_cost if grew else job.scale_down_cost) * paused
    for s in range(1, len(per_class)):
        pause = job.scale_down_cost if shrink_pauses and per_class[s - 1] > 0 else 0.0
        rate = _best_rate(job, sum(per_class[s:]), lengths[s] - pause)
        value += lengths[s] * rate
        loss += pause * rate
    horizon = classes.horizon_s or 1.0
    return job_scale(job, objective) * (value - loss) / horizon


def objective_value(
    jobs: Sequence[TrainingJob],
    per_class: Mapping[str, Sequence[int]],
    classes: HorizonClasses,
    objective: str,
    *,
    charge_start: bool = True,
    shrink_pauses: bool = True,
    pause_rate: PauseRate = "before",
) -> float:
    """The allocator's objective for the allocation ``per_class[job][class] = nodes``."""
    scores = [
        job_score(
            job,
            per_class[job.name],
            classes,
            objective,
            charge_start=charge_start,
            shrink_pauses=shrink_pauses,
            pause_rate=pause_rate,
        )
        for job in jobs
    ]
    return combine(scores, objective)
