"""A campaign's state in SQLite, in its output folder, so that a killed driver can resume.

One writer (the runner's loop) commits after every change, so a ``kill -9`` at any moment loses
at most the last second of samples, never a finished job. Tables:

* ``meta``: when the campaign first started, how many runs (driver starts) it took, and which
  campaign owns the folder (``owner_name``, ``owner_sha256``, ``owner_file``: see
  :meth:`CampaignStore.claim`);
* ``jobs``: one row per job: its spec, status (``waiting``, ``running``, ``done``, ``failed``,
  ``pruned``: a search's trial stopped early, with the step of the report that decided it),
  the run that finished it, result (JSON), node-seconds and rescales so far;
* ``job_samples``: per sample and job: nodes held, ranks, samples/s, the node names, the last
  committed step (the progress column and its ETA, :meth:`CampaignStore.progress`);
* ``site_samples``: per sample: nodes native, harvested (in our blocks), assigned (the column
  is named ``training``, as before it was understood: nodes the controller gave to a job,
  ranks still starting included), idle, and ``stepping_s``: the node-seconds spent in training
  steps since the previous sample, from the ranks' own steps (the controller's phase log,
  :mod:`parsl_malleable.controller.phases`); NULL in rows written before steps were counted, and
  where the controller counts no steps;
* ``node_startups``: one row per run, block and node that reached a first training step: when
  the block was submitted and ran, the node's worker registered, its rank joined, its first
  step, and (when the driver saw it) when the node went idle before the block took it;
* ``job_metrics``: what each job's lead rank reported (``ctx.report``): one row per job, step
  and metric name, the value NULL for a NaN (SQLite keeps no NaN; infinities are kept). Each
  step holds the report of the timeline that was committed: :meth:`CampaignStore.record_metrics`
  applies the coordinator's changes (drop the steps above a rollback's or resume's start, then
  replace the steps reported again; :mod:`parsl_malleable.elastic.metric_book`). The campaign's
  ``metric`` (name and direction) is kept in ``meta`` for ``status`` and the results.

``status DIR`` reads it while a run writes (WAL mode). Each open runs SQLite's integrity check;
a damaged file, a full disk or a read-only folder raises
:class:`~parsl_malleable.errors.StateStoreError`, one line naming the file, what is intact and
how to recover (:mod:`.store_faults`).
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import time
from collections.abc import Iterable
from dataclasses import astuple, dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

from parsl_malleable.campaign.folder_owner import (
    CampaignIdentity,
    FolderNote,
    FolderOwnedError,
    owner_note,
)
from parsl_malleable.campaign.sample import SiteSample
from parsl_malleable.campaign.store_faults import damaged, fault, guarded
from parsl_malleable.elastic.metric_book import MetricRecord
from parsl_malleable.private_files import check_private_file

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    name TEXT PRIMARY KEY,
    spec TEXT NOT NULL,
    params TEXT NOT NULL,
    status TEXT NOT NULL,
    submissions INTEGER NOT NULL DEFAULT 0,
    finished_in_run INTEGER,
    resumed_from_step INTEGER,
    first_start REAL,
    finished_at REAL,
    node_seconds REAL NOT NULL DEFAULT 0,
    rescales INTEGER NOT NULL DEFAULT 0,
    result TEXT,
    error TEXT,
    warnings TEXT,
    pruned_step INTEGER
);
CREATE TABLE IF NOT EXISTS job_samples (
    t REAL NOT NULL, run INTEGER NOT NULL, job TEXT NOT NULL, nodes INTEGER NOT NULL,
    world INTEGER NOT NULL, rate REAL, node_names TEXT NOT NULL, step INTEGER
);
CREATE TABLE IF NOT EXISTS site_samples (
    t REAL NOT NULL, run INTEGER NOT NULL, total INTEGER NOT NULL, native INTEGER NOT NULL,
    harvested INTEGER NOT NULL, training INTEGER NOT NULL, idle INTEGER NOT NULL,
    stepping_s REAL
);
CREATE TABLE IF NOT EXISTS node_startups (
    run INTEGER NOT NULL, block TEXT NOT NULL, node TEXT NOT NULL, submitted REAL,
    running REAL, worker REAL, joined REAL, first_step REAL NOT NULL, idle REAL,
    PRIMARY KEY (run, block, node)
);
CREATE TABLE IF NOT EXISTS job_metrics (
    job TEXT NOT NULL, step INTEGER NOT NULL, key TEXT NOT NULL, value REAL,
    t REAL NOT NULL, run INTEGER NOT NULL, PRIMARY KEY (job, step, key)
);
"""

STATUSES = ("waiting", "running", "done", "failed", "pruned")
OWNER_KEYS = ("owner_name", "owner_sha256", "owner_file")


@dataclass(frozen=True)
class JobRow:
    """One job as stored."""

    name: str
    spec: dict[str, Any]
    params: dict[str, Any]
    status: str
    submissions: int
    finished_in_run: int | None
    resumed_from_step: int | None
    first_start: float | None
    finished_at: float | None
    node_seconds: float
    rescales: int
    result: dict[str, Any] | None
    error: str | None
    warnings: list[str]
    pruned_step: int | None = None


@dataclass(frozen=True)
class JobProgress:
    """How far a job got: its last committed step and its recent steps per second."""

    step: int
    steps_per_s: float | None

    def eta_s(self, total_steps: int | None) -> float | None:
        """Seconds left to ``total_steps`` at the recent rate (None: unknown)."""
        if total_steps is None or not self.steps_per_s:
            return None
        return max(0.0, (total_steps - self.step) / self.steps_per_s)


@dataclass(frozen=True)
class MetricSummary:
    """One job's reports of one metric: how many, the last one, the best (None without a
    direction, or when no finite value was reported) and how many were NaN or infinite."""

    reports: int
    final: float | None
    final_step: int | None
    best: float | None
    best_step: int | None
    nonfinite: int


# The phases of a node's start-up in ``startup.csv``, each the seconds between two stamps.
STARTUP_PHASES = ("queued_s", "worker_start_s", "rank_start_s", "first_step_s")


@dataclass(frozen=True)
class NodeStartupRow:
    """When one node of a block got through each phase up to its first training step (Unix
    seconds; None where the stamp is missing): ``submitted`` and ``running`` (the block's
    scheduler job), ``worker`` (the node's agents registered), ``joined`` (its rank joined its
    job), ``first_step``; ``idle``: when the driver first saw the node idle before the block
    took it (None: not seen, such as a node idle since before the driver's first poll)."""

    run: int
    block: str
    node: str
    submitted: float | None
    running: float | None
    worker: float | None
    joined: float | None
    first_step: float
    idle: float | None = None

    def seconds(self) -> dict[str, float | None]:
        """Seconds per phase: ``queued_s`` (submitted -> running), ``worker_start_s``
        (running -> worker), ``rank_start_s`` (worker -> joined), ``first_step_s`` (joined ->
        first step), and ``idle_to_first_step_s``; None where a stamp is missing."""
        marks = [self.submitted, self.running, self.worker, self.joined, self.first_step]
        out: dict[str, float | None] = {
            name: (b - a) if a is not None and b is not None else None
            for name, (a, b) in zip(STARTUP_PHASES, pairwise(marks), strict=True)
        }
        out["idle_to_first_step_s"] = self.first_step - self.idle if self.idle is not None else None
        return out


def summarise(series: list[tuple[int, float]], direction: str | None) -> MetricSummary:
    """The :class:`MetricSummary` of ``(step, value)`` pairs in step order; ``direction``
    ``max``, ``min`` or None (no best). NaN and infinities are never the best; the earliest
    step wins a tie."""
    usable = [(s, v) for s, v in series if math.isfinite(v)]
    best: tuple[int, float] | None = None
    if direction is not None and usable:
        sign = 1.0 if direction == "max" else -1.0
        best = max(usable, key=lambda sv: (sign * sv[1], -sv[0]))
    last = series[-1] if series else None
    return MetricSummary(
        reports=len(series),
        final=last[1] if last else None,
        final_step=last[0] if last else None,
        best=best[1] if best else None,
        best_step=best[0] if best else None,
        nonfinite=len(series) - len(usable),
    )


class CampaignStore:
    """The SQLite file of one campaign (``state.sqlite`` in the output folder)."""

    FILE = "state.sqlite"

    def __init__(self, folder: Path, *, read_only: bool = False) -> None:
        self.path = Path(folder) / self.FILE
        if read_only and not self.path.is_file():
            raise FileNotFoundError(f"{self.path}: no campaign state here")
        try:
            self.db = self._open(read_only)
        except (sqlite3.Error, OSError) as exc:
            error = fault(self.path, exc)
            if error is None:
                raise
            raise error from exc

    def _open(self, read_only: bool) -> sqlite3.Connection:
        """The connection, after an integrity check of the file (a damaged one is refused
        before anything reads or writes it: see :mod:`.store_faults`). The file and SQLite's
        files beside it must be this user's, links refused (another user may have planted them
        while the folder was open): :class:`~parsl_malleable.errors.UnsafePathError`."""
        for suffix in ("", "-wal", "-shm", "-journal"):
            check_private_file(self.path.with_name(self.path.name + suffix))
        if read_only:
            # A WAL database needs its -shm file, which a read-only folder cannot hold; no
            # writer can run there either, so the file cannot change under the reader.
            frozen = "&immutable=1" if not os.access(self.path.parent, os.W_OK) else ""
            uri = f"file:{self.path}?mode=ro{frozen}"
            db = sqlite3.connect(uri, uri=True, timeout=10, check_same_thread=False)
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fresh = not self.path.exists()
            db = sqlite3.connect(self.path, timeout=10, check_same_thread=False)
            if fresh:
                self.path.chmod(0o600)
        try:
            (verdict,) = db.execute("PRAGMA quick_check(1)").fetchone()
            if verdict != "ok":
                problem = verdict.removeprefix("*** in database main ***").strip()
                raise damaged(self.path, f"integrity check: {problem.splitlines()[0]}")
            if not read_only:
                db.execute("PRAGMA journal_mode=WAL")
                db.executescript(SCHEMA)
                self.db = db
                self._add_missing_columns()
                db.commit()
        except BaseException:
            db.close()
            raise
        return db

    def _add_missing_columns(self) -> None:
        # A folder written by an earlier version lacks later columns; CREATE TABLE IF NOT
        # EXISTS leaves its table as it was, so add them (empty) instead of failing on resume.
        have = {row[1] for row in self.db.execute("PRAGMA table_info(jobs)")}
        if "warnings" not in have:
            self.db.execute("ALTER TABLE jobs ADD COLUMN warnings TEXT")
        if "pruned_step" not in have:
            self.db.execute("ALTER TABLE jobs ADD COLUMN pruned_step INTEGER")
        sampled = {row[1] for row in self.db.execute("PRAGMA table_info(job_samples)")}
        if "step" not in sampled:
            self.db.execute("ALTER TABLE job_samples ADD COLUMN step INTEGER")
        site = {row[1] for row in self.db.execute("PRAGMA table_info(site_samples)")}
        if "stepping_s" not in site:
            # Old rows stay NULL: nobody counted their steps, and no figure is made up for them.
            self.db.execute("ALTER TABLE site_samples ADD COLUMN stepping_s REAL")

    @guarded
    def close(self) -> None:
        """Close the database."""
        self.db.close()

    # ----------------------------------------------------------------------- runs

    @guarded
    def meta(self, key: str) -> str | None:
        """A value of the meta table."""
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    @guarded
    def set_meta(self, key: str, value: str) -> None:
        """Set a value of the meta table."""
        self._set_meta(key, value)
        self.db.commit()

    def _set_meta(self, key: str, value: str) -> None:
        self.db.execute(
            "INSERT INTO meta(key, value) VALUES(?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    @guarded
    def begin_run(self, campaign_file: str, now: float | None = None) -> int:
        """Record a driver start; its run number (1 for the first)."""
        now = time.time() if now is None else now
        run = int(self.meta("runs") or 0) + 1
        if self.meta("started_at") is None:
            self._set_meta("started_at", repr(now))
        self._set_meta("runs", str(run))
        self._set_meta("campaign_file", campaign_file)
        self._set_meta(f"run{run}_started_at", repr(now))
        self.db.commit()
        return run

    @guarded
    def end_run(self, run: int, outcome: str, now: float | None = None) -> None:
        """Record how run ``run`` ended (``finished``, ``interrupted``, ``time limit``...)."""
        self._set_meta(f"run{run}_ended_at", repr(time.time() if now is None else now))
        self._set_meta(f"run{run}_outcome", outcome)
        self.db.commit()

    @guarded
    def owner(self) -> CampaignIdentity | None:
        """The campaign recorded as the folder's owner (None: none recorded yet)."""
        name, sha256, file = (self.meta(k) for k in OWNER_KEYS)
        if name is None or sha256 is None:
            return None
        return CampaignIdentity(name, sha256, file or None)

    @guarded
    def check_owner(self, current: CampaignIdentity, *, adopt: bool = False) -> FolderNote | None:
        """Whether ``current`` may run into this folder (:func:`~.folder_owner.owner_note`, on
        the owner this folder records): a note for the log (None: nothing to say), or
        :class:`~.folder_owner.FolderOwnedError`. Writes nothing."""
        return owner_note(
            self.path.parent, self.owner(), self.meta("campaign_file"), current, adopt
        )

    @guarded
    def claim(self, current: CampaignIdentity, *, adopt: bool = False) -> FolderNote | None:
        """:meth:`check_owner`, then record ``current`` as the owner; the note for the log."""
        note = self.check_owner(current, adopt=adopt)
        values = (current.name, current.sha256, current.file or "")
        for key, value in zip(OWNER_KEYS, values, strict=True):
            self._set_meta(key, value)
        self.db.commit()
        return note

    @property
    @guarded
    def started_at(self) -> float | None:
        """When the first run started."""
        value = self.meta("started_at")
        return float(value) if value is not None else None

    # ----------------------------------------------------------------------- jobs

    @guarded
    def sync_jobs(self, jobs: Iterable[tuple[str, dict[str, Any], dict[str, Any]]]) -> list[str]:
        """Insert jobs not stored yet (``(name, spec, params)``); return the names of stored
        jobs whose spec changed since (they keep their state: a finished job is not rerun)."""
        changed = []
        for name, spec, params in jobs:
            row = self.db.execute("SELECT spec FROM jobs WHERE name = ?", (name,)).fetchone()
            text = json.dumps(spec, sort_keys=True)
            if row is None:
                self.db.execute(
                    "INSERT INTO jobs(name, spec, params, status) VALUES(?, ?, ?, 'waiting')",
                    (name, text, json.dumps(params, sort_keys=True)),
                )
            elif row[0] != text:
                changed.append(name)
        self.db.commit()
        return changed

    @guarded
    def jobs(self) -> list[JobRow]:
        """Every job, in insertion order."""
        rows = self.db.execute(
            "SELECT name, spec, params, status, submissions, finished_in_run, resumed_from_step,"
            " first_start, finished_at, node_seconds, rescales, result, error, warnings,"
            " pruned_step FROM jobs ORDER BY rowid"
        ).fetchall()
        return [
            JobRow(
                name=r[0],
                spec=json.loads(r[1]),
                params=json.loads(r[2]),
                status=r[3],
                submissions=r[4],
                finished_in_run=r[5],
                resumed_from_step=r[6],
                first_start=r[7],
                finished_at=r[8],
                node_seconds=r[9],
                rescales=r[10],
                result=json.loads(r[11]) if r[11] else None,
                error=r[12],
                warnings=json.loads(r[13]) if r[13] else [],
                pruned_step=r[14],
            )
            for r in rows
        ]

    @guarded
    def mark_submitted(self, name: str, resumed_from_step: int | None) -> None:
        """The job was handed to the controller in this run."""
        self.db.execute(
            "UPDATE jobs SET status = 'running', submissions = submissions + 1,"
            " resumed_from_step = COALESCE(?, resumed_from_step) WHERE name = ?",
            (resumed_from_step, name),
        )
        self.db.commit()

    @guarded
    def finish(
        self,
        name: str,
        run: int,
        *,
        result: Any = None,
        error: str | None = None,
        warnings: Iterable[str] = (),
    ) -> None:
        """The job ended: ``done`` with its result, or ``failed`` with the error; ``warnings``
        are what its ranks reported on the way (a resume that skipped a damaged checkpoint, a
        checkpoint that could not be written), kept with the result."""
        self.db.execute(
            "UPDATE jobs SET status = ?, finished_in_run = ?, finished_at = ?, result = ?,"
            " error = ?, warnings = ? WHERE name = ?",
            (
                "failed" if error is not None else "done",
                run,
                time.time(),
                json.dumps(result, default=str) if error is None else None,
                error,
                json.dumps(list(warnings)),
                name,
            ),
        )
        self.db.commit()

    @guarded
    def prune(self, name: str, run: int, step: int | None) -> None:
        """A search's pruner stopped the job at the report of ``step`` (None: not known, the
        study had decided before the driver died): status ``pruned``, never run again."""
        self.db.execute(
            "UPDATE jobs SET status = 'pruned', finished_in_run = ?, finished_at = ?,"
            " pruned_step = ? WHERE name = ?",
            (run, time.time(), step, name),
        )
        self.db.commit()

    @guarded
    def mark_waiting(self, names: Iterable[str]) -> list[str]:
        """Put jobs ``names`` back to ``waiting`` for a retry in place (``parsl-malleable
        retry``): their result, error, warnings, end and resume step are cleared, their
        node-seconds, rescales and driver runs kept (the node-hours were spent). The names
        that are stored (others are left out)."""
        marked = []
        for name in names:
            cursor = self.db.execute(
                "UPDATE jobs SET status = 'waiting', finished_in_run = NULL, finished_at = NULL,"
                " result = NULL, error = NULL, warnings = NULL, resumed_from_step = NULL,"
                " pruned_step = NULL"
                " WHERE name = ?",
                (name,),
            )
            if cursor.rowcount:
                marked.append(name)
        self.db.commit()
        return marked

    # -------------------------------------------------------------------- samples

    @guarded
    def record(
        self,
        t: float,
        run: int,
        dt: float,
        jobs: dict[str, dict[str, Any]],
        site: dict[str, Any] | None,
    ) -> None:
        """One sample: per job ``nodes``, ``world``, ``rate``, ``node_names``, ``step`` (the
        last committed one, -1 before any), ``rescales`` (the total so far in this run);
        ``dt`` seconds since the last sample (node-seconds). ``site``:
        :meth:`~.sample.SiteCounts.as_dict` (``total``, ``native``, ``harvested``,
        ``assigned``, ``idle``, ``stepping_s``: None where steps were not counted); a mapping
        that names ``assigned`` ``training``, as callers did before, is taken too."""
        for name, info in jobs.items():
            self.db.execute(
                "INSERT INTO job_samples(t, run, job, nodes, world, rate, node_names, step)"
                " VALUES(?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    t,
                    run,
                    name,
                    info["nodes"],
                    info["world"],
                    info.get("rate"),
                    ",".join(info.get("node_names", ())),
                    info["step"] if isinstance(info.get("step"), int) else None,
                ),
            )
            self.db.execute(
                "UPDATE jobs SET node_seconds = node_seconds + ?,"
                " first_start = COALESCE(first_start, CASE WHEN ? > 0 THEN ? END),"
                " rescales = rescales + ? WHERE name = ?",
                (
                    info["nodes"] * dt,
                    info["world"],
                    t,
                    info.get("new_rescales", 0),
                    name,
                ),
            )
        if site is not None:
            assigned = site["assigned"] if "assigned" in site else site["training"]
            stepping = site.get("stepping_s")
            self.db.execute(
                "INSERT INTO site_samples(t, run, total, native, harvested, training, idle,"
                " stepping_s) VALUES(?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    t,
                    run,
                    site["total"],
                    site["native"],
                    site["harvested"],
                    assigned,
                    site["idle"],
                    None if stepping is None else float(stepping),
                ),
            )
        self.db.commit()

    @guarded
    def job_samples(self) -> list[tuple[float, int, str, int, int, float | None, str]]:
        """``(t, run, job, nodes, world, rate, node names)`` in time order."""
        return self.db.execute(
            "SELECT t, run, job, nodes, world, rate, node_names FROM job_samples ORDER BY t"
        ).fetchall()

    @guarded
    def progress(self, window_s: float = 60.0) -> dict[str, JobProgress]:
        """Per job with a committed step: its last step and its steps/s over the last
        ``window_s`` seconds of its latest run (None: too few samples to tell). Called once a
        second by the live view: only the last samples of each job are read."""
        try:
            # SQLite takes the bare columns of a MAX() aggregate from the row holding the max.
            last = self.db.execute(
                "SELECT job, run, MAX(t), step FROM job_samples WHERE step >= 0 GROUP BY job"
            ).fetchall()
        except sqlite3.OperationalError:  # a folder from before steps were sampled, read-only
            return {}
        out = {}
        for job, run, t_last, step_last in last:
            # Only the latest run: a resume goes back to its checkpoint, and the time between
            # two runs is no training time.
            first = self.db.execute(
                "SELECT t, step FROM job_samples WHERE job = ? AND run = ? AND step >= 0"
                " AND t >= ? ORDER BY t LIMIT 1",
                (job, run, t_last - window_s),
            ).fetchone()
            t_first, step_first = first
            rate = (step_last - step_first) / (t_last - t_first) if t_last > t_first else None
            out[job] = JobProgress(step=step_last, steps_per_s=rate if rate else None)
        return out

    @guarded
    def site_samples(self) -> list[SiteSample]:
        """``(t, run, total, native, harvested, assigned, idle, stepping_s)`` in time order
        (:data:`~.sample.SiteSample`); ``stepping_s`` None where steps were not counted."""
        try:
            return self.db.execute(
                "SELECT t, run, total, native, harvested, training, idle, stepping_s"
                " FROM site_samples ORDER BY t"
            ).fetchall()
        except sqlite3.OperationalError as exc:
            if "stepping_s" not in str(exc):
                raise
        # A folder from before steps were counted, opened read-only (so not migrated).
        rows = self.db.execute(
            "SELECT t, run, total, native, harvested, training, idle FROM site_samples ORDER BY t"
        ).fetchall()
        return [(*row, None) for row in rows]

    # ------------------------------------------------------------------ start-ups

    @guarded
    def record_startups(self, rows: Iterable[NodeStartupRow]) -> None:
        """Keep each node's start-up (one row per run, block and node; a row given again
        replaces the stored one, so a stamp that came late is kept)."""
        self.db.executemany(
            "INSERT OR REPLACE INTO node_startups(run, block, node, submitted, running, worker,"
            " joined, first_step, idle) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [astuple(r) for r in rows],  # the fields in the table's column order
        )
        self.db.commit()

    @guarded
    def node_startups(self) -> list[NodeStartupRow]:
        """Every stored start-up, in the order of the first steps."""
        try:
            rows = self.db.execute(
                "SELECT run, block, node, submitted, running, worker, joined, first_step, idle"
                " FROM node_startups ORDER BY first_step, run, block, node"
            ).fetchall()
        except sqlite3.OperationalError:  # a folder from before start-ups, opened read-only
            return []
        return [NodeStartupRow(*row) for row in rows]

    # -------------------------------------------------------------------- metrics

    @guarded
    def record_metrics(
        self, job: str, run: int, cut: int | None, records: Iterable[MetricRecord]
    ) -> int:
        """Apply a job's reported metrics as the coordinator changed them: drop the stored
        steps above ``cut`` (a rollback's or a resume's start; None: none), then store
        ``records``, each replacing whatever its step held; a record equal to what its step
        holds (a resumed rank re-sends its committed reports) keeps the stored time and run. One
        transaction; the rows written."""
        if cut is not None:
            self.db.execute("DELETE FROM job_metrics WHERE job = ? AND step > ?", (job, cut))
        written = 0
        for record in records:
            values = {k: None if math.isnan(v) else v for k, v in record.values.items()}
            stored = self.db.execute(
                "SELECT key, value FROM job_metrics WHERE job = ? AND step = ?", (job, record.step)
            ).fetchall()
            if stored and dict(stored) == values:
                # The same report again: a resumed rank re-sends its committed reports to a new
                # driver, which would stamp every earlier one with its own run and time.
                continue
            self.db.execute(
                "DELETE FROM job_metrics WHERE job = ? AND step = ?", (job, record.step)
            )
            for key, value in values.items():
                self.db.execute(
                    "INSERT INTO job_metrics(job, step, key, value, t, run)"
                    " VALUES(?, ?, ?, ?, ?, ?)",
                    (job, record.step, key, value, record.time, run),
                )
                written += 1
        self.db.commit()
        return written

    def _metric_rows(self, column: str | None, value: str | None) -> list[tuple[Any, ...]]:
        """Rows of ``job_metrics`` (all, or those whose ``column``, ``job`` or ``key``, is
        ``value``) by job, step and key."""
        select = "SELECT job, step, key, value, t, run FROM job_metrics"
        order = " ORDER BY job, step, key"
        queries = {
            None: (select + order, ()),
            "job": (select + " WHERE job = ?" + order, (value,)),
            "key": (select + " WHERE key = ?" + order, (value,)),
        }
        sql, args = queries[column]
        try:
            return self.db.execute(sql, args).fetchall()
        except sqlite3.OperationalError:  # a folder from before metrics, opened read-only
            return []

    @guarded
    def metrics(self, job: str | None = None) -> list[dict[str, Any]]:
        """The stored reports, one dict per job and step (``job``, ``step``, ``time``, ``run``,
        then the metrics; NaN where NaN was reported), by job and step."""
        rows = self._metric_rows("job", job) if job else self._metric_rows(None, None)
        out: list[dict[str, Any]] = []
        for name, step, key, value, t, run in rows:
            if not out or (out[-1]["job"], out[-1]["step"]) != (name, step):
                out.append({"job": name, "step": step, "time": t, "run": run})
            out[-1][key] = math.nan if value is None else value
        return out

    @guarded
    def metric_series(self, key: str) -> dict[str, list[tuple[int, float]]]:
        """Per job, ``(step, value)`` of metric ``key`` in step order (NaN where reported)."""
        out: dict[str, list[tuple[int, float]]] = {}
        for job, step, _key, value, _t, _run in self._metric_rows("key", key):
            out.setdefault(job, []).append((step, math.nan if value is None else value))
        return out

    @guarded
    def metric_names(self) -> list[str]:
        """Every metric name reported by some job, by how many rows carry it (most first)."""
        try:
            rows = self.db.execute(
                "SELECT key, COUNT(*) FROM job_metrics GROUP BY key ORDER BY 2 DESC, 1"
            ).fetchall()
        except sqlite3.OperationalError:
            return []
        return [row[0] for row in rows]

    @guarded
    def metric_summary(self, key: str, direction: str | None) -> dict[str, MetricSummary]:
        """Per job that reported ``key``: its :class:`MetricSummary` (best by ``direction``)."""
        return {job: summarise(s, direction) for job, s in self.metric_series(key).items()}

    @guarded
    def set_metric_spec(self, name: str | None, direction: str | None) -> None:
        """Record the campaign's metric (None: none declared) for ``status`` and the results."""
        self._set_meta("metric_name", name or "")
        self._set_meta("metric_direction", direction or "")
        self.db.commit()

    @guarded
    def metric_spec(self) -> tuple[str, str] | None:
        """``(name, direction)`` of the campaign's metric, None when it declares none."""
        name, direction = self.meta("metric_name"), self.meta("metric_direction")
        return (name, direction) if name and direction else None

    @guarded
    def best_trial(self) -> tuple[str, MetricSummary] | None:
        """The job with the best value of the campaign's metric so far, and its summary; None
        without a declared metric or a finite report of it."""
        spec = self.metric_spec()
        if spec is None:
            return None
        name, direction = spec
        found = [
            (j, m) for j, m in self.metric_summary(name, direction).items() if m.best is not None
        ]
        if not found:
            return None
        sign = 1.0 if direction == "max" else -1.0
        return max(found, key=lambda jm: sign * (jm[1].best or 0.0))


__all__ = [
    "STARTUP_PHASES",
    "STATUSES",
    "CampaignIdentity",
    "CampaignStore",
    "FolderNote",
    "FolderOwnedError",
    "JobProgress",
    "JobRow",
    "MetricSummary",
    "NodeStartupRow",
    "summarise",
]
