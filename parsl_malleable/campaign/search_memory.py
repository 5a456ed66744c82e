"""A search's :class:`~.search.SearchRun` over an in-memory Optuna study: no folder, no file.

A campaign keeps each search's study in a journal file (:func:`.search._open_study`), so that
a killed driver resumes it. A replay (``parsl_malleable/replay/sweep.py``) and tests need the
same decisions without a campaign folder: :func:`memory_search` builds the search from plain
values, checked as a campaign file's ``searches:`` entry is (an unknown pruner or sampler, a
bad option, an empty space: :class:`~parsl_malleable.errors.ConfigError` naming it), and opens
its study in ``optuna.storages.InMemoryStorage`` with the same sampler and pruner a campaign
would get. Every decision (``ask``, ``observe``, ``promises``, ``finish``) is then
:class:`~.search.SearchRun`'s own code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import ValidationError

from parsl_malleable.campaign.search import SearchRun
from parsl_malleable.campaign.spec import MetricSpec, Search
from parsl_malleable.errors import ConfigError
from parsl_malleable.inputs import explain

if TYPE_CHECKING:
    from parsl_malleable.replay.sweep import TrialSearch

    def _fits_a_replayed_sweep(run: SearchRun) -> TrialSearch:
        """Never runs: mypy checks here that a SearchRun is what replay/sweep.py asks of a
        search (the replay, a peer of this part, cannot import it to say so)."""
        return run


# The app a replayed search names: nothing runs it (the replay's curves stand for training).
REPLAY_APP = "parsl_malleable.replay.curves:CurveFamily"


def memory_search(
    name: str,
    space: dict[str, Any],
    trials: int,
    *,
    metric: str = "accuracy",
    direction: Literal["max", "min"] = "max",
    pruner: dict[str, Any] | None = None,
    sampler: dict[str, Any] | None = None,
    nodes_by_promise: bool = True,
    hold_back: bool = False,
    parallel: int | None = None,
) -> SearchRun:
    """A search of ``trials`` trials over ``space`` (a campaign file's ``space:``), its study
    in memory; ``pruner`` and ``sampler`` as a campaign file writes them (``{"type": "asha",
    "min_resource": 1, "reduction_factor": 3}``; default: no pruner, TPE with seed 0);
    ``parallel``: trials RUNNING at once (default: all of them)."""
    try:
        search = Search(
            name=name,
            app=REPLAY_APP,
            space=space,
            trials=trials,
            parallel=parallel,
            pruner=pruner or {"type": "none"},
            sampler=sampler or {},
            nodes_by_promise=nodes_by_promise,
            hold_back=hold_back,
        )
        spec = MetricSpec(name=metric, direction=direction)
    except ValidationError as exc:
        raise ConfigError(f"search {name!r}: {explain(exc)}") from None
    return SearchRun(search, spec, _memory_study(search, spec), parallel or trials)


def _memory_study(search: Search, metric: MetricSpec) -> Any:
    """An in-memory study with the sampler and pruner :func:`.search._open_study` would set."""
    import optuna
    from optuna.storages import InMemoryStorage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        storage=InMemoryStorage(),
        study_name=search.name,
        direction="maximize" if metric.direction == "max" else "minimize",
    )
    study.sampler = search.sampler.make(search.space, search.sampler.seed)
    study.pruner = search.pruner.make()
    return study


__all__ = ["REPLAY_APP", "memory_search"]
