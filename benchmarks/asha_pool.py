"""The baseline of issue #35: Optuna's own ASHA driving a plain pool of one-node workers on the
emulated site, the way a user would run it on a scavenger queue.

Same search as ``benchmarks/bench_asha.py`` (``configs/asha.yaml`` at its scale: the digits MLP,
the same 27 parameter sets in the same order, the same pruner), same site and native load (the
``emulated`` profile, replayed at 40x), but none of this project's machinery: no BackfillProvider,
no controller, no elastic ranks. Instead:

* **The queue.** The user submits one-node preemptable worker jobs, as many as the site has
  nodes, each with the longest walltime the profile allows. The emulated site has no queue for
  blocks, so this script is the scavenger queue: a submitted job waits until a node is idle, then
  starts there; a native job that needs the node kills it (the site's reclaim, counted in
  ``reclaim_count``). Whenever a worker job ends (killed, walltime) while trials are still
  waiting for a worker, a new one is submitted, as a requeueing scavenger queue does: the pool
  keeps ``min(nodes, trials running + trials waiting)`` worker jobs running or queued.
* **The workers.** Each job runs one plain Python process (this file with ``--worker``) that
  calls ``study.optimize(objective, ...)`` on a shared Optuna study. Storage: SQLite
  (``RDBStorage``, WAL journal) in the run folder, with a heartbeat (``heartbeat_interval``
  1 s, ``grace_period`` 6 s) and Optuna's retry callback (``RetryHeartbeatStaleTrialCallback``,
  formerly ``RetryFailedTrialCallback``): a trial whose worker was killed goes stale, is failed
  by the next worker (or by the driver, which checks every poll) and is queued again with the
  same parameters, to be trained by another worker **from scratch** (no checkpoint: what a user
  of a plain objective gets). The pruner is the example's, ``SuccessiveHalvingPruner
  (min_resource=1, reduction_factor=3)``, built from the campaign's own spec.
* **Like-for-like configs.** The exact parameter sets our run trains (Optuna's random sampler,
  the same seed and search space, asked 27 times in order, built with the campaign's own spec
  classes) are enqueued in order (``study.enqueue_trial``). The workers stop at 27 finished
  trials (``MaxTrialsCallback``, COMPLETE + PRUNED: a retried trial counts once); a worker also
  stops when no trial is waiting, so that the pool never samples configs beyond the 27 (a plain
  ``MaxTrialsCallback`` pool would start extra random trials at the end, charging more
  node-hours; one that slips through a race is failed at once and not trained).
* **The objective** trains what ``apps/digits.py`` ``train_elastic`` trains on one rank (its
  ``load_data``, ``make_model``, ``make_optimizer``, ``ElasticSampler``, ``evaluate``; one torch
  thread, ``step_delay_s`` of pause per global batch), reports ``test_accuracy`` at the end of
  each epoch as ``trial.report(value, epoch)`` (epoch 1 after the first, as ours) and raises
  ``TrialPruned`` when ``trial.should_prune()``. Every report is written with its wall time to
  the worker's own JSON-lines file in the run folder.

Figures (the keys of bench_asha's ``RunFigures``, pruner ``pool``, plus the raw reports), clock
zero at the first submit: time to a model within 1% of the best (of this run's best when no
target is given), node-hours the worker jobs held (start to end of each job: what the user is
charged) and the part spent on trials that ended pruned (each attempt's own start to end, an
attempt killed by a native included), worker jobs submitted, started, killed by natives, trials
retried after a kill.

From bench_asha.py: ``asha_pool.run_pool(scale, folder, seed=seed, target=target)`` (a dict).
Alone: ``python benchmarks/asha_pool.py [--quick] [--out F] [--keep DIR] [--seed N]``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import math
import os
import signal
import sqlite3
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
PRUNER = "pool"
STUDY = "asha-pool"
HEARTBEAT_S = 1  # Optuna's heartbeat_interval (whole seconds)
GRACE_S = 6  # Optuna's grace_period: a trial without a heartbeat this long is stale
POLL_S = 0.5  # the driver's (the queue's) poll
RUN_ENV = "PM_ASHA_POOL_RUN"  # every worker process carries it: the leftover check finds them
BATCH_SCRIPT = '#!/bin/bash\nexec "$PM_POOL_PYTHON" "$PM_POOL_SCRIPT" --worker "$PM_POOL_CONFIG"\n'
END_STATES = ("COMPLETE", "PRUNED")
STATUS_OF = {"COMPLETE": "done", "PRUNED": "pruned"}  # bench_asha's names for them


def _bench() -> Any:
    """``bench_asha`` (imported late: it may import this module)."""
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    import bench_asha

    return bench_asha


def _digits() -> Any:
    """``apps/digits.py``: installed as ``parsl_malleable.apps.digits``, or from the checkout."""
    import importlib

    try:
        return importlib.import_module("parsl_malleable.apps.digits")
    except ImportError:  # an editable install: the apps are apps/ in the checkout
        if str(REPO) not in sys.path:
            sys.path.insert(0, str(REPO))
        return importlib.import_module("apps.digits")


def _quiet_optuna() -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    warnings.filterwarnings("ignore", category=FutureWarning, module="optuna")


def _storage(path: Path, heartbeat_s: int, grace_s: int) -> Any:
    """The study's SQLite storage with a heartbeat and Optuna's retry of stale trials."""
    from optuna import storages

    kwargs: dict[str, Any] = {
        # Seven processes share the file: wait for the lock rather than fail.
        "engine_kwargs": {"connect_args": {"timeout": 60}},
        "heartbeat_interval": heartbeat_s,
        "grace_period": grace_s,
    }
    retry = getattr(storages, "RetryHeartbeatStaleTrialCallback", None)
    if retry is not None:  # Optuna >= 4.9
        kwargs["heartbeat_stale_trial_callback"] = retry()
    else:
        kwargs["failed_trial_callback"] = storages.RetryFailedTrialCallback()
    return storages.RDBStorage(f"sqlite:///{path}", **kwargs)


def _private_file(path: Path) -> Any:
    """``path`` opened to append lines, created 0600."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    return os.fdopen(fd, "a", buffering=1)


# --------------------------------------------------------------------------------- configs


def configs(data: dict[str, Any], seed: int) -> tuple[Any, list[tuple[str, dict[str, Any]]]]:
    """The campaign ``data``'s search and the trials our run trains, in order: ``(job name,
    parameters as Optuna keeps them)``, asked from a throwaway study with the search's own
    sampler (seeded as a fresh study's) and space, as ``SearchRun.ask`` does."""
    import optuna

    from parsl_malleable.campaign.spec import parse_campaign

    _quiet_optuna()
    campaign = parse_campaign(data, source="asha_pool")
    search = campaign.searches[0]
    study = optuna.create_study(sampler=search.sampler.make(search.space, seed))
    space = {name: dist.optuna() for name, dist in search.space.items()}
    out = []
    for number in range(search.trials):
        trial = study.ask(space)
        assert trial.number == number
        out.append((search.trial_name(number), dict(trial.params)))
    return search, out


def decoded(search: Any, params: dict[str, Any]) -> dict[str, Any]:
    """Parameters as the app gets them (a categorical list from its JSON text)."""
    return {n: search.space[n].decode(v) if n in search.space else v for n, v in params.items()}


# ---------------------------------------------------------------------------------- worker


class NotAConfig(Exception):
    """A trial the sampler made up (no enqueued config was waiting): failed, never trained."""


def _suggest(trial: Any, name: str, dist: Any) -> Any:
    """``trial.suggest_*`` for one of the campaign's distributions (its enqueued value)."""
    if dist.type == "categorical":
        return trial.suggest_categorical(name, [dist.encode(c) for c in dist.choices])
    if dist.type == "int":
        return trial.suggest_int(name, dist.low, dist.high, log=dist.log, step=dist.step or 1)
    return trial.suggest_float(name, dist.low, dist.high, log=dist.log, step=dist.step)


def worker_main(config_path: Path) -> int:
    """One worker job's process: ``study.optimize`` on the shared study until 27 trials are
    finished or none waits; every event to ``workers/<block>.jsonl``."""
    os.umask(0o077)
    cfg = json.loads(config_path.read_text())
    block = os.environ.get("PM_BLOCK_JOB_ID", f"pid{os.getpid()}")
    folder = Path(cfg["folder"])
    log = _private_file(folder / "workers" / f"{block}.jsonl")

    def event(kind: str, **fields: Any) -> None:
        log.write(json.dumps({"event": kind, "t": time.time(), "block": block, **fields}) + "\n")

    import torch
    import torch.nn.functional as F

    torch.set_num_threads(1)  # as a rank (elastic settings' torch_threads)
    import optuna
    from optuna.study import MaxTrialsCallback
    from optuna.trial import TrialState

    from parsl_malleable.campaign.search_spec import Distribution

    digits = _digits()

    _quiet_optuna()
    space = {name: Distribution(**d) for name, d in cfg["space"].items()}
    args = cfg["args"]
    epochs, batch_size, seed = int(cfg["epochs"]), int(args["batch_size"]), int(args["seed"])
    step_delay_s = float(args["step_delay_s"])
    budget = int(cfg["trials"])
    study = optuna.load_study(
        study_name=cfg["study"],
        storage=_storage(Path(cfg["storage"]), cfg["heartbeat_s"], cfg["grace_s"]),
        sampler=optuna.samplers.RandomSampler(seed=cfg["seed"]),
        pruner=optuna.pruners.SuccessiveHalvingPruner(**cfg["pruner"]),
    )
    x_tr, y_tr, x_te, y_te = digits.load_data()
    event("ready")

    def waiting() -> int:
        return len(study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))

    def finished() -> int:
        states = (TrialState.COMPLETE, TrialState.PRUNED)
        return len(study.get_trials(deepcopy=False, states=states))

    def objective(trial: optuna.Trial) -> float:
        if "config" not in trial.user_attrs:
            event("not_a_config", trial=trial.number)
            raise NotAConfig(f"trial {trial.number}: no enqueued config was waiting")
        params = {name: space[name].decode(_suggest(trial, name, d)) for name, d in space.items()}
        name = trial.user_attrs["name"]
        event("start", trial=trial.number, name=name, params=params)
        # train_elastic on one rank, step for step (apps/digits.py)
        model = digits.make_model(tuple(params["hidden"]), seed)
        optimizer, scheduler = digits.make_optimizer(model, float(params["lr"]), epochs)
        sampler = digits.ElasticSampler(len(x_tr), batch_size, seed=seed)
        value = math.nan
        while sampler.epoch < epochs:
            idx = sampler.local_indices(0, 1)
            optimizer.zero_grad()
            if len(idx):
                F.cross_entropy(model(x_tr[idx]), y_tr[idx]).backward()
            optimizer.step()
            epoch = sampler.epoch
            sampler.advance(1)
            if sampler.epoch != epoch:
                scheduler.step()
                value = digits.evaluate(model, x_te, y_te)["test_accuracy"]
                event("report", trial=trial.number, name=name, epoch=sampler.epoch, value=value)
                trial.report(value, sampler.epoch)
                if trial.should_prune():
                    event("end", trial=trial.number, name=name, state="PRUNED")
                    raise optuna.TrialPruned(f"epoch {sampler.epoch}: {value:.4f}")
            if step_delay_s:
                time.sleep(step_delay_s * len(idx) / batch_size)
        event("end", trial=trial.number, name=name, state="COMPLETE")
        return value

    def nothing_waits(study: optuna.Study, _trial: Any) -> None:
        if waiting() == 0:
            study.stop()

    # A worker that finds no trial waiting looks a little longer: a killed worker's trial comes
    # back for a retry once its heartbeat is stale (fail_stale_trials, as optimize itself does).
    until = time.monotonic() + cfg["grace_s"] + 2 * cfg["heartbeat_s"]
    while waiting() == 0 and finished() < budget and time.monotonic() < until:
        optuna.storages.fail_stale_trials(study)
        time.sleep(0.5)
    if waiting() and finished() < budget:
        study.optimize(
            objective,
            callbacks=[
                MaxTrialsCallback(budget, states=(TrialState.COMPLETE, TrialState.PRUNED)),
                nothing_waits,
            ],
            catch=(NotAConfig,),
            gc_after_trial=False,
        )
    event("exit")
    log.close()
    return 0


# ---------------------------------------------------------------------------------- driver


def _site(profile: Any, env: dict[str, str]) -> Any:
    """The profile's emulated site (its native load simulated now), as a user's jobs see it:
    no USR1 before the walltime (a plain job does not ask for one), any idle node."""
    from parsl_malleable.schedulers.emulated.scheduler import EmulatedSite

    assert profile.emulated is not None, "the pool needs the emulated site"
    return EmulatedSite(profile.emulated, signal_margin_s=0.0, pin_nodes=False, env=env)


def _counts(study: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for trial in study.get_trials(deepcopy=False):
        counts[trial.state.name] = counts.get(trial.state.name, 0) + 1
    return counts


def leftovers(marker: str) -> list[int]:
    """Live processes whose environment carries ``RUN_ENV=marker`` (the run folder's path)."""
    needle = f"{RUN_ENV}={marker}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            environ = Path(f"/proc/{name}/environ").read_bytes()
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        if needle in environ.split(b"\0") and stat[stat.rindex(")") + 2] not in "ZX":
            found.append(int(name))
    return found


def run_pool(
    scale: Any,
    folder: Path,
    *,
    seed: int = 0,
    target: float | None = None,
    speedup: float | None = None,
    heartbeat_s: int = HEARTBEAT_S,
    grace_s: int = GRACE_S,
    log: Any = print,
) -> dict[str, Any]:
    """Run the pool at ``scale`` (bench_asha's ``Scale``: trials, epochs, step_delay_s,
    time_limit_s) with the random sampler's ``seed`` in the new private folder ``folder``;
    its figures. ``target``: the value a report must reach for ``time_to_target_s`` (None:
    within 1% of this run's own best); ``speedup``: the site's, instead of bench_asha's (a
    faster replay makes natives come and go, and reclaim workers, within a short run)."""
    import optuna

    from parsl_malleable.campaign.runner import site_profile
    from parsl_malleable.campaign.spec import parse_campaign
    from parsl_malleable.private_files import private_dir

    bench = _bench()
    _quiet_optuna()
    data = bench.campaign(scale, "asha", seed)
    if speedup is not None:
        data["site_overrides"]["emulated"]["speedup"] = speedup
    metric, direction = data["metric"]["name"], data["metric"]["direction"]
    search, trials = configs(data, seed)
    if search.pruner.type != "asha":
        raise SystemExit(f"the pool runs Optuna's successive halving; the example has {search}")
    profile = site_profile(parse_campaign(data, source="asha_pool"), source="asha_pool")
    if folder.exists() and any(folder.iterdir()):
        raise SystemExit(f"{folder}: not empty; the pool runs into a new folder")
    folder = private_dir(folder, what="pool run folder")
    private_dir(folder / "workers", what="worker events")
    private_dir(folder / "jobs", what="worker jobs")
    old_umask = os.umask(0o077)
    # The site's log (blocks started, reclaimed) goes to site.log in the run folder: its
    # warnings speak of a provider's missed yield, which a plain pool has none of.
    site_log = logging.getLogger("parsl_malleable.schedulers.emulated")
    handler = logging.FileHandler(folder / "site.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    saved = site_log.level, site_log.propagate
    site_log.addHandler(handler)
    site_log.setLevel(logging.INFO)
    site_log.propagate = False
    try:
        return _run(
            scale, folder, search, trials, profile, seed, target, heartbeat_s, grace_s,
            metric, direction, log, bench, optuna,
        )  # fmt: skip
    finally:
        site_log.removeHandler(handler)
        handler.close()
        site_log.setLevel(saved[0])
        site_log.propagate = saved[1]
        os.umask(old_umask)


def _run(
    scale: Any,
    folder: Path,
    search: Any,
    trials: list[tuple[str, dict[str, Any]]],
    profile: Any,
    seed: int,
    target: float | None,
    heartbeat_s: int,
    grace_s: int,
    metric: str,
    direction: str,
    log: Any,
    bench: Any,
    optuna: Any,
) -> dict[str, Any]:
    from parsl_malleable.errors import SchedulerCommandError
    from parsl_malleable.schedulers.records import JobState

    budget = len(trials)
    db = folder / "study.sqlite"
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("PRAGMA journal_mode=WAL")  # readers beside the writer: fewer lock waits
    study = optuna.create_study(
        storage=_storage(db, heartbeat_s, grace_s),
        study_name=STUDY,
        direction="maximize" if direction == "max" else "minimize",
        sampler=optuna.samplers.RandomSampler(seed=seed),
        pruner=optuna.pruners.SuccessiveHalvingPruner(**search.pruner.options()),
    )
    for number, (name, params) in enumerate(trials):
        study.enqueue_trial(params, user_attrs={"config": number, "name": name})
    config = {
        "folder": str(folder),
        "storage": str(db),
        "study": STUDY,
        "seed": seed,
        "trials": budget,
        "epochs": search.epochs,
        "args": search.args,
        "space": {n: d.model_dump(exclude_unset=True) for n, d in search.space.items()},
        "pruner": search.pruner.options(),
        "heartbeat_s": heartbeat_s,
        "grace_s": grace_s,
    }
    config_path = folder / "worker.json"
    config_path.write_text(json.dumps(config, indent=1))
    script = folder / "jobs" / "worker.sh"
    script.write_text(BATCH_SCRIPT)
    # Stage the digits split (a node's cache) before the clock starts, as our runs find it.
    _digits().load_data()

    marker = str(folder)
    pythonpath = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = {
        "PM_POOL_PYTHON": sys.executable,
        "PM_POOL_SCRIPT": str(Path(__file__).resolve()),
        "PM_POOL_CONFIG": str(config_path),
        "PYTHONPATH": pythonpath,
        RUN_ENV: marker,
    }
    walltime = float(profile.max_walltime_s)
    nodes = profile.emulated.nodes
    site = _site(profile, env)
    started: list[str] = []  # worker jobs (site blocks), in start order
    alive: set[str] = set()
    ended: dict[str, str] = {}  # block -> its end state
    submitted = pending = failures = 0
    outcome = "finished"
    zero = time.time()
    deadline = zero + float(scale.time_limit_s)
    log(
        f"pool: {budget} trials on {nodes} one-node worker jobs (walltime {walltime:g} s), {folder}"
    )
    try:
        while True:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                optuna.storages.fail_stale_trials(study)  # a killed worker's trial: retried
            counts = _counts(study)
            if sum(counts.get(s, 0) for s in END_STATES) >= budget:
                break
            if time.time() > deadline:
                outcome = "time limit"
                break
            for job_id, status in site.status(sorted(alive)).items():
                if status.state is not JobState.RUNNING:
                    alive.discard(job_id)
                    ended[job_id] = status.state.value
                    if status.state is JobState.FAILED:
                        failures += 1
            if failures > 2 * nodes:
                raise SystemExit(f"{failures} worker jobs failed; see {folder / 'jobs'}")
            # The scavenger queue: keep a worker job running or queued for each trial running or
            # waiting (at most one per node); a job that ended while trials wait is requeued.
            want = min(nodes, counts.get("RUNNING", 0) + counts.get("WAITING", 0))
            more = max(0, want - len(alive) - pending)
            submitted += more
            pending = max(0, min(pending + more, want - len(alive)))
            while pending and site.node_counts().idle:
                try:
                    job_id = site.submit(script, nodes=1, walltime_s=walltime, name="pool")
                except SchedulerCommandError:  # a native took the node meanwhile
                    break
                started.append(job_id)
                alive.add(job_id)
                pending -= 1
            time.sleep(POLL_S)
        # Every trial is done: the workers stop after theirs; then the rest is cancelled.
        until = time.monotonic() + 10
        while alive and time.monotonic() < until:
            for job_id, status in site.status(sorted(alive)).items():
                if status.state is not JobState.RUNNING:
                    alive.discard(job_id)
                    ended[job_id] = status.state.value
            time.sleep(0.2)
    finally:
        if alive:
            site.cancel(sorted(alive))
            for job_id, status in site.status(sorted(alive)).items():
                ended[job_id] = status.state.value
        site.close()
    run_end = time.time()
    left: list[int] = []
    until = time.monotonic() + 15
    while (left := leftovers(marker)) and time.monotonic() < until:
        time.sleep(0.2)
    blocks = {job_id: site.block(job_id) for job_id in started}
    return _figures(
        study, folder, search, trials, blocks, ended, site, zero, run_end, target, metric,
        direction, bench, submitted, outcome, left, budget,
    )  # fmt: skip


def _events(folder: Path) -> list[dict[str, Any]]:
    rows = []
    for path in sorted((folder / "workers").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            with contextlib.suppress(json.JSONDecodeError):  # a line cut by a kill
                rows.append(json.loads(line))
    return sorted(rows, key=lambda r: r["t"])


def _figures(
    study: Any,
    folder: Path,
    search: Any,
    trials: list[tuple[str, dict[str, Any]]],
    blocks: dict[str, Any],
    ended: dict[str, str],
    site: Any,
    zero: float,
    run_end: float,
    target: float | None,
    metric: str,
    direction: str,
    bench: Any,
    submitted: int,
    outcome: str,
    left: list[int],
    budget: int,
) -> dict[str, Any]:
    events = _events(folder)
    attempts: dict[int, dict[str, Any]] = {}  # Optuna trial number -> one attempt at a config
    ready: dict[str, float] = {}
    rows: list[tuple[float, str, float]] = []
    made_up = 0
    for e in events:
        kind = e["event"]
        if kind == "ready":
            ready[e["block"]] = e["t"]
        elif kind == "not_a_config":
            made_up += 1
        elif kind == "start":
            attempts[e["trial"]] = {"name": e["name"], "block": e["block"], "start": e["t"]}
            attempts[e["trial"]]["params"] = e["params"]
        elif kind == "report":
            rows.append((e["t"] - zero, e["name"], float(e["value"])))
        elif kind == "end":
            attempts[e["trial"]].update(end=e["t"], state=e["state"])
    for attempt in attempts.values():
        if "end" not in attempt:  # killed: it ran until its job ended
            block = blocks.get(attempt["block"])
            attempt["end"] = block.end if block is not None and block.end else run_end
            attempt["state"] = "killed"
    final: dict[str, str] = {}
    for trial in study.get_trials(deepcopy=False):
        if trial.state.name in END_STATES and "name" in trial.user_attrs:
            final[trial.user_attrs["name"]] = STATUS_OF[trial.state.name]
    statuses: dict[str, int] = {}
    for name, _params in trials:
        status = final.get(name, "unfinished")
        statuses[status] = statuses.get(status, 0) + 1
    retried = sum(
        1
        for t in study.get_trials(deepcopy=False)
        if t.system_attrs.get("failed_trial") is not None
    )
    rows.sort()
    best = None
    for _t, _name, value in rows:
        if best is None or bench.better(value, best, direction):
            best = value
    if target is None and best is not None:
        target = bench.threshold(best, direction)
    reached = None
    if target is not None:
        reached = next(
            (t for t, _n, v in rows if v == target or bench.better(v, target, direction)), None
        )
    held = [(b.start, b.end if b.end is not None else run_end) for b in blocks.values() if b]
    node_s = sum(end - start for start, end in held)
    in_trials = sum(a["end"] - a["start"] for a in attempts.values())
    pruned_s = sum(
        a["end"] - a["start"] for a in attempts.values() if final.get(a["name"]) == "pruned"
    )
    done = [a for a in attempts.values() if a["state"] in END_STATES]
    by_state: dict[str, int] = {}
    for state in ended.values():
        by_state[state] = by_state.get(state, 0) + 1
    startup = [ready[j] - b.start for j, b in blocks.items() if b and j in ready]
    params = {name: decoded(search, p) for name, p in trials}
    trained = {a["name"]: a["params"] for a in attempts.values()}
    return {
        "pruner": PRUNER,
        "run_s": run_end - zero,
        "first_start_s": min(a["start"] for a in attempts.values()) - zero if attempts else None,
        "search_end_s": max(a["end"] for a in done) - zero if done else None,
        "best": best,
        "time_to_target_s": reached,
        "trials": len(trials),
        "statuses": statuses,
        "node_hours": node_s / 3600.0,
        "node_hours_pruned": pruned_s / 3600.0,
        "params": params,
        # beyond RunFigures
        "reports": rows,
        "metric": metric,
        "direction": direction,
        "target_value": target,
        "outcome": outcome,
        "same_params_trained": all(trained.get(n, p) == p for n, p in params.items()),
        "node_hours_in_trials": in_trials / 3600.0,
        "attempts": len(attempts),
        "attempts_killed": sum(1 for a in attempts.values() if a["state"] == "killed"),
        "trials_retried": retried,
        "made_up_trials": made_up,
        "workers_submitted": submitted,
        "workers_started": len(blocks),
        "worker_ends": by_state,
        "killed_by_natives": site.reclaim_count,
        "worker_start_s": statistics.median(startup) if startup else None,
        "processes_left": left,
        "natives_t0_s": site.schedule.t0 - zero,  # the replay's start, on this clock
        "budget": budget,
    }


# -------------------------------------------------------------------------------- the script


def _s(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f}"


def summary(r: dict[str, Any]) -> str:
    """The one-line summary."""
    return (
        f"pool: {r['statuses'].get('done', 0)} done / {r['statuses'].get('pruned', 0)} pruned "
        f"of {r['trials']} trials, best {r['best'] or math.nan:.4f}, to target "
        f"{_s(r['time_to_target_s'])} s, whole search {_s(r['search_end_s'])} s, "
        f"{r['node_hours']:.3f} node-h ({r['node_hours_pruned']:.3f} on pruned trials), "
        f"{r['workers_started']} worker jobs, {r['killed_by_natives']} killed by natives, "
        f"{r['trials_retried']} trials retried"
    )


def table(r: dict[str, Any]) -> str:
    """A small table of the figures."""
    lines = [
        ("time to target", f"{_s(r['time_to_target_s'])} s (>= {r['target_value'] or 0:.4f})"),
        ("best", f"{r['best'] or math.nan:.4f}"),
        ("first trial starts", f"{_s(r['first_start_s'])} s"),
        ("whole search", f"{_s(r['search_end_s'])} s"),
        ("run", f"{_s(r['run_s'])} s ({r['outcome']})"),
        ("trials done / pruned", f"{r['statuses'].get('done', 0)} / "
         f"{r['statuses'].get('pruned', 0)} (attempts {r['attempts']}, "
         f"killed {r['attempts_killed']}, retried {r['trials_retried']})"),
        ("node-hours", f"{r['node_hours']:.4f} (in trials {r['node_hours_in_trials']:.4f}, "
         f"on pruned trials {r['node_hours_pruned']:.4f})"),
        ("worker jobs", f"{r['workers_submitted']} submitted, {r['workers_started']} started, "
         f"ends {r['worker_ends']}, {r['killed_by_natives']} killed by natives"),
        ("worker start", f"{_s(r['worker_start_s'])} s (median, job start to ready)"),
    ]  # fmt: skip
    width = max(len(k) for k, _v in lines)
    return "\n".join(f"{k:{width}s}  {v}" for k, v in lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="9 trials of 3 epochs")
    parser.add_argument("--seed", type=int, default=0, help="the random sampler's seed")
    parser.add_argument(
        "--out", type=Path, default=REPO / "out" / "bench_asha_pool.json", help="figures, JSON"
    )
    parser.add_argument("--keep", type=Path, help="run into this new folder and keep it")
    parser.add_argument(
        "--speedup", type=float, help="the site's replay speed (default: bench_asha's, 40)"
    )
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)  # a worker job's process
    args = parser.parse_args(argv)
    if args.worker is not None:
        sys.exit(worker_main(args.worker))
    # A worker dies of TERM (its trial goes stale); the driver cleans up on it as on ^C.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    bench = _bench()
    scale = bench.QUICK if args.quick else bench.FULL
    began = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="asha-pool-") as tmp:
            folder = args.keep or Path(tmp) / "pool"
            result = run_pool(scale, folder, seed=args.seed, speedup=args.speedup)
    except KeyboardInterrupt:
        print("interrupted: every worker job cancelled, the site closed", file=sys.stderr)
        sys.exit(130)
    took = time.monotonic() - began
    print(
        f"{scale.trials} trials of {scale.epochs} epochs, {scale.step_delay_s} s a step, random "
        f"sampler seed {args.seed}, {os.cpu_count()} cores, {took:.0f} s in all"
    )
    print(summary(result))
    print(table(result))
    if result["processes_left"]:
        print(f"WARNING: worker processes left behind: {result['processes_left']}")
    out: dict[str, Any] = {
        "scale": dataclasses.asdict(scale),
        "seed": args.seed,
        "speedup": args.speedup or bench.SPEEDUP,
    }
    out.update(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2))
    print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
