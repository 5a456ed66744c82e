"""``simulate``: replay a job trace through a scheduling policy and collect the idle holes."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from parsl_malleable.errors import ConfigError
from parsl_malleable.inputs import finite_number, whole_count
from parsl_malleable.sim.engine import (
    C_ARRIVAL_SCANS,
    C_COMPRESSIONS,
    C_FULL_SCANS,
    C_PROFILE_BUILDS,
    C_QUEUE_MAX,
    POLICIES,
    run_schedule,
)
from parsl_malleable.sim.stats import SimStats, hole_summary, wait_summary
from parsl_malleable.traces.schema import IDLE_COLUMNS, MAX_WHERE, JobTrace

MIN_PLAN_SECONDS = 1.0  # shortest duration a plan reserves (a zero-length slot holds nothing)
END_CUTS = ("last_submit", "last_end")
DROP_REASONS = ("unknown_times", "negative_runtime", "no_nodes", "too_big")


class SimulationError(ConfigError):
    """A simulation was asked for with invalid settings (policy, machine size, window)."""


def node_name(i: int, n_nodes: int) -> str:
    """Name of simulated node ``i``: ``n`` plus the id zero-padded to at least 4 digits."""
    return f"n{i:0{max(4, len(str(n_nodes - 1)))}d}"


@dataclass
class SimResult:
    """What :func:`simulate` returns.

    ``jobs`` is aligned with the input (same index and rows): ``job_id``, ``submit``, ``nodes``,
    ``sim_start``, ``sim_end``, ``sim_wait`` (NaN for dropped jobs), ``reservation`` (the first
    reservation the policy made for the job, NaN when it started without one), ``backfilled``
    (started while an earlier job waited) and ``dropped`` (reason, empty when simulated).

    Idle intervals are kept as runs, clipped to the statistics window: ``idle_count[i]``
    consecutive nodes from ``idle_first[i]``, all idle on ``[idle_start[i], idle_end[i])``
    (nodes freed together by one job share a run, so this stays small);
    :meth:`idle_arrays` expands them to one row per node and :attr:`idle` builds the
    :data:`IDLE_COLUMNS` frame with node names from :func:`node_name` on first use.
    """

    jobs: pd.DataFrame
    stats: SimStats
    timing: dict[str, float]
    nodes: int
    policy: str
    idle_first: np.ndarray
    idle_count: np.ndarray
    idle_start: np.ndarray
    idle_end: np.ndarray
    run_off: np.ndarray  # per input row: first run of its node ids (-1 when dropped)
    run_cnt: np.ndarray
    run_first: np.ndarray
    run_len: np.ndarray
    _idle_frame: pd.DataFrame | None = field(default=None, repr=False)

    def idle_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(node id, idle_start, idle_end)`` with one row per node and hole (unsorted)."""
        cnt = self.idle_count.astype(np.int64)
        node = np.repeat(self.idle_first.astype(np.int64), cnt)
        node += np.arange(len(node)) - np.repeat(np.cumsum(cnt) - cnt, cnt)
        return node, np.repeat(self.idle_start, cnt), np.repeat(self.idle_end, cnt)

    @property
    def idle(self) -> pd.DataFrame:
        """Idle intervals in the :data:`IDLE_COLUMNS` schema, sorted by (idle_start, node)."""
        if self._idle_frame is None:
            node, start, end = self.idle_arrays()
            order = np.lexsort((node, start))
            names = np.array([node_name(i, self.nodes) for i in range(self.nodes)], dtype=object)
            self._idle_frame = pd.DataFrame(
                {
                    "node": pd.array(names[node[order]], dtype="string"),
                    "idle_start": start[order],
                    "idle_end": end[order],
                }
            ).astype(IDLE_COLUMNS)
        return self._idle_frame

    def node_ids(self, row: int) -> np.ndarray:
        """Node ids the job in input row ``row`` (position, not label) ran on."""
        off, cnt = int(self.run_off[row]), int(self.run_cnt[row])
        if off < 0:
            return np.empty(0, dtype=np.int64)
        parts = [
            np.arange(f, f + c, dtype=np.int64)
            for f, c in zip(
                self.run_first[off : off + cnt], self.run_len[off : off + cnt], strict=True
            )
        ]
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)

    def busy_intervals(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(node, start, end)`` of every node of every simulated job (unclipped)."""
        starts = self.jobs["sim_start"].to_numpy()
        ends = self.jobs["sim_end"].to_numpy()
        rows = np.flatnonzero(self.run_off >= 0)
        counts = self.run_cnt[rows]
        runs = np.concatenate(
            [np.arange(self.run_off[r], self.run_off[r] + self.run_cnt[r]) for r in rows]
            or [np.empty(0, dtype=np.int64)]
        )
        run_row = np.repeat(rows, counts)
        lens = self.run_len[runs].astype(np.int64)
        node = np.repeat(self.run_first[runs].astype(np.int64), lens)
        node += np.arange(len(node)) - np.repeat(np.cumsum(lens) - lens, lens)
        row = np.repeat(run_row, lens)
        return node, starts[row], ends[row]


def simulate(
    trace: JobTrace,
    policy: str = "easy",
    *,
    nodes: int | None = None,
    warmup: float = 0.0,
    end_cut: str = "last_submit",
    time_min: np.ndarray | None = None,
) -> SimResult:
    """Replay ``trace`` on ``nodes`` nodes (default: the trace's machine) under ``policy``.

    ``policy`` is ``"fcfs"`` (no backfill), ``"easy"`` or ``"conservative"``. Plans use each
    job's requested walltime (its runtime when the walltime is unknown, at least 1 s); a job runs
    its recorded runtime capped at its walltime on the ``nodes`` (allocated) count of the trace.
    Jobs with unknown submit/start/end, negative runtime, no nodes or more nodes than the machine
    are dropped, counted in ``stats.dropped`` and named (first job ids) in
    ``stats.dropped_jobs``; when no job is left a :class:`SimulationError` says why.

    The statistics window starts at the first submit plus ``warmup`` seconds and ends at the last
    submit (``end_cut="last_submit"``: the drain after the last arrival is not real idleness) or
    at the last job end (``"last_end"``). Idle intervals are clipped to it.

    ``time_min`` (one value per job row, NaN for none) is Slurm's ``--time-min``: under EASY a
    job that does not fit before the head's reservation with its walltime starts when the hole
    lasts at least that long, its limit cut to the hole (the ``sim_limit`` column).
    """
    t0 = time.perf_counter()
    if policy not in POLICIES:
        raise SimulationError(f"unknown policy {policy!r}; choose one of {sorted(POLICIES)}")
    if end_cut not in END_CUTS:
        raise SimulationError(f"unknown end_cut {end_cut!r}; choose one of {list(END_CUTS)}")
    n_nodes = whole_count(
        trace.machine.nodes if nodes is None else nodes,
        "machine size (nodes)",
        minimum=1,
        error=SimulationError,
    )
    warmup = finite_number(warmup, "warmup (seconds)", ge=0, error=SimulationError)

    jobs = trace.jobs
    n_in = len(jobs)
    submit = jobs["submit"].to_numpy(dtype=np.float64)
    rec_start = jobs["start"].to_numpy(dtype=np.float64)
    rec_end = jobs["end"].to_numpy(dtype=np.float64)
    walltime = jobs["walltime"].to_numpy(dtype=np.float64)
    k_all = jobs["nodes"].to_numpy(dtype=np.int64)

    reason = np.zeros(n_in, dtype=np.int8)  # 0 = kept, else 1 + index into DROP_REASONS
    runtime = rec_end - rec_start
    masks = (
        ~(np.isfinite(submit) & np.isfinite(rec_start) & np.isfinite(rec_end)),
        runtime < 0,
        k_all <= 0,
        k_all > n_nodes,
    )
    for code, mask in enumerate(masks, start=1):
        reason[(reason == 0) & mask] = code
    rows = np.flatnonzero(reason == 0)
    dropped = {why: int(np.count_nonzero(reason == c)) for c, why in enumerate(DROP_REASONS, 1)}
    ids = jobs["job_id"].to_numpy()
    dropped_jobs = {
        why: [int(i) for i in ids[reason == c][:MAX_WHERE]]
        for c, why in enumerate(DROP_REASONS, 1)
        if dropped[why]
    }
    if not len(rows):
        raise SimulationError(_nothing_to_simulate(n_in, dropped, dropped_jobs))

    run = runtime[rows]
    wt = walltime[rows]
    wt_known = np.isfinite(wt) & (wt > 0)
    est = np.maximum(np.where(wt_known, wt, run), MIN_PLAN_SECONDS)
    adjusted = {
        "walltime_unknown": int(np.count_nonzero(~wt_known)),
        "runtime_capped": int(np.count_nonzero(run > est)),
    }
    est_min = est.copy()
    if time_min is not None:
        wanted = np.asarray(time_min, dtype=np.float64)
        if wanted.shape != (n_in,):
            raise SimulationError(f"time_min needs one value per job ({n_in}); got {wanted.shape}")
        wanted = wanted[rows]
        given = np.isfinite(wanted)
        if np.any(wanted[given] <= 0):
            raise SimulationError("time_min must be > 0 seconds where given")
        est_min = np.where(given, np.minimum(np.maximum(wanted, MIN_PLAN_SECONDS), est), est)
    sub = submit[rows]
    k = k_all[rows]
    t_begin = float(sub[0]) if len(rows) else 0.0

    t1 = time.perf_counter()
    out = run_schedule(
        n_nodes,
        POLICIES[policy],
        sub,
        run,
        est,
        k,
        0,
        np.zeros(1, dtype=np.int64),
        np.zeros(0, dtype=np.int64),
        t_begin,
        est_min,
    )
    t2 = time.perf_counter()
    (start, end, first_res, backfilled, run_off, run_cnt, run_first, run_len) = out[:8]
    idle_first, idle_count, idle_s, idle_e, last_free, counters = out[8:]

    # statistics window, and the holes still open when the last job ended
    last_end = float(end.max()) if len(end) else t_begin
    w_start = t_begin + float(warmup)
    w_end = float(sub[-1]) if (end_cut == "last_submit" and len(sub)) else last_end
    w_end = max(w_end, w_start)
    horizon = max(last_end, w_end)
    o_first, o_count = _runs_of_equal(np.flatnonzero(last_free < horizon), last_free)
    idle_first = np.concatenate([idle_first, o_first])
    idle_count = np.concatenate([idle_count, o_count])
    idle_s = np.concatenate([idle_s, last_free[o_first]])
    idle_e = np.concatenate([idle_e, np.full(len(o_first), horizon)])
    idle_s = np.maximum(idle_s, w_start)
    idle_e = np.minimum(idle_e, w_end)
    keep = idle_e > idle_s
    idle_first, idle_count = idle_first[keep], idle_count[keep]
    idle_s, idle_e = idle_s[keep], idle_e[keep]

    lengths = idle_e - idle_s
    pct, hours = hole_summary(lengths, idle_count)
    wait_mean, wait_median, bsld = wait_summary(sub, start, end)
    span = (w_end - w_start) * n_nodes
    idle_fraction = float((lengths * idle_count).sum() / span) if span > 0 else float("nan")

    frame = pd.DataFrame(
        {
            "job_id": jobs["job_id"].to_numpy(),
            "submit": submit,
            "nodes": k_all,
            "sim_start": _scatter(n_in, rows, start),
            "sim_end": _scatter(n_in, rows, end),
            "sim_wait": _scatter(n_in, rows, start - sub),
            "sim_limit": _scatter(n_in, rows, np.where(np.isnan(start), np.nan, est)),
            "reservation": _scatter(n_in, rows, first_res),
            "backfilled": _scatter(n_in, rows, backfilled, fill=False),
            "dropped": pd.Categorical.from_codes(reason, categories=["", *DROP_REASONS]).astype(
                "string"
            ),
        },
        index=jobs.index,
    )
    row_off = np.full(n_in, -1, dtype=np.int64)
    row_off[rows] = run_off
    row_cnt = np.zeros(n_in, dtype=np.int64)
    row_cnt[rows] = run_cnt
    t3 = time.perf_counter()

    timing = {
        "prepare_s": t1 - t0,
        "kernel_s": t2 - t1,
        "post_s": t3 - t2,
        "total_s": t3 - t0,
    }
    stats = SimStats(
        policy=policy,
        nodes=n_nodes,
        jobs_in=n_in,
        jobs_simulated=len(rows),
        dropped=dropped,
        adjusted=adjusted,
        dropped_jobs=dropped_jobs,
        window_start=w_start,
        window_end=w_end,
        idle_fraction=idle_fraction,
        holes=int(idle_count.sum()),
        hole_p25=pct["p25"],
        hole_p50=pct["p50"],
        hole_p75=pct["p75"],
        hole_p90=pct["p90"],
        hole_node_hours=hours,
        wait_mean=wait_mean,
        wait_median=wait_median,
        bounded_slowdown_mean=bsld,
        backfilled=int(np.count_nonzero(backfilled)),
        makespan=last_end - t_begin,
        seconds=timing["total_s"],
        jobs_per_second=len(rows) / timing["total_s"] if timing["total_s"] > 0 else float("inf"),
        extra={
            "full_scans": int(counters[C_FULL_SCANS]),
            "arrival_scans": int(counters[C_ARRIVAL_SCANS]),
            "profile_builds": int(counters[C_PROFILE_BUILDS]),
            "queue_max": int(counters[C_QUEUE_MAX]),
            "compressions": int(counters[C_COMPRESSIONS]),
            "hole_runs": len(lengths),
        },
    )
    return SimResult(
        jobs=frame,
        stats=stats,
        timing=timing,
        nodes=n_nodes,
        policy=policy,
        idle_first=idle_first,
        idle_count=idle_count,
        idle_start=idle_s,
        idle_end=idle_e,
        run_off=row_off,
        run_cnt=row_cnt,
        run_first=run_first,
        run_len=run_len,
    )


def _nothing_to_simulate(n_in: int, dropped: dict[str, int], where: dict[str, list[int]]) -> str:
    if not n_in:
        return "the trace has no jobs: nothing to simulate"
    reasons = "; ".join(
        f"{why} {count} (jobs {', '.join(map(str, where[why]))})"
        for why, count in dropped.items()
        if count
    )
    return f"none of the {n_in} jobs can be simulated: {reasons}"


def _runs_of_equal(ids: np.ndarray, value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Split ascending node ``ids`` into runs of consecutive ids with equal ``value[id]``."""
    if len(ids) == 0:
        return np.empty(0, dtype=np.int32), np.empty(0, dtype=np.int32)
    v = value[ids]
    brk = np.r_[True, (np.diff(ids) != 1) | (v[1:] != v[:-1])]
    starts = np.flatnonzero(brk)
    counts = np.diff(np.r_[starts, len(ids)])
    return ids[starts].astype(np.int32), counts.astype(np.int32)


def warm_up() -> float:
    """Load (or compile, on a fresh checkout) the numba event loop; return the seconds taken.

    The first call in a process pays this once; timing a warm call after it separates that cost
    from the simulation's own speed.
    """
    t0 = time.perf_counter()
    one = np.ones(1)
    run_schedule(1, 1, one * 0, one, one, np.ones(1, np.int64), 0, np.zeros(1, np.int64),
                 np.zeros(0, np.int64), 0.0, one)  # fmt: skip
    return time.perf_counter() - t0


def _scatter(n: int, rows: np.ndarray, values: np.ndarray, fill: object = np.nan) -> np.ndarray:
    out = np.full(n, fill, dtype=values.dtype)
    out[rows] = values
    return out
