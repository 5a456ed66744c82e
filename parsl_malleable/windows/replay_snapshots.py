"""Scheduler snapshots from a simulated replay, taken at its scheduling events.

A :class:`ReplayState` walks the replay's events in time order and keeps the running set,
the pending queue (in the simulator's priority order: input order) and the idle nodes up to
date, so a :class:`~parsl_malleable.snapshot.Snapshot` at any event costs one list
assembly. Node ``i`` of the simulator is named :func:`~parsl_malleable.sim.trace_replay.node_name`
``(i)`` and listed in id order, so the planner numbers nodes exactly as the replay did.
"""

from __future__ import annotations

import math

import numpy as np

from parsl_malleable.sim.trace_replay import SimResult, node_name
from parsl_malleable.snapshot import Node, NodeState, PendingJob, RunningJob, Snapshot
from parsl_malleable.traces.schema import JobTrace


class ReplayState:
    """The state of a replayed machine, advanced event by event with :meth:`advance`."""

    def __init__(self, trace: JobTrace, sim: SimResult) -> None:
        jobs = trace.jobs
        frame = sim.jobs
        self.rows = np.flatnonzero(np.isfinite(frame["sim_start"].to_numpy()))
        self.submit = frame["submit"].to_numpy(dtype=float)
        self.start = frame["sim_start"].to_numpy(dtype=float)
        self.end = frame["sim_end"].to_numpy(dtype=float)
        walltime = jobs["walltime"].to_numpy(dtype=float)
        self.walltime = np.where(np.isfinite(walltime) & (walltime > 0), walltime, np.nan)
        self.nodes_of = {int(r): sim.node_ids(int(r)) for r in self.rows}
        self.names = [node_name(i, sim.nodes) for i in range(sim.nodes)]
        self._id = {name: i for i, name in enumerate(self.names)}
        self._idle_node = [Node(n, NodeState.IDLE) for n in self.names]
        self._busy_node = [Node(n, NodeState.ALLOCATED) for n in self.names]
        queue = jobs["queue"].astype(str).to_numpy()
        user = jobs["user"].astype(str).to_numpy()
        size = jobs["nodes"].to_numpy()
        self._running: dict[int, RunningJob] = {}
        self._pending: dict[int, PendingJob] = {}
        for r in self.rows.tolist():
            limit = None if math.isnan(self.walltime[r]) else float(self.walltime[r])
            self._running[r] = RunningJob(
                str(r),
                tuple(self.names[i] for i in self.nodes_of[r]),
                float(self.start[r]),
                limit,
                partition=queue[r],
                user=user[r],
            )
            self._pending[r] = PendingJob(
                str(r), int(size[r]), limit, float(self.submit[r]), partition=queue[r], user=user[r]
            )
        # one sorted stream per kind of event: (time, row)
        rows = self.rows
        self._submits = rows[np.argsort(self.submit[rows], kind="stable")]
        self._starts = rows[np.argsort(self.start[rows], kind="stable")]
        self._ends = rows[np.argsort(self.end[rows], kind="stable")]
        self._ptr = [0, 0, 0]
        self.queued: set[int] = set()
        self.running: set[int] = set()
        self.busy = np.zeros(sim.nodes, dtype=bool)
        self.now = -math.inf

    def event_times(self) -> np.ndarray:
        """Every distinct time at which a job is submitted, starts or ends."""
        r = self.rows
        return np.unique(np.concatenate([self.submit[r], self.start[r], self.end[r]]))

    def advance(self, t: float) -> None:
        """Apply every event at or before ``t`` (ends before starts at one instant)."""
        if t < self.now:
            raise ValueError(f"cannot go back from {self.now} to {t}")
        self.now = t
        for stream, times, kind in (
            (self._ends, self.end, "end"),
            (self._submits, self.submit, "submit"),
            (self._starts, self.start, "start"),
        ):
            idx = {"end": 2, "submit": 0, "start": 1}[kind]
            p = self._ptr[idx]
            while p < len(stream) and times[stream[p]] <= t:
                r = int(stream[p])
                if kind == "submit":
                    self.queued.add(r)
                elif kind == "start":
                    self.queued.discard(r)
                    if self.end[r] > t:
                        self.running.add(r)
                        self.busy[self.nodes_of[r]] = True
                elif r in self.running:
                    self.running.discard(r)
                    self.busy[self.nodes_of[r]] = False
                p += 1
            self._ptr[idx] = p

    def ids_of(self, names: list[str]) -> np.ndarray:
        """Node ids of the named nodes."""
        return np.fromiter((self._id[n] for n in names), dtype=np.int64, count=len(names))

    def idle_ids(self) -> np.ndarray:
        """Ids of the nodes idle now."""
        return np.flatnonzero(~self.busy)

    def snapshot(self, backfill: str) -> Snapshot:
        """The machine now, as the planner sees it."""
        busy = self.busy
        nodes = [self._busy_node[i] if b else self._idle_node[i] for i, b in enumerate(busy)]
        return Snapshot(
            now=self.now,
            nodes=nodes,
            running=[self._running[r] for r in sorted(self.running)],
            pending=[self._pending[r] for r in sorted(self.queued)],
            backfill=backfill,
        )

    def finished_before(self, t: float) -> np.ndarray:
        """Rows of the jobs that ended at or before ``t`` (the history a live site would have)."""
        r = self.rows
        return r[self.end[r] <= t]
