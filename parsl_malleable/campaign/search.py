"""A campaign's searches while it runs: Optuna's ask-and-tell, its study kept in the output folder.

One :class:`SearchRun` per ``searches:`` entry owns an Optuna study in
``<output>/optuna/<search>.journal`` (a JournalStorage file in a private folder). The study is
the source of truth for the search's trials: their parameters, and every decision (pruned,
complete, failed). The runner asks a trial when a slot is free (:meth:`SearchBook.ask`), which
becomes job ``<search>-NNN`` (``NNN``: Optuna's trial number) with the search's fixed arguments
and the trial's parameters; feeds every new report of the campaign's metric to
``trial.report(value, resource)`` and asks ``should_prune()`` (:meth:`SearchBook.observe`);
and tells the study how a trial's job ended (:meth:`SearchBook.finish`).

After a ``kill -9`` a rerun opens the same study (:meth:`SearchBook.open`): RUNNING trials get
their jobs back (which resume from their checkpoints), a trial the study has finished is never
run again, and new trials are asked only while the budget (``trials``, every state counted)
allows. Where the driver died between the study's write and the campaign state's, the two are
made to agree (:meth:`SearchBook.reconcile`): a pruning decision is written to the study first
(then the state), a job's end to the state first (then the study).

The journal is checked before Optuna reads it (:mod:`.search_journal`): refused in one line if
another user could have written it; a torn last record cut, counted; any other damage moves
it aside, and a damaged, missing or cut journal gets back from the campaign state every trial
the state holds, under its own number, with the parameters its job trained with. So a job name
that trained is never asked again with other parameters (:meth:`SearchBook.ask` refuses it).

Optuna is imported here, so only a run that has searches imports it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from parsl_malleable.campaign.promise import EQUAL, Promise, promise
from parsl_malleable.campaign.search_journal import (
    LOST,
    JournalCheck,
    check_journal,
    complete_cut,
    move_aside,
    retell,
    same_params,
    trial_rows,
)
from parsl_malleable.errors import ConfigError, StateStoreError
from parsl_malleable.private_files import private_dir

if TYPE_CHECKING:
    from parsl_malleable.campaign.spec import Campaign, JobEntry, MetricSpec, Search
    from parsl_malleable.campaign.store import CampaignStore, JobRow
    from parsl_malleable.elastic.metric_book import MetricRecord

logger = logging.getLogger(__name__)

FOLDER = "optuna"  # <output>/optuna/<search>.journal


def journal_path(output: Path, search: str) -> Path:
    """Where search ``search`` keeps its study."""
    return Path(output) / FOLDER / f"{search}.journal"


def sampler_seed(seed: int, existing: int) -> int:
    """The sampler's seed for a study that holds ``existing`` trials: ``seed`` itself at the
    start; after a rerun another one drawn from both, so that a seeded sampler does not replay
    the parameters of the trials it asked before the driver died."""
    if existing == 0:
        return seed
    import numpy as np

    return int(np.random.SeedSequence([seed, existing]).generate_state(1)[0])


@dataclass(frozen=True)
class Pruned:
    """A pruning decision: the trial's job, the training step of the report that decided it,
    and the pruner's step (the ``resource``)."""

    job: str
    step: int
    resource: int
    value: float


@dataclass
class SearchRun:
    """One search's study while the campaign runs."""

    search: Search
    metric: MetricSpec
    study: Any
    parallel: int
    trials: dict[int, Any] = field(default_factory=dict)  # number -> live optuna Trial
    reported: dict[int, set[int]] = field(default_factory=dict)  # number -> resources told
    nonfinite: int = 0  # reports not fed to the pruner (NaN or infinite value or resource)
    unusable: int = 0  # reports without the resource, or a resource that is no whole number

    @property
    def name(self) -> str:
        """The search's name."""
        return self.search.name

    def running(self) -> list[Any]:
        """The study's RUNNING trials (frozen), by number."""
        from optuna.trial import TrialState

        return self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))

    def entry(self, number: int, asked: dict[str, Any]) -> tuple[str, JobEntry, dict[str, Any]]:
        """``(job name, job, parameters)`` of trial ``number``, whose parameters the study
        holds as ``asked``."""
        space = self.search.space
        params = {n: space[n].decode(v) if n in space else v for n, v in asked.items()}
        job = self.search.trial_job(number, params)
        return job.name, job, params

    def attach(self, frozen: Any) -> None:
        """Make the RUNNING trial ``frozen`` live in this driver (its reports told so far)."""
        from optuna.trial import Trial

        # Optuna has no public way back from a stored trial to a live one; Trial(study, id) is
        # what study.ask itself returns, so report() and should_prune() work as for a new one.
        self.trials[frozen.number] = Trial(self.study, frozen._trial_id)
        self.reported[frozen.number] = set(frozen.intermediate_values)

    def ask(self) -> tuple[int, tuple[str, JobEntry, dict[str, Any]]]:
        """A new trial, live in this driver: its number and its job."""
        trial = self.study.ask({n: d.optuna() for n, d in self.search.space.items()})
        self.trials[trial.number] = trial
        self.reported[trial.number] = set()
        return trial.number, self.entry(trial.number, trial.params)

    def free_slots(self) -> int:
        """Trials that may be asked now: below ``parallel`` RUNNING, within the budget."""
        total = len(self.study.get_trials(deepcopy=False))
        return max(0, min(self.parallel - len(self.running()), self.search.trials - total))

    def observe(self, number: int, job: str, records: Iterable[MetricRecord]) -> Pruned | None:
        """Tell trial ``number`` the new reports of the metric; the decision if the pruner
        stops it (the study records it PRUNED at once)."""
        trial = self.trials.get(number)
        if trial is None:
            return None
        for record in sorted(records, key=lambda r: r.step):
            value = record.values.get(self.metric.name)
            if value is None:
                continue
            key = self.search.resource
            resource = float(record.step) if key is None else record.values.get(key)
            if resource is None or (
                math.isfinite(resource) and (resource < 0 or resource != int(resource))
            ):
                self.unusable += 1
                logger.warning(
                    "search %s: job %s reported %s at step %d without a whole, non-negative %s "
                    "(%s): not told to the pruner",
                    self.name,
                    job,
                    self.metric.name,
                    record.step,
                    self.search.resource,
                    resource,
                )
                continue
            if not (math.isfinite(value) and math.isfinite(resource)):
                self.nonfinite += 1
                logger.warning(
                    "search %s: job %s reported %s=%s at step %d: not told to the pruner "
                    "(%d such report(s) so far)",
                    self.name,
                    job,
                    self.metric.name,
                    value,
                    record.step,
                    self.nonfinite,
                )
                continue
            step = int(resource)
            told = self.reported.setdefault(number, set())
            if step in told:
                continue  # a step trained again after a rollback or a resume: told once
            trial.report(value, step)
            told.add(step)
            if trial.should_prune():
                self.study.tell(number, state=_state("PRUNED"))
                self.trials.pop(number, None)
                return Pruned(job, record.step, step, value)
        return None

    def promises(self) -> dict[int, Promise]:
        """The promise of each trial live in this driver, by number (:mod:`.promise`); every
        trial equal where the search has ``nodes_by_promise`` off, and free to grow unless it
        has ``hold_back`` on."""
        if not self.trials:
            return {}
        if not self.search.nodes_by_promise:
            return dict.fromkeys(self.trials, EQUAL)
        trials = self.study.get_trials(deepcopy=False)
        pruner = self.search.pruner
        maximize = self.metric.direction == "max"
        said = {
            number: promise(trials[number], trials, pruner.type, pruner.reduction_factor, maximize)
            for number in self.trials
        }
        if self.search.hold_back:
            return said
        return {number: replace(p, grow=True) for number, p in said.items()}

    def finish(self, number: int, final: float | None, failed: bool) -> str:
        """Tell the study how trial ``number``'s job ended: COMPLETE with ``final`` (the
        metric's last report), FAIL for a failed job or one that never reported a finite
        value. The state told."""
        self.trials.pop(number, None)
        if failed or final is None or not math.isfinite(final):
            self.study.tell(number, state=_state("FAIL"))
            return "FAIL"
        self.study.tell(number, final, state=_state("COMPLETE"))
        return "COMPLETE"


def _state(name: str) -> Any:
    from optuna.trial import TrialState

    return TrialState[name]


def _create_study(path: Path, name: str, direction: Literal["maximize", "minimize"]) -> Any:
    """Optuna's study ``name`` in the journal ``path``, created or loaded."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    storage = JournalStorage(JournalFileBackend(str(path)))
    return optuna.create_study(
        storage=storage, study_name=name, direction=direction, load_if_exists=True
    )


def _open_study(
    search: Search, metric: MetricSpec, output: Path, store: CampaignStore | None = None
) -> Any:
    """The study of ``search`` in ``output``, created or loaded, with its sampler and pruner;
    checked, repaired and made to hold every trial the campaign state ``store`` holds, with the
    parameters its job trained with (:mod:`.search_journal`)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    folder = private_dir(Path(output) / FOLDER, what="Optuna study folder")
    path = journal_path(output, search.name)
    # One driver at a time holds the folder (DriverLock): a lock file here is a killed
    # driver's, and would make the journal wait for it.
    for lock in (folder / f"{path.name}.lock",):
        if lock.is_symlink() or lock.exists():
            logger.info(
                "search %s: removing the stale lock %s of a killed driver", search.name, lock
            )
            lock.unlink()
    check = check_journal(path, search.name)
    direction: Literal["maximize", "minimize"] = (
        "maximize" if metric.direction == "max" else "minimize"
    )
    try:
        study = _create_study(path, search.name, direction)
    except Exception as exc:  # whatever a record Optuna cannot replay raises (KeyError, ...)
        if check.damage is not None:
            raise  # a fresh journal that fails is no damage of ours to repair
        detail = f"Optuna cannot replay it: {type(exc).__name__}: {exc}"
        check = replace(check, damage=detail, aside=move_aside(path))
        study = _create_study(path, search.name, direction)
    if study.direction.name.lower() != direction:
        raise ConfigError(
            f"search {search.name}: its study in {path} was made to {study.direction.name.lower()}"
            f" {study.user_attrs.get('metric', 'the metric')}; the campaign's metric "
            f"{metric.name} now says {metric.direction}: use another output folder"
        )
    rows = trial_rows(search, store.jobs()) if store is not None else {}
    completed: list[int] = []
    if store is not None and check.damage is None:
        completed = complete_cut(study, search, metric, rows, store)
    trials = study.get_trials(deepcopy=False)
    differ = [
        search.trial_name(number)
        for number, row in sorted(rows.items())
        if number < len(trials) and not same_params(search, trials[number].params, row.params)
    ]
    if differ and check.damage is None:
        # The state holds what trained: a study that gives a job name other parameters is
        # not this campaign's, whatever else it holds.
        detail = (
            f"{len(differ)} trial(s) ({_span(differ)}) hold other parameters than their jobs "
            "trained with"
        )
        check = replace(check, damage=detail, aside=move_aside(path))
        study = _create_study(path, search.name, direction)
        completed = []
    space = {name: dist.model_dump(exclude_unset=True) for name, dist in search.space.items()}
    if not study.user_attrs:
        study.set_user_attr("metric", metric.name)
        study.set_user_attr("space", space)
    elif study.user_attrs.get("space") != space:
        logger.warning(
            "search %s: its space changed since the study in %s began; earlier trials keep "
            "their parameters",
            search.name,
            path,
        )
    retold = list(completed)
    if store is not None:
        grid = None
        if search.sampler.type == "grid":
            grid = search.sampler.make(search.space, search.sampler.seed)
        retold += retell(study, search, metric, rows, store, grid)
    _say_repair(search, path, check, store, retold)
    existing = len(study.get_trials(deepcopy=False))
    seed = search.sampler.seed
    # The grid sampler shuffles its points by the seed and records trials by their index:
    # it must keep its seed (it asks only unvisited points, from the study, anyway).
    if search.sampler.type != "grid":
        seed = sampler_seed(seed, existing)
    study.sampler = search.sampler.make(search.space, seed)
    study.pruner = search.pruner.make()
    return study


def _span(names: list[str]) -> str:
    """``s-007..s-010`` (first and last of a sorted list), or the one name."""
    return names[0] if len(names) == 1 else f"{names[0]}..{names[-1]}"


def _say_repair(
    search: Search,
    path: Path,
    check: JournalCheck,
    store: CampaignStore | None,
    retold: list[int],
) -> None:
    """One warning line for whatever :func:`_open_study` repaired: the file, what was wrong,
    what it did about it (nothing: no line)."""
    state = store.path if store is not None else None
    names = [search.trial_name(number) for number in retold]
    again = (
        f"{len(names)} trial(s) ({_span(names)}) re-told with the parameters, reports and ends "
        "of their jobs"
        if names
        else ""
    )
    if check.damage is not None:
        if state is None:
            rebuilt = "began a new study"
        else:
            rebuilt = f"rebuilt its study from {state}: " + (again or "it holds no trial yet")
        logger.warning(
            "search %s: %s is damaged (%s); moved it to %s and %s",
            search.name,
            path,
            check.damage,
            check.aside,
            rebuilt,
        )
    elif not check.existed and names:
        logger.warning(
            "search %s: %s is missing; rebuilt its study from %s: %s",
            search.name,
            path,
            state,
            again,
        )
    elif check.torn or names:
        said = []
        if check.torn:
            said.append(f"dropped {check.torn} byte(s) of a record torn when a driver was killed")
        if names:
            said.append(
                f"{len(names)} trial(s) the state holds ({_span(names)}) were cut from it: "
                f"re-told from {state} with the parameters, reports and ends of their jobs"
            )
        logger.warning("search %s: %s: %s", search.name, path, "; ".join(said))


class SearchBook:
    """Every search of a campaign while it runs, and which job is which trial."""

    def __init__(self, runs: list[SearchRun], store: CampaignStore | None = None) -> None:
        self.runs = {run.name: run for run in runs}
        self.jobs: dict[str, tuple[SearchRun, int]] = {}  # job -> (search, trial number)
        self.store = store  # the campaign state, whose rows a new trial must not reuse

    @classmethod
    def open(
        cls,
        campaign: Campaign,
        output: Path,
        default_parallel: int,
        store: CampaignStore | None = None,
    ) -> SearchBook:
        """Open (or create) every search's study; RUNNING trials become live again. With the
        campaign state ``store``, each study is first made to hold every trial the state holds,
        with the parameters its job trained with (a damaged or missing journal is rebuilt from
        the state: :mod:`.search_journal`)."""
        assert campaign.metric is not None  # the spec refuses searches without one
        runs = []
        for search in campaign.searches:
            study = _open_study(search, campaign.metric, output, store)
            run = SearchRun(search, campaign.metric, study, search.parallel or default_parallel)
            for frozen in run.running():
                run.attach(frozen)
            runs.append(run)
        book = cls(runs, store)
        for run in runs:
            for frozen in run.study.get_trials(deepcopy=False):
                book.jobs[run.search.trial_name(frozen.number)] = (run, frozen.number)
        return book

    def entries(self) -> list[tuple[str, JobEntry, dict[str, Any]]]:
        """The job of every trial in the studies, by search and number."""
        out = []
        for run in self.runs.values():
            for trial in run.study.get_trials(deepcopy=False):
                if not trial.user_attrs.get(LOST):  # a number kept by a repair: no job
                    out.append(run.entry(trial.number, trial.params))
        return out

    def live(self, job: str) -> bool:
        """Whether ``job`` is a trial this driver reports to and tells (a RUNNING one)."""
        found = self.jobs.get(job)
        return found is not None and found[1] in found[0].trials

    def reconcile(self, rows: list[JobRow], store: CampaignStore, run: int) -> list[str]:
        """Make the campaign state and the studies agree after a driver died between writing
        one and the other; the jobs changed. A trial the study has finished is not run again
        (its row goes to ``pruned``, ``done`` or ``failed``) unless ``retry`` put it back to
        ``waiting`` (it then runs as a plain job: the study keeps its verdict); a RUNNING
        trial whose job had already ended in the state is told now."""
        changed = []
        for row in rows:
            found = self.jobs.get(row.name)
            if found is None:
                continue
            search, number = found
            frozen = search.study.get_trials(deepcopy=False)[number]
            state = frozen.state.name
            if state == "RUNNING":
                if row.status in ("done", "failed", "pruned"):
                    self._tell_ended(search, number, row, store)
                    changed.append(row.name)
                continue
            if row.status == "waiting" and row.submissions > 0:
                logger.warning(
                    "job %s is a trial its study has finished (%s); it runs again as it was put "
                    "back to waiting (retry), and the study keeps %s",
                    row.name,
                    state,
                    state,
                )
                continue
            if row.status in ("waiting", "running"):
                self._follow_study(row.name, state, frozen, store, run)
                changed.append(row.name)
        return changed

    @staticmethod
    def _tell_ended(search: SearchRun, number: int, row: JobRow, store: CampaignStore) -> None:
        if row.status == "pruned":
            search.study.tell(number, state=_state("PRUNED"))
            search.trials.pop(number, None)
            told = "PRUNED"
        else:
            summary = store.metric_summary(search.metric.name, search.metric.direction)
            final = summary[row.name].final if row.name in summary else None
            told = search.finish(number, final, failed=row.status == "failed")
        logger.info(
            "job %s ended %s before the driver died: its study is told %s",
            row.name,
            row.status,
            told,
        )

    @staticmethod
    def _follow_study(name: str, state: str, frozen: Any, store: CampaignStore, run: int) -> None:
        if state == "PRUNED":
            store.prune(name, run, None)
        elif state == "COMPLETE":
            store.finish(name, run, result={"value": frozen.value})
        else:
            store.finish(name, run, error=f"its study recorded the trial {state}")
        logger.info("job %s: its study had already decided %s; the state follows it", name, state)

    def ask(self) -> list[tuple[str, JobEntry, dict[str, Any]]]:
        """New trials wherever a search has a free slot and budget left, as jobs."""
        out = []
        for run in self.runs.values():
            for _ in range(run.free_slots()):
                number, (name, job, params) = run.ask()
                self.jobs[name] = (run, number)
                out.append((name, job, params))
                logger.info("search %s asked job %s: %s", run.name, name, params)
        if out and self.store is not None:
            self._check_new(out, self.store)
        return out

    def _check_new(
        self, asked: list[tuple[str, JobEntry, dict[str, Any]]], store: CampaignStore
    ) -> None:
        """Refuse a new trial under a job name the state already holds: that job trained with
        its own parameters (:meth:`open` makes every study hold the state's trials, so this
        is a study changed under a running driver)."""
        rows = {row.name: row for row in store.jobs()}
        for name, _, params in asked:
            row = rows.get(name)
            if row is None:
                continue
            run = self.jobs[name][0]
            path = journal_path(store.path.parent, run.name)
            raise StateStoreError(
                path,
                f"search {run.name}: its study in {path} asked a new trial as job {name}, which "
                f"{store.path} holds already ({row.status}, parameters {row.params}; now "
                f"{params}): the study and the state disagree. Move {path} aside and rerun the "
                "same command: the study is rebuilt from the state",
            )

    def observe(self, job: str, records: list[MetricRecord]) -> Pruned | None:
        """Feed ``job``'s new reports to its trial; the decision if it is pruned."""
        if not records or not self.live(job):
            return None
        search, number = self.jobs[job]
        return search.observe(number, job, records)

    def finish(self, job: str, final: float | None, failed: bool) -> str | None:
        """Tell ``job``'s study how it ended (None: no live trial)."""
        if not self.live(job):
            return None
        search, number = self.jobs[job]
        return search.finish(number, final, failed)

    def promises(self) -> dict[str, Promise]:
        """Each live trial's promise, by job name."""
        out = {}
        for run in self.runs.values():
            for number, value in run.promises().items():
                out[run.search.trial_name(number)] = value
        return out

    def pruner_of(self, job: str) -> str:
        """``asha (min_resource=1, ...) on epoch``, for messages."""
        search = self.jobs[job][0].search
        return f"{search.pruner.describe()} on {search.resource or 'step'}"


__all__ = ["FOLDER", "Pruned", "SearchBook", "SearchRun", "journal_path", "sampler_seed"]
