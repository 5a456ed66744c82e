"""Run a campaign: a BackfillProvider, the controller, one malleable app per job, state on disk.

The runner is the driver. It loads Parsl with the site's :class:`BackfillProvider`, makes the
controller with the campaign's policy, submits every job not finished yet (each resumes from the
last checkpoint in its folder, if any), and samples the controller and the site once a second
into the campaign's SQLite state, the live display and, at the end, the results table and
pictures. The driver's watchdog (:mod:`parsl_malleable.watchdog`) cleans up after it if it is
killed: the controller keeps it told of the executor's interchange and blocks.

The output folder is private (:func:`~parsl_malleable.private_files.private_dir`: created 0700; an
existing one others can write is refused, one only they can read is narrowed), and everything the
run creates is created without group or other bits (the run's umask is 077), Parsl's run
directory and the logs that hold task arguments included.

Before anything starts, the runner refuses what could never work: a job whose ``min_nodes`` is
above what the site can lend (:func:`~.spec.check_site_fits`), and an output folder that holds
another campaign (:meth:`~.store.CampaignStore.check_owner`). A live site's node count is known
only from its first snapshot; a job larger than that fails then, with the reason.

A campaign's ``searches:`` run their trials as they go (:mod:`.search`): at most ``parallel``
of a search at once, a new one asked from its Optuna study when one ends, until its budget is
spent. Each trial is a job added to the state before it is submitted; one the pruner stops is
cancelled (its ranks stop at their next commit and its nodes go back at once) and reads
``pruned``.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
import traceback
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parsl_malleable.campaign.driver_lock import DriverLock
from parsl_malleable.campaign.fd_budget import DescriptorBudget, shorten_zmq_handshakes
from parsl_malleable.campaign.sample import SiteCounts, job_sample, site_counts
from parsl_malleable.campaign.spec import (
    Campaign,
    JobEntry,
    ParslSpec,
    check_site_fits,
    resolve_app,
    site_capacity,
)
from parsl_malleable.campaign.store import (
    CampaignIdentity,
    CampaignStore,
    FolderNote,
    NodeStartupRow,
)
from parsl_malleable.campaign.tmpdir_check import check_tmpdir_fits
from parsl_malleable.errors import ConfigError, MalleableError
from parsl_malleable.harvest.site_profile import SiteProfile, load_profile, profile_from_mapping
from parsl_malleable.logs import remove_logger, set_file_logger
from parsl_malleable.private_files import private_dir
from parsl_malleable.snapshot import NodeState, Snapshot
from parsl_malleable.watchdog import driver_watchdog

if TYPE_CHECKING:  # imports Optuna: only a campaign with searches loads it
    from parsl_malleable.campaign.promise import Promise
    from parsl_malleable.campaign.search import Pruned, SearchBook

logger = logging.getLogger(__name__)

RUN_ENV = "PM_CAMPAIGN_RUN"  # inherited by every process a run starts; tests find them by it
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
JOB_LOGS = "logs"  # logs/<job>.log in the output folder: a failed job's traceback
OUT_OF_FDS = "out of file descriptors"  # the outcome of a run whose descriptors ran out
RUN_DIR_LOG = "parsl_malleable.log"  # beside Parsl's parsl.log in runinfo/NNN/


@dataclass
class RunOutcome:
    """How one driver run ended."""

    output: Path
    run: int
    outcome: str  # "finished", "time limit", "interrupted", "nothing to do", OUT_OF_FDS
    done: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    pruned: list[str] = field(default_factory=list)


def _merge(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def site_profile(campaign: Campaign, *, source: str = "<campaign>") -> SiteProfile:
    """The campaign's site profile with its ``site_overrides`` merged in, validated."""
    try:
        profile = load_profile(campaign.site)
    except ConfigError as exc:
        raise ConfigError(f"{source}: site: {exc}") from None
    if not campaign.site_overrides:
        return profile
    merged = _merge(profile.model_dump(), campaign.site_overrides)
    try:
        return profile_from_mapping(merged, source=f"{source}: site_overrides")
    except ConfigError as exc:
        raise ConfigError(
            str(exc).replace("Extra inputs are not permitted", "unknown key")
        ) from None


def check_parsl_options(spec: ParslSpec, *, source: str = "<campaign>") -> None:
    """:class:`ConfigError` for ``parsl:`` options this installation cannot honour (monitoring
    without Parsl's monitoring extra), before anything starts."""
    import importlib.util

    if spec.monitoring is not None and importlib.util.find_spec("sqlalchemy") is None:
        raise ConfigError(
            f"{source}: parsl.monitoring needs Parsl's monitoring extra (sqlalchemy), which is "
            "not installed: pip install 'parsl[monitoring]', or remove parsl.monitoring"
        )


def parsl_config(
    spec: ParslSpec, executors: list[Any], *, run_dir: Path, workflow_name: str
) -> Any:
    """The :class:`parsl.config.Config` of a run: ``executors`` and the ``parsl:`` options of
    the campaign; ``run_dir`` where the campaign gives none, ``workflow_name`` for monitoring."""
    from parsl.config import Config
    from parsl.dataflow.memoization import BasicMemoizer

    monitoring = None
    if spec.monitoring is not None:
        from parsl.monitoring import MonitoringHub

        options = spec.monitoring.model_dump(exclude_none=True)
        options.setdefault("workflow_name", workflow_name)
        monitoring = MonitoringHub(**options)
    return Config(
        executors=executors,
        run_dir=spec.run_dir or str(run_dir),
        retries=spec.retries,
        memoizer=BasicMemoizer(memoize=spec.app_cache),
        strategy=spec.strategy,
        strategy_period=spec.strategy_period,
        max_idletime=spec.max_idletime,
        monitoring=monitoring,
        usage_tracking=spec.usage_tracking,
        project_name=spec.project_name,
        garbage_collect=spec.garbage_collect,
        internal_tasks_max_threads=spec.internal_tasks_max_threads,
    )


def campaign_identity(campaign: Campaign, source: str) -> CampaignIdentity:
    """The campaign's identity for its output folder: of the file ``source`` names (its stem
    and the hash of its bytes), else of ``campaign``'s content, named ``source``."""
    path = Path(source)
    if path.is_file():
        return CampaignIdentity.of_file(path)
    return CampaignIdentity.of_content(source, campaign.model_dump(mode="json"))


def latest_checkpoint_step(folder: Path) -> int | None:
    """The step the job whose checkpoints are in ``folder`` (``checkpoints/<job>``) will resume
    from, None for scratch: :func:`~parsl_malleable.elastic.checkpoint.resume_step`, the check
    its rank's load makes, so the two messages agree. Damaged checkpoints passed over, and
    checkpoints the rank will refuse, are logged here with their count and why."""
    from parsl_malleable.elastic.checkpoint import CheckpointError, resume_step

    name = folder.name
    try:
        point = resume_step(folder, job=name)
    except CheckpointError as exc:
        logger.error("job %s cannot resume from its checkpoints: %s", name, exc)
        return None
    if point.step is None and point.damaged:
        logger.warning("job %s starts from %s", name, point.describe())
    elif point.damaged:
        logger.warning("job %s resumes from %s", name, point.describe())
    return point.step


class CampaignRunner:
    """One driver run of ``campaign`` writing into ``output``.

    ``source`` is the campaign file (messages name it, and the output folder records it as its
    owner: pass the path so that a rerun of the edited file resumes; a campaign given without
    one is the folder's owner only while its content stays the same). ``adopt_folder`` lets
    the run take an output folder that holds another campaign (its jobs stay listed there).
    ``on_sample`` is called after each sample with the runner (the live display uses it).

    Raises :class:`~parsl_malleable.errors.ConfigError` before anything starts when a job
    cannot fit the site or the folder belongs to another campaign
    (:class:`~.store.FolderOwnedError`).
    """

    def __init__(
        self,
        campaign: Campaign,
        output: Path,
        *,
        source: str = "<campaign>",
        sample_s: float = 1.0,
        on_sample: Callable[[CampaignRunner], None] | None = None,
        adopt_folder: bool = False,
    ) -> None:
        self.campaign = campaign
        self.output = Path(output)
        self.source = source
        self.sample_s = sample_s
        self.on_sample = on_sample
        self.adopt_folder = adopt_folder
        self.profile = site_profile(campaign, source=source)
        check_parsl_options(campaign.parsl, source=source)
        check_site_fits(campaign, self.profile, source=source)
        check_tmpdir_fits(self.profile, source=source)
        self.identity = campaign_identity(campaign, source)
        self.check_folder()
        self.entries: dict[str, tuple[JobEntry, dict[str, Any]]] = {
            job.name: (job, params) for job, params in campaign.expanded()
        }
        self.store: CampaignStore | None = None
        self.run = 0
        self.started = time.time()
        self.jobs: dict[str, Any] = {}  # name -> ElasticJob of this run
        self.last_jobs: dict[str, dict[str, Any]] = {}
        self.last_site: SiteCounts | None = None
        self.harvested_s = 0.0
        self.idle_s = 0.0
        # Node-seconds in training steps this run (None: the controller counts no steps), and
        # the controller's total when last recorded (its phase log counts from its start).
        self.stepping_s: float | None = 0.0
        self._stepping_seen = 0.0
        self._stepping_at: float | None = None  # when the last site row was recorded
        self._startups_seen = -1  # the phase log's first steps when start-ups were last kept
        self._idle_watch = IdleWatch()
        self._rescales_seen: dict[str, int] = {}
        self._finished: set[str] = set()
        self._site_size_checked = False
        self.searches: SearchBook | None = None  # the searches' studies, once a run opens them
        self._pruned: set[str] = set()  # trials this run stopped early
        self._promised: dict[str, Promise] = {}  # the promise last given the controller, by job
        self._stop = threading.Event()
        self.run_dir: Path | None = None  # Parsl's run directory of this run, once loaded
        self.stop_reason = ""  # why the run stopped before its jobs ended, when it says why
        self._budget: DescriptorBudget | None = None  # this run's descriptors, while it trains
        # The provider's job records (its blocks) of this run, complete once the run has ended.
        self.blocks: list[Any] = []

    def check_folder(self) -> FolderNote | None:
        """Whether this campaign may run into the output folder, reading it only (nothing is
        written into a folder that is refused); the note a run would log, or
        :class:`~.store.FolderOwnedError`; :class:`~parsl_malleable.errors.UnsafePathError` for
        an existing folder that another user can change (one only they can read is narrowed).
        """
        if self.output.exists() or self.output.is_symlink():
            private_dir(self.output, what="output folder")
        if not (self.output / CampaignStore.FILE).is_file():
            return None
        store = CampaignStore(self.output, read_only=True)
        try:
            return store.check_owner(self.identity, adopt=self.adopt_folder)
        except sqlite3.OperationalError as exc:
            if "no such table" not in str(exc):
                raise
            return None  # a driver died before it made its tables: nothing is in there yet
        finally:
            store.close()

    def pending(self) -> list[str]:
        """The jobs a run would start now (neither done nor failed), read without writing."""
        if not (self.output / CampaignStore.FILE).is_file():
            return list(self.entries)
        store = CampaignStore(self.output, read_only=True)
        try:
            ended = {r.name for r in store.jobs() if r.status in ("done", "failed", "pruned")}
        except sqlite3.OperationalError:
            return list(self.entries)  # a driver died before it made its tables
        finally:
            store.close()
        return [name for name in self.entries if name not in ended]

    def stop(self) -> None:
        """Ask the loop to end after the current sample (jobs keep their state for a resume)."""
        self._stop.set()

    # ---------------------------------------------------------------------------- run

    def execute(self) -> RunOutcome:
        """Run until every job ended, the time limit, or :meth:`stop`."""
        self.check_folder()  # again: the folder may have changed since the runner was made
        private_dir(self.output, what="output folder")
        with ExitStack() as stack:
            # Everything this run and the processes it starts create is the user's alone.
            stack.callback(os.umask, os.umask(0o077))
            stack.enter_context(DriverLock(self.output))
            self.store = store = CampaignStore(self.output)
            stack.callback(store.close)
            note = store.claim(self.identity, adopt=self.adopt_folder)
            handler = set_file_logger(self.output / "campaign.log", format_string=LOG_FORMAT)
            stack.callback(remove_logger, handler)
            if note is not None:
                # An edited file or an adopted folder changes what the folder holds: say so on
                # the terminal (WARNING reaches it); a renamed file or an old folder in the log.
                logger.log(logging.WARNING if note.notable else logging.INFO, "%s", note)
            self.run = store.begin_run(self.source)
            metric = self.campaign.metric
            store.set_metric_spec(
                metric.name if metric else None, metric.direction if metric else None
            )
            changed = store.sync_jobs(
                (name, job.model_dump(), params) for name, (job, params) in self.entries.items()
            )
            for name in changed:
                logger.warning("job %s changed in the campaign file; it keeps its state", name)
            if self.campaign.searches:
                self._open_searches()
            todo = [r.name for r in store.jobs() if r.status in ("waiting", "running")]
            todo = [n for n in todo if n in self.entries]
            logger.info(
                "run %d of %s: %d job(s) to run, %d already ended",
                self.run,
                self.source,
                len(todo),
                len(self.entries) - len(todo),
            )
            if not todo:
                store.end_run(self.run, "nothing to do")
                rows = [r for r in store.jobs() if r.name in self.entries]
                return RunOutcome(
                    self.output,
                    self.run,
                    "nothing to do",
                    done=[r.name for r in rows if r.status == "done"],
                    failed=[r.name for r in rows if r.status == "failed"],
                )
            outcome = "interrupted"
            try:
                outcome = self._train(todo)
            finally:
                store.end_run(self.run, outcome)
                logger.info("run %d ended: %s", self.run, outcome)
            self._check_metric_reported()
            rows = store.jobs()
            return RunOutcome(
                self.output,
                self.run,
                outcome,
                done=[r.name for r in rows if r.status == "done"],
                failed=[r.name for r in rows if r.status == "failed"],
                pruned=[r.name for r in rows if r.status == "pruned"],
            )

    def _train(self, todo: list[str]) -> str:
        import parsl

        from parsl_malleable.controller import CoreSettings, configure
        from parsl_malleable.provider import BackfillProvider, harvest_executor

        assert self.store is not None
        os.environ[RUN_ENV] = f"{self.output.resolve()}#{self.run}"
        # Started before Parsl: it follows this process's tree, so the interchange is under the
        # switch from its start (#49: registered only after parsl.load returned, a kill in
        # between left it running); the registration below is kept for a watchdog told by pipe.
        watchdog = driver_watchdog()
        run_dir = private_dir(
            self.campaign.parsl.run_dir or self.output / "runinfo", what="Parsl run directory"
        )
        provider = BackfillProvider(
            self.profile, label="harvest", script_dir=str(self.output / "blocks")
        )
        htex = harvest_executor(provider)
        config = parsl_config(
            self.campaign.parsl,
            [htex],
            run_dir=run_dir,
            workflow_name=self.identity.name,
        )
        margin = self.profile.drain_margin_s
        settings = CoreSettings(
            **({} if margin is None else {"drain_margin_s": margin}),
            policy=self.campaign.policy.settings(),
        )
        run_log: logging.Handler | None = None
        # Before Parsl: a flood of connections to its ports must find the limit raised, the
        # handshakes short and a reserve kept; running out ends the run in one line (#49).
        budget = self._budget = DescriptorBudget(self._out_of_descriptors)
        budget.start()
        try:
            with shorten_zmq_handshakes(htex):
                dfk = parsl.load(config)
            with dfk:
                # Our records beside Parsl's parsl.log in its runinfo/NNN (campaign.log has
                # them too): one folder to read, or to send with a bug report.
                self.run_dir = Path(dfk.run_dir)
                run_log = set_file_logger(self.run_dir / RUN_DIR_LOG, format_string=LOG_FORMAT)
                logger.info("Parsl run directory %s", self.run_dir)
                if htex.interchange_proc is not None:
                    watchdog.watch_process(htex.interchange_proc.pid)
                controller = configure(htex, settings=settings)
                for name in todo:
                    self._submit(name)
                outcome = self._loop(controller, provider)
                self._keep_startups(controller, every=True)  # what came since the last sample
                return outcome
        except Exception as exc:
            # Out of descriptors, anything may fail anywhere (SQLite, a journal, Parsl): the
            # jobs keep their state, and one line (stop_reason) says what happened, not a
            # traceback (kept in campaign.log).
            if not budget.explains(exc):
                raise
            logger.info("the run stopped for want of descriptors", exc_info=True)
            return OUT_OF_FDS
        finally:
            budget.close()
            provider.close()
            parsl.clear()
            watchdog.release()
            self.blocks = list(provider.history())
            try:
                self._note_reclaims(provider)  # a store write: may fail on a full disk
            finally:
                if run_log is not None:
                    remove_logger(run_log)

    # ---------------------------------------------------------------------- searches

    def _open_searches(self) -> None:
        """Open the searches' studies, give every trial they hold its job, make the state agree
        with them, and ask the first trials (added to the state, so that they are run)."""
        from parsl_malleable.campaign.search import SearchBook

        assert self.store is not None
        self.searches = SearchBook.open(
            self.campaign,
            self.output,
            default_parallel=site_capacity(self.profile)[0],
            store=self.store,  # the state's trials keep their parameters in the study
        )
        self._add_trials(self.searches.entries())
        self.searches.reconcile(self.store.jobs(), self.store, self.run)
        self._add_trials(self.searches.ask())

    def _add_trials(self, trials: list[tuple[str, JobEntry, dict[str, Any]]]) -> list[str]:
        """Record trials' jobs in this run and in the state (before any is submitted)."""
        assert self.store is not None
        for name, job, params in trials:
            self.entries[name] = (job, params)
        changed = self.store.sync_jobs(
            (name, job.model_dump(), params) for name, job, params in trials
        )
        for name in changed:  # the job keeps its state (a finished trial is not run again)
            logger.warning(
                "job %s: its trial's job differs from the one in the state (the campaign file "
                "changed the search's fixed arguments); it keeps its state",
                name,
            )
        return [name for name, _, _ in trials]

    def _ask_trials(self) -> None:
        """Submit a new trial wherever a search has a free slot and budget left."""
        if self.searches is not None:
            for name in self._add_trials(self.searches.ask()):
                self._submit(name)

    def _judge(self, name: str, job: Any, records: list[Any]) -> None:
        """Feed job ``name``'s new reports to its trial; stop the job if the pruner says so."""
        if self.searches is None or name in self._pruned or job.ended:
            return  # an ended job is judged by its end, not pruned after it
        verdict = self.searches.observe(name, records)
        if verdict is not None:
            self._prune(job, verdict)

    def _revalue_trials(self, controller: Any) -> None:
        """Nodes by promise: give the controller each live trial's worth (its job's priority
        times the weight of the rungs it passed) and whether it may grow, where it changed."""
        if self.searches is None:
            return
        for name, promise in self.searches.promises().items():
            job = self.jobs.get(name)
            if job is None or job.ended or self._promised.get(name) == promise:
                continue
            self._promised[name] = promise
            entry, _ = self.entries[name]
            controller.revalue(name, priority=entry.priority * promise.weight, grow=promise.grow)

    def _prune(self, job: Any, verdict: Pruned) -> None:
        """The study has recorded the trial PRUNED: the state too, then stop the job at its
        next commit (its nodes go back at once)."""
        assert self.store is not None and self.searches is not None
        self._pruned.add(verdict.job)
        self.store.prune(verdict.job, self.run, verdict.step)
        job.cancel(
            f"pruned by {self.searches.pruner_of(verdict.job)} {verdict.resource} "
            f"(step {verdict.step}, {self.campaign.metric.name if self.campaign.metric else ''}"
            f"={verdict.value:g})"
        )
        logger.info(
            "job %s pruned at step %d (%s %d, value %g)",
            verdict.job,
            verdict.step,
            self.searches.pruner_of(verdict.job),
            verdict.resource,
            verdict.value,
        )

    def _tell_search(self, name: str, failed: bool) -> None:
        """Tell job ``name``'s study how it ended (after the state has it)."""
        if self.searches is None or self.store is None or not self.searches.live(name):
            return
        final = None
        metric = self.campaign.metric
        if metric is not None:
            summary = self.store.metric_summary(metric.name, metric.direction).get(name)
            final = summary.final if summary else None
        told = self.searches.finish(name, final, failed)
        if told == "FAIL" and not failed:
            logger.warning(
                "job %s ended without a finite %s report: its trial is told FAIL",
                name,
                metric.name if metric else "metric",
            )

    def _note_reclaims(self, provider: Any) -> None:
        """The emulated site counts blocks it had to kill for a native job, in two kinds: a
        yield the provider missed (its last snapshot allowed the native's start) and an
        unforeseeable start (an arrival or early end after it; docs/schedulers.md)."""
        site = provider.scheduler
        count = getattr(site, "reclaim_count", None)
        if count is None or self.store is None:
            return
        missed = int(getattr(site, "missed_count", count))
        unforeseeable = int(getattr(site, "unforeseeable_count", 0))
        self.store.set_meta(f"run{self.run}_reclaims", str(count))
        self.store.set_meta(f"run{self.run}_reclaims_missed", str(missed))
        self.store.set_meta(f"run{self.run}_reclaims_unforeseeable", str(unforeseeable))
        if missed:
            logger.warning("%d block(s) were reclaimed by native jobs: yields came late", missed)
        if unforeseeable:
            logger.info(
                "%d block(s) were reclaimed by native jobs no poll could foresee (an arrival "
                "or an early end after the last poll)",
                unforeseeable,
            )

    def _submit(self, name: str) -> None:
        from parsl_malleable.app import malleable_app

        assert self.store is not None
        job, _ = self.entries[name]
        folder = self.output / "checkpoints" / name
        resumed = latest_checkpoint_step(folder)
        app = malleable_app(
            checkpoint_dir=str(folder),
            min_nodes=job.min_nodes,
            max_nodes=job.max_nodes,
            backend=job.backend,
            priority=job.priority,
            checkpoint_every=job.checkpoint_every,
            batch=job.batch,
        )(resolve_app(job.app))
        self.jobs[name] = app.submit(name=name, **job.call_args())
        self.store.mark_submitted(name, resumed)
        if resumed is not None:
            # Said on the terminal too (campaign/terminal.py): a rerun tells where each job goes on.
            logger.info(
                "job %s resumes from its checkpoint at step %d",
                name,
                resumed,
                extra={"terminal": True},
            )

    def _loop(self, controller: Any, provider: Any) -> str:
        assert self.store is not None
        limit = self.campaign.time_limit_s
        last = time.time()
        while True:
            self._stop.wait(self.sample_s)
            now = time.time()
            dt, last = now - last, now
            self._sample(controller, provider, now, dt)
            self.fail_jobs_larger_than_site(provider.last_snapshot)
            self._collect_ended()
            self._revalue_trials(controller)
            self._ask_trials()
            if self.on_sample is not None:
                self.on_sample(self)
            if all(job.ended for job in self.jobs.values()):
                return "finished"
            if self._stop.is_set():
                return OUT_OF_FDS if self._budget and self._budget.tripped else "interrupted"
            if provider.gave_up:
                # No block will come: waiting for the time limit would only hide why.
                self.stop_reason = (
                    f"no more blocks: {provider.gave_up}; each block's output (why its workers "
                    f"exited) is in {provider.script_dir}; unfinished jobs can resume"
                )
                logger.error("%s", self.stop_reason)
                return "blocks failing"
            if limit is not None and now - self.started > limit:
                logger.warning("time limit of %.0f s reached; unfinished jobs can resume", limit)
                return "time limit"

    def _out_of_descriptors(self, reason: str) -> None:
        """The descriptor budget's alarm: stop the run, the jobs keep their state."""
        self.stop_reason = reason
        logger.info("%s", reason)
        self.stop()

    def _sample(self, controller: Any, provider: Any, now: float, dt: float) -> None:
        assert self.store is not None
        state = controller.state()
        jobs = {}
        for name, job in self.jobs.items():
            if job.ended:
                continue
            sample = job_sample(state["jobs"].get(name, {}), job.coordinator.epochs())
            seen = self._rescales_seen.get(name, 0)
            sample["new_rescales"] = max(0, sample["rescales"] - seen)
            self._rescales_seen[name] = max(seen, sample["rescales"])
            jobs[name] = sample
        for name, job in self.jobs.items():
            if name not in self._finished:
                self._take_metrics(name, job)
        assigned = sum(s["nodes"] for s in jobs.values())
        snapshot = provider.last_snapshot
        total = self._training_total(controller)
        stepping = None if total is None else self._stepping_since(total)
        # Counted from the last recorded row: time before the first snapshot (no row) goes
        # into the first row's interval, so no step is lost.
        interval = now - self._stepping_at if self._stepping_at is not None else dt
        site = site_counts(snapshot, assigned, stepping, interval)
        if site is not None:
            self.harvested_s += site.harvested * dt
            self.idle_s += site.idle * dt
            if total is not None:
                self._stepping_seen = total
            self._stepping_at = now
            if site.stepping_s is not None and self.stepping_s is not None:
                self.stepping_s += site.stepping_s
            self._idle_watch.see(snapshot)
        self.last_jobs, self.last_site = jobs, site
        self.store.record(now, self.run, dt, jobs, site.as_dict() if site else None)
        self._keep_startups(controller)

    def _training_total(self, controller: Any) -> float | None:
        """Node-seconds the controller has counted in training steps since it started, from
        the coordinators' epochs (:meth:`~parsl_malleable.controller.phases.PhaseLog.training_s`);
        None for a controller that keeps no phase log (a test's stand-in): its samples record
        no stepping figure rather than a made-up one, and the run says so once."""
        phases = getattr(controller, "phases", None)
        if phases is None:
            if self.stepping_s is not None:
                logger.warning(
                    "the controller keeps no phase log: node-time in training steps is not "
                    "counted in this run (its samples record none)"
                )
            self.stepping_s = None
            return None
        return float(phases.training_s())

    def _stepping_since(self, total: float) -> float:
        """Node-seconds in steps since the last recorded sample. The phase log forgets its
        oldest blocks past its limit, which lowers its total: what was stepped in that interval
        is then not known, and counted as nothing rather than below zero."""
        return max(0.0, total - self._stepping_seen)

    def _keep_startups(self, controller: Any, *, every: bool = False) -> None:
        """Store the start-up of every node of this run that reached a first step, with when
        the driver saw the node go idle, when a node reached one since the last call (all
        rows again: a stamp may have come late), or always with ``every`` (the run's end);
        nothing for a controller without a phase log."""
        assert self.store is not None
        phases = getattr(controller, "phases", None)
        if phases is None:
            return
        stepped = phases.first_steps()
        if stepped == self._startups_seen and not every:
            return
        self._startups_seen = stepped
        rows = [
            NodeStartupRow(
                run=self.run,
                block=s.block,
                node=s.node,
                submitted=s.submitted,
                running=s.running,
                worker=s.worker,
                joined=s.joined,
                first_step=s.first_step,
                idle=self._idle_watch.idle_before(s.node, s.running or s.submitted, s.first_step),
            )
            for s in phases.startups()
        ]
        if rows:
            self.store.record_startups(rows)

    def fail_jobs_larger_than_site(self, snapshot: Snapshot | None) -> list[str]:
        """At the first snapshot, when the site's node count is known: fail every job of this
        run whose ``min_nodes`` is above it, with the reason, instead of letting it wait
        forever (the profile's limits were checked before the start; a live site's partition
        may be smaller). The names of the jobs failed."""
        if self._site_size_checked or snapshot is None:
            return []
        self._site_size_checked = True
        size = len(snapshot.nodes)
        failed = []
        for name, job in self.jobs.items():
            entry, _ = self.entries[name]
            if entry.min_nodes <= size or job.ended:
                continue
            message = (
                f"job {name}: min_nodes {entry.min_nodes} is more than the {size} node(s) site "
                f"{self.profile.name!r} has (its scheduler's first snapshot); it could never "
                "start: lower min_nodes or use a bigger site"
            )
            logger.error("%s", message)
            job.fail(message)
            failed.append(name)
        return failed

    def _collect_ended(self) -> None:
        assert self.store is not None
        for name, job in list(self.jobs.items()):
            if not job.ended or name in self._finished:
                continue
            self._finished.add(name)
            self._take_metrics(name, job)  # what came after the last sample
            if name in self._pruned:  # its state and its trial already say pruned
                logger.info("job %s stopped: pruned", name)
                continue
            counts = job.metric_counts()
            if counts["nonfinite"]:
                logger.warning(
                    "job %s reported %d NaN or infinite metric value(s): kept in its metrics, "
                    "never taken as its best",
                    name,
                    counts["nonfinite"],
                )
            warnings = job.warnings
            try:
                result = job.future.result(timeout=60)
            except Exception as exc:  # the job's own failure, recorded for the table
                error = f"{type(exc).__name__}: {exc}"
                log = self._write_job_log(name, exc)
                if log is not None:
                    error += f" (traceback in {log})"
                self.store.finish(name, self.run, error=error, warnings=warnings)
                self._tell_search(name, failed=True)
                logger.warning("job %s failed: %s", name, error)
            else:
                self.store.finish(name, self.run, result=result, warnings=warnings)
                self._tell_search(name, failed=False)
                logger.info("job %s done: %s", name, result)
            for text in warnings:
                logger.warning("job %s: %s", name, text)

    def _take_metrics(self, name: str, job: Any) -> None:
        """Persist what job ``name``'s lead rank reported since the last take (a rollback's or
        resume's drop first: :meth:`~.store.CampaignStore.record_metrics`)."""
        assert self.store is not None
        changes = job.take_metrics()
        if changes.cut is not None or changes.records:
            self.store.record_metrics(name, self.run, changes.cut, changes.records)
            self._judge(name, job, changes.records)

    def _check_metric_reported(self) -> None:
        """Warn, naming it, when the campaign's metric was never reported by a job that ended
        done (a typo in ``metric.name``, or an app that does not call ``ctx.report``)."""
        metric = self.campaign.metric
        if metric is None or self.store is None:
            return
        done = [r.name for r in self.store.jobs() if r.status == "done" and r.name in self.entries]
        reported = set(self.store.metric_series(metric.name))
        silent = [name for name in done if name not in reported]
        if not silent:
            return
        names = self.store.metric_names()
        logger.warning(
            "the campaign's metric %r was never reported by %d finished job(s) (%s): no best "
            "for them; reported metrics: %s (ctx.report(step, %s=...) in the training loop)",
            metric.name,
            len(silent),
            ", ".join(silent[:5]) + (", ..." if len(silent) > 5 else ""),
            ", ".join(names) if names else "none",
            metric.name,
        )

    def _write_job_log(self, name: str, exc: BaseException) -> str | None:
        """Append the failure of job ``name`` (the rank's traceback: the user's file and line,
        else the driver's view of it) to ``logs/<name>.log``; its path relative to the output
        folder, None when it could not be written (the error column then says what it can)."""
        text = getattr(exc, "traceback", "") or "".join(
            traceback.format_exception(type(exc), exc, exc.__traceback__)
        )
        relative = f"{JOB_LOGS}/{name}.log"
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        try:
            folder = private_dir(self.output / JOB_LOGS, what="job log folder")
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(folder / f"{name}.log", flags, 0o600)
            with os.fdopen(fd, "a") as file:
                file.write(f"{stamp} run {self.run}: job {name} failed: {exc}\n{text.rstrip()}\n\n")
        except (OSError, MalleableError) as error:
            logger.warning("job %s: cannot write its log %s: %s", name, relative, error)
            return None
        return relative

    @property
    def harvest_fraction(self) -> float | None:
        """Harvested / (harvested + idle) node-seconds seen in this run."""
        total = self.harvested_s + self.idle_s
        return self.harvested_s / total if total > 0 else None

    @property
    def training_fraction(self) -> float | None:
        """Node-seconds in training steps / harvested node-seconds seen in this run (None
        before anything was harvested, or when the controller counts no steps)."""
        if self.stepping_s is None or self.harvested_s <= 0:
            return None
        return self.stepping_s / self.harvested_s


SECOND = 1.0  # Slurm gives a job's start in whole seconds


class IdleWatch:
    """When each node went idle, as the provider's snapshots show it: a node's idle stretch
    starts at the first snapshot that saw it idle after one that saw it busy (a node idle in
    the run's first snapshot went idle at a time nobody saw), and ends at the first that saw
    it held. The last few stretches of each node are kept, to date a start-up's idle."""

    KEEP = 16  # stretches per node: a start-up is matched within seconds of its block

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._since: dict[str, float | None] = {}  # idle now: since when (None: unknown)
        self._ended: dict[str, list[tuple[float | None, float]]] = {}
        self._last: float | None = None

    def see(self, snapshot: Snapshot | None) -> None:
        """Take a snapshot (the same one again changes nothing)."""
        if snapshot is None or snapshot.now == self._last:
            return
        self._last = now = snapshot.now
        ours = {n for job in snapshot.running if job.ours for n in job.nodes}
        for node in snapshot.nodes:
            idle = node.state is NodeState.IDLE and node.name not in ours
            if idle and node.name not in self._since:
                self._since[node.name] = now if node.name in self._seen else None
            elif not idle and node.name in self._since:
                stretches = self._ended.setdefault(node.name, [])
                stretches.append((self._since.pop(node.name), now))
                del stretches[: -self.KEEP]
            self._seen.add(node.name)

    def idle_before(self, node: str, taken: float | None, first_step: float) -> float | None:
        """When ``node`` went idle before a block took it at ``taken`` (its scheduler start,
        else its submission) and made its first step at ``first_step``: the start of the
        first idle stretch that ended (was seen held) at or after ``taken``, if that stretch
        began before it. None when not seen: no such stretch kept, or one whose start nobody
        saw."""
        if taken is None:
            return None
        for start, end in self._ended.get(node, []):
            if end >= taken - SECOND:
                ok = start is not None and start <= min(taken + SECOND, first_step)
                return start if ok else None
        return None


__all__ = [
    "RUN_ENV",
    "CampaignRunner",
    "IdleWatch",
    "RunOutcome",
    "campaign_identity",
    "check_parsl_options",
    "latest_checkpoint_step",
    "parsl_config",
    "site_profile",
]
