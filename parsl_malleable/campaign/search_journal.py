"""A search's Optuna journal under the same guarantees as the campaign state (``state.sqlite``).

The journal (``<output>/optuna/<search>.journal``) is read back by a rerun, so it is checked as
every file the project reads back is (:mod:`parsl_malleable.private_files`): a link, another
user's file or one others may change is refused, one line naming it and the fix. What is in it
is then checked before Optuna replays it, since Optuna answers a bad record with a raw
traceback, or worse, skips it:

* a record torn by a killed driver (a last line without its newline) is cut, and the bytes cut
  counted in the warning;
* any other damage (a line that is no journal record, random bytes, another study's journal, a
  record Optuna cannot replay, a trial whose parameters differ from the ones its job trained
  with) moves the file aside (``<search>.journal.damaged``, kept for a post-mortem) and the
  study is rebuilt from the campaign state; one warning line names the file, what is wrong and
  the recovery;
* a journal that is missing, or that holds fewer trials than the state (cut short), gets the
  state's trials back.

The campaign state is the source of truth for what trained: each trial's job row holds its
parameters, its end (done, failed, pruned) and its metric reports. A trial is re-told to the
study from its row (:func:`retell`): with its parameters, its reports as intermediate values and
its end as the trial's state, under its own number, so that the job name that trained is never
asked again with other parameters. A number the state never held (a trial asked by a driver
killed before the state had it; it never trained) becomes a FAIL trial without parameters, so
that the numbers after it stay their jobs' numbers.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parsl_malleable.private_files import check_private_file, read_private_bytes

if TYPE_CHECKING:
    from parsl_malleable.campaign.spec import MetricSpec, Search
    from parsl_malleable.campaign.store import CampaignStore, JobRow

logger = logging.getLogger(__name__)

# A trial re-told from the state says so in its user attributes (``optuna-dashboard`` shows them).
RETOLD = "retold_from_state"
# A number the state never held, kept so that the later trials keep their numbers.
LOST = "lost_in_journal_repair"


@dataclass(frozen=True)
class JournalCheck:
    """What :func:`check_journal` found: whether the file was there, the bytes of a torn last
    record it cut, and what damage made it move the file aside (to ``aside``)."""

    existed: bool
    torn: int = 0
    damage: str | None = None
    aside: Path | None = None


def _op_codes() -> set[int]:
    from optuna.storages.journal._storage import JournalOperation

    return {int(op) for op in JournalOperation}


def first_damage(data: bytes, study: str) -> str | None:
    """Why the whole records ``data`` (each line ending in a newline) are not a journal of study
    ``study`` alone, or None. Optuna splits records at ``\\n`` only, and so does this."""
    codes = _op_codes()
    create = 0  # JournalOperation.CREATE_STUDY
    lines = data.split(b"\n")[:-1]
    for number, line in enumerate(lines, start=1):
        try:
            record = json.loads(line)
        except ValueError:  # not UTF-8 (UnicodeDecodeError) or not JSON (JSONDecodeError)
            return f"line {number} of {len(lines)} is not a journal record"
        op = record.get("op_code") if isinstance(record, dict) else None
        if not isinstance(op, int) or isinstance(op, bool) or op not in codes:
            return f"line {number} of {len(lines)} is not a journal record"
        if number == 1 and op != create:
            return "its first record does not create a study"
        if op == create and record.get("study_name") != study:
            return f"it is the journal of study {record.get('study_name')!r}, not of {study!r}"
    return None


def move_aside(path: Path) -> Path:
    """Move a damaged journal out of the way (never over an earlier one): where it went."""
    aside = path.with_name(f"{path.name}.damaged")
    number = 1
    while aside.exists() or aside.is_symlink():
        number += 1
        aside = path.with_name(f"{path.name}.damaged-{number}")
    os.replace(path, aside)
    return aside


def check_journal(path: Path, study: str) -> JournalCheck:
    """Check the journal ``path`` of study ``study`` before Optuna opens it: refuse it unless it
    is this user's private regular file (:class:`~parsl_malleable.errors.UnsafePathError`), cut
    a torn last record, and move it aside if it is damaged otherwise."""
    if not check_private_file(path):
        return JournalCheck(existed=False)
    data = read_private_bytes(path)
    keep = data.rfind(b"\n") + 1
    damage = first_damage(data[:keep], study)
    if damage is not None:
        return JournalCheck(True, len(data) - keep, damage, move_aside(path))
    if keep < len(data):
        # Optuna reads past a torn last record, but its next append would join the two into
        # one line that no read can decode.
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.ftruncate(fd, keep)
            os.fsync(fd)
        finally:
            os.close(fd)
    return JournalCheck(True, len(data) - keep)


def trial_rows(search: Search, rows: list[JobRow]) -> dict[int, JobRow]:
    """The state's rows of ``search``'s trials, by trial number (the spec refuses a job whose
    name could be a trial's)."""
    pattern = re.compile(rf"{re.escape(search.name)}-(\d{{3,}})")
    out = {}
    for row in rows:
        found = pattern.fullmatch(row.name)
        if found and search.trial_name(int(found[1])) == row.name:
            out[int(found[1])] = row
    return out


def same_params(search: Search, asked: dict[str, Any], stored: dict[str, Any]) -> bool:
    """Whether a trial's parameters as the study holds them (``asked``) are the ones its job's
    row holds (``stored``, as the app got them, through JSON)."""
    space = search.space
    decoded = {n: space[n].decode(v) if n in space else v for n, v in asked.items()}
    return json.dumps(decoded, sort_keys=True) == json.dumps(stored, sort_keys=True)


def _reports(
    search: Search, metric: MetricSpec, row: JobRow, store: CampaignStore
) -> dict[int, float]:
    """The intermediate values a trial's job told its pruner, as the state has its reports: by
    the rule of :meth:`.search.SearchRun.observe` (finite values at whole, non-negative
    resources, the first at each), up to the pruning step of a pruned job."""
    told: dict[int, float] = {}
    for record in store.metrics(row.name):
        step = record["step"]
        if row.status == "pruned" and row.pruned_step is not None and step > row.pruned_step:
            break
        value = record.get(metric.name)
        resource = float(step) if search.resource is None else record.get(search.resource)
        if value is None or resource is None:
            continue
        if not (math.isfinite(value) and math.isfinite(resource)):
            continue
        if resource < 0 or resource != int(resource):
            continue
        told.setdefault(int(resource), float(value))
    return told


def _distributions(search: Search, params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A row's parameters as Optuna keeps them, with their distributions: the space's, or,
    for a value the space (changed since) no longer holds, a one-choice categorical, so that
    the trial keeps the value it trained with."""
    from optuna.distributions import CategoricalDistribution

    values: dict[str, Any] = {}
    dists: dict[str, Any] = {}
    for name, value in params.items():
        spec = search.space.get(name)
        if spec is not None:
            encoded = spec.encode(value)
            dist = spec.optuna()
            try:
                fits = dist._contains(dist.to_internal_repr(encoded))
            except (TypeError, ValueError):  # a choice no longer listed, a value of a wrong type
                fits = False
            if fits:
                values[name], dists[name] = encoded, dist
                continue
        plain = value is None or isinstance(value, bool | int | float | str)
        kept = value if plain else json.dumps(value, sort_keys=True)
        values[name], dists[name] = kept, CategoricalDistribution([kept])
    return values, dists


def complete_cut(
    study: Any, search: Search, metric: MetricSpec, rows: dict[int, JobRow], store: CampaignStore
) -> list[int]:
    """Give the study's RUNNING trials what a journal cut short lost and the state holds:
    Optuna writes a new trial's parameters one record each, so a cut journal may end in a
    trial with only some of them (where those it has are its job row's, the rest are set from
    the row); and a report the state holds but the study does not (cut, or the driver killed
    between the two writes) is told, before :meth:`.search.SearchBook.reconcile` tells the
    trial's end. The numbers of the trials whose parameters were completed."""
    completed = []
    told = 0
    for trial in study.get_trials(deepcopy=False, states=(_running(),)):
        row = rows.get(trial.number)
        if row is None:
            continue
        params, dists = _distributions(search, row.params)
        missing = set(params) - set(trial.params)
        consistent = not set(trial.params) - set(params) and all(
            same_params(search, {n: v}, {n: row.params[n]}) for n, v in trial.params.items()
        )
        if not consistent:
            continue  # other parameters: not a cut trial; the caller rebuilds the study
        # Study has no public way to write to a stored trial; the storage's calls are what
        # Trial.suggest_* and Trial.report themselves make.
        for name in sorted(missing):
            dist = dists[name]
            internal = dist.to_internal_repr(params[name])
            study._storage.set_trial_param(trial._trial_id, name, internal, dist)
        if missing:
            completed.append(trial.number)
        for step, value in _reports(search, metric, row, store).items():
            if step not in trial.intermediate_values:
                study._storage.set_trial_intermediate_value(trial._trial_id, step, value)
                told += 1
    if told:
        logger.info(
            "search %s: %d report(s) the state holds were not in its study: told", search.name, told
        )
    return completed


def _running() -> Any:
    from optuna.trial import TrialState

    return TrialState.RUNNING


def retell(
    study: Any,
    search: Search,
    metric: MetricSpec,
    rows: dict[int, JobRow],
    store: CampaignStore,
    grid: Any = None,
) -> list[int]:
    """Add to ``study`` every trial the state holds past the study's last one, each under its
    own number (a gap becomes a FAIL trial without parameters); ``grid``: the grid sampler,
    whose points the re-told trials are marked with so that it does not ask them again. The
    numbers of the trials re-told from the state."""
    from optuna.trial import TrialState, create_trial

    start = len(study.get_trials(deepcopy=False))
    top = max(rows, default=-1)
    retold = []
    summary = store.metric_summary(metric.name, metric.direction)
    for number in range(start, top + 1):
        row = rows.get(number)
        if row is None:
            study.add_trial(create_trial(state=TrialState.FAIL, user_attrs={LOST: True}))
            continue
        params, dists = _distributions(search, row.params)
        reports = _reports(search, metric, row, store)
        state, value = TrialState.RUNNING, None
        if row.status == "pruned":
            # study.tell(PRUNED) gives the trial its last report as its value.
            state, value = TrialState.PRUNED, reports[max(reports)] if reports else None
        elif row.status == "failed":
            state = TrialState.FAIL
        elif row.status == "done":
            final = summary[row.name].final if row.name in summary else None
            ok = final is not None and math.isfinite(final)
            state, value = (TrialState.COMPLETE, final) if ok else (TrialState.FAIL, None)
        system: dict[str, Any] = {}
        if grid is not None:
            point = tuple(params.get(n) for n in grid._param_names)
            if point in grid._all_grids:
                # GridSampler's own marks (optuna/samplers/_grid.py): a point it has visited.
                system = {
                    "search_space": grid._search_space,
                    "grid_id": grid._all_grids.index(point),
                }
        study.add_trial(
            create_trial(
                state=state,
                value=value,
                params=params,
                distributions=dists,
                intermediate_values=reports,
                user_attrs={RETOLD: True},
                system_attrs=system,
            )
        )
        retold.append(number)
    return retold


__all__ = [
    "LOST",
    "RETOLD",
    "JournalCheck",
    "check_journal",
    "complete_cut",
    "first_damage",
    "move_aside",
    "retell",
    "same_params",
    "trial_rows",
]
