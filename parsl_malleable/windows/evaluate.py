"""Replay a trace, predict every idle node's window at its events, and score the predictions.

One pass over the replay's scheduling events serves the harvesting policies at once
(:mod:`parsl_malleable.windows.accounting`): blocks sized by the corrected prediction's
quantile (``corrected``), by the corrected draws' expected net harvest (``expected``,
:mod:`parsl_malleable.windows.choose`), by the naive planner (limits only), by the quantile
recalibrated online (``calibrated``: the draws' level, ``conformal``: a conformal factor; with
``calibrate``), and an oracle that knows each window.
At every scheduling event where some node is idle, the state becomes a :class:`Snapshot` and
goes through the same :class:`WindowPredictor` the provider uses; every idle hole node's
prediction is compared with what actually happened.

A block that ends while its node is still idle is a decision point of its own (the provider
sees its block finish). No scheduling event happened since the last prediction, so the state
is unchanged: the provider reuses that prediction's draws, keeping only those in which the
node is still idle, instead of planning again.

Sampling: a year of a large machine has tens of thousands of events at ~0.1 s per prediction,
so the evaluation covers ``segments`` contiguous runs of ``segment_events`` events, spread
evenly over the trace after the warm-up. Blocks, oracle and accuracy all use the same runs.
The early-end and arrival models are learned online: at the start of each run and every
``refit_every`` seconds, from the jobs that had ended (been submitted) by then.

Calibration is strictly online too: an outcome (how long a node stayed idle) reaches a
calibrator only once it is known in the replay (see
:class:`~parsl_malleable.windows.calibrate.WindowCalibration`). The conformal calibrator also
sees the ``calibration_events`` scheduling events before each run (predictions made and
recorded, nothing scored), as a provider running continuously would have; the runs themselves
are then scored out of sample, each prediction calibrated only from earlier outcomes.
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from parsl_malleable.sim.trace_replay import SimResult, simulate
from parsl_malleable.traces.schema import JobTrace
from parsl_malleable.windows.accounting import (
    BlockCosts,
    IdleTimeline,
    PolicyState,
    block_harvest,
    oracle_harvest,
)
from parsl_malleable.windows.arrivals import ArrivalModel
from parsl_malleable.windows.calibrate import QuantileCalibration, WindowCalibration, pit
from parsl_malleable.windows.choose import expected_lengths
from parsl_malleable.windows.predict import WindowPredictor
from parsl_malleable.windows.replay_snapshots import ReplayState
from parsl_malleable.windows.runtime_model import RuntimeRatioModel

POLICY_NAMES = ("corrected", "expected", "naive", "calibrated", "conformal")
# the second quantile whose coverage is scored (no blocks): the median window
MEDIAN = 0.5
CHOICES: dict[str, tuple[str, ...]] = {
    "quantile": ("corrected", "naive"),
    "expected": ("expected", "naive"),
    "both": ("corrected", "expected", "naive"),
}


@dataclass(frozen=True)
class EvalConfig:
    """Settings of one evaluation (see ``docs/windows.md``)."""

    policy: str = "easy"
    quantile: float = 0.1
    choose: str = "both"  # table rows: "quantile", "expected" or "both" (all are evaluated)
    costs: BlockCosts = field(default_factory=BlockCosts)
    samples: int = 16
    horizon: float = 86400.0
    warmup: float = 0.1  # fraction of the trace used only to learn and to fill the machine
    refit_every: float = 86400.0
    segments: int = 4
    segment_events: int | None = 500  # None: one run over every event after the warm-up
    arrivals: bool = True  # resample recent submissions as future jobs
    # also score the quantile recalibrated online from resolved windows (calibrate.py): the
    # draws' level (``calibrated``) and the conformal factor (``conformal``)
    calibrate: bool = False
    # scheduling events before each run whose predictions only feed the conformal calibrator
    calibration_events: int = 250
    max_pending: int | None = 1000  # plan only the head of very long queues (speed)
    seed: int = 0


@dataclass
class EvalResult:
    """Scores of one evaluation. ``pairs`` holds every (predicted, actual) comparison."""

    trace: str
    config: EvalConfig
    periods: list[tuple[float, float]]
    events: int
    predictions: int
    seconds: float
    pairs: pd.DataFrame
    harvest: dict[str, dict]
    oracle_node_hours: float
    blocks: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]
    # idle intervals longer than a start-up that a native job ends inside the evaluated runs
    native_ends: int = 0

    def reaccount(self, costs: BlockCosts) -> dict[str, dict]:
        """The harvest of the same blocks under other costs: a longer commit interval makes
        yields dearer. (The start-up also decides which predictions get a block; changing it
        here only changes the charge.)"""
        return {
            name: block_harvest(predicted, actual, costs, censored)
            for name, (predicted, actual, censored) in self.blocks.items()
        }

    def names(self) -> tuple[str, ...]:
        """The policies of :meth:`table`'s rows, in order."""
        names = CHOICES[self.config.choose]
        if self.config.calibrate and "corrected" in names:
            names = ("corrected", "calibrated", "conformal", *names[1:])
        return names

    def coverage(self) -> pd.DataFrame:
        """Per quantile window (the configured one and the median) and method, the fraction
        of windows over-predicted (a block of that length would have been cut by the native
        job), which should be about the quantile.

        A window still idle at the end of the run (censored) counts as not over-predicted when
        the prediction is shorter than what was seen (it is known to have lasted longer), and
        is left out otherwise (unknown), instead of being dropped altogether: dropping every
        censored window would drop the long ones and inflate the figure.
        """
        p = self.pairs
        censored = p["censored"].to_numpy(dtype=bool)
        actual = p["actual"].to_numpy(dtype=float)
        columns = {
            (self.config.quantile, "corrected"): "corrected",
            (MEDIAN, "corrected"): "corrected50",
        }
        if self.config.calibrate:
            columns[(self.config.quantile, "calibrated")] = "calibrated"
            columns[(self.config.quantile, "conformal")] = "conformal"
            columns[(MEDIAN, "conformal")] = "conformal50"
        rows = []
        for (q, method), col in columns.items():
            pred = p[col].to_numpy(dtype=float)
            over = (pred > actual) & ~censored
            known = ~censored | (pred <= actual)
            rows.append(
                {
                    "quantile": q,
                    "method": method,
                    "windows": int(known.sum()),
                    "over_predicted": float(over.sum() / known.sum()) if known.any() else math.nan,
                    "median_h": float(np.median(pred)) / 3600 if len(pred) else math.nan,
                }
            )
        return pd.DataFrame(rows)

    def table(self) -> pd.DataFrame:
        """One row per predictor of ``config.choose``: accuracy and harvest figures.
        ``yields``: blocks cut by the native job (each an unplanned shrink of the training
        job); ``yields_per_node_h``: per harvested node-hour."""
        rows = []
        pairs = self.pairs[~self.pairs["censored"]]
        labels = {
            "corrected": f"corrected q={self.config.quantile:g}",
            "expected": "corrected expected",
            "calibrated": f"calibrated q={self.config.quantile:g}",
            "conformal": f"conformal q={self.config.quantile:g}",
            "naive": "naive",
        }
        for name in self.names():
            err = pairs[name] - pairs["actual"]
            h = self.harvest[name]
            harvest_h = h["harvest"] / 3600
            label = labels[name]
            rows.append(
                {
                    "predictor": label,
                    "windows": len(pairs),
                    "median_abs_error_h": float(np.median(np.abs(err))) / 3600
                    if len(err)
                    else math.nan,
                    "over_predicted": float(np.mean(err > 0)) if len(err) else math.nan,
                    "blocks": h["blocks"],
                    "yields": h["over_predicted"],
                    "yields_per_node_h": h["over_predicted"] / harvest_h
                    if harvest_h > 0
                    else math.nan,
                    "harvest_node_h": harvest_h,
                    "of_oracle": harvest_h / self.oracle_node_hours
                    if self.oracle_node_hours > 0
                    else math.nan,
                    "lost_fraction": h["lost"] / h["harvest"] if h["harvest"] > 0 else math.nan,
                }
            )
        return pd.DataFrame(rows)


def replay_history(state: ReplayState, jobs: pd.DataFrame) -> pd.DataFrame:
    """The replayed jobs as a site history (trace schema), for the predictor's models."""
    rows = state.rows
    return pd.DataFrame(
        {
            "submit": state.submit[rows],
            "start": state.start[rows],
            "end": state.end[rows],
            "walltime": state.walltime[rows],
            "nodes": jobs["nodes"].to_numpy()[rows],
            "queue": jobs["queue"].astype(str).to_numpy()[rows],
            "user": jobs["user"].astype(str).to_numpy()[rows],
        }
    )


def refit_on_history(
    predictor: WindowPredictor, history: pd.DataFrame, t: float, arrivals: bool
) -> None:
    """Refit ``predictor``'s early-end model on the jobs ended by ``t`` (and its arrivals)."""
    ended = history[history["end"].to_numpy() <= t]
    predictor.model = RuntimeRatioModel.fit(ended)
    predictor.arrivals = ArrivalModel.fit(history, t) if arrivals else None


def _periods(times: np.ndarray, first: float, last: float, config: EvalConfig) -> list:
    t0 = first + config.warmup * (last - first)
    usable = times[(times >= t0) & (times < last)]
    n = config.segment_events
    if n is None or len(usable) <= n * config.segments:
        return [usable] if len(usable) else []
    starts = ((np.arange(config.segments) + 0.5) / config.segments * (len(usable) - n)).astype(int)
    return [usable[s : s + n + 1] for s in starts]


def evaluate(
    trace: JobTrace, config: EvalConfig | None = None, sim: SimResult | None = None
) -> EvalResult:
    """Replay ``trace`` under ``config.policy`` and score the window predictions."""
    config = config or EvalConfig()
    if config.choose not in CHOICES:
        raise ValueError(f"choose must be one of {sorted(CHOICES)}, got {config.choose!r}")
    t_start = time.perf_counter()
    sim = sim or simulate(trace, config.policy)
    state = ReplayState(trace, sim)
    history = replay_history(state, trace.jobs)
    idle = sim.idle_arrays()
    periods = _periods(
        state.event_times(), float(sim.stats.window_start), float(sim.stats.window_end), config
    )
    predictor = WindowPredictor(
        samples=config.samples,
        horizon=config.horizon,
        seed=config.seed,
        max_pending=config.max_pending,
    )
    totals: dict[str, list] = {name: [] for name in POLICY_NAMES}
    pairs: list[pd.DataFrame] = []
    oracle = 0.0
    native_ends = 0
    calibration = QuantileCalibration() if config.calibrate else None
    if config.calibrate:
        # the conformal calibrator's outcomes: the whole replay, each used only once known
        predictor.calibration = WindowCalibration()
    all_times = state.event_times()
    outcomes = (
        IdleTimeline(
            *idle, float(idle[1].min(initial=0.0)) - 1.0, float(idle[2].max(initial=0.0)) + 1.0
        )
        if config.calibrate
        else None
    )
    events = predictions = 0
    spans: list[tuple[float, float]] = []
    done = float(sim.stats.window_start)  # the replay has been advanced to here
    for times in periods:
        t0, t1 = float(times[0]), float(times[-1]) if len(times) > 1 else float(times[0]) + 1
        if len(times) > 1:
            times = times[:-1]  # the last event only closes the period
        timeline = IdleTimeline(*idle, t0, t1)
        oracle += oracle_harvest(timeline.lengths(), config.costs)
        # holes a native job ends inside the period: a policy that harvests every hole to
        # its end yields about once per such hole, so this bounds its yields from below
        native_ends += int(
            np.sum((timeline.end < timeline.t1) & (timeline.lengths() > config.costs.startup))
        )
        run = _Run(state, predictor, timeline, config, sim.nodes, calibration, outcomes)
        if predictor.calibration is not None and config.calibration_events > 0:
            # predictions before the run only feed the conformal calibrator (nothing scored):
            # a provider running continuously would have seen them
            i0 = int(np.searchsorted(all_times, t0))
            burn = all_times[max(0, i0 - config.calibration_events) : i0]
            burn = burn[burn > done]
            next_fit = -math.inf
            for t in burn:
                if t >= next_fit:
                    refit_on_history(predictor, history, float(t), config.arrivals)
                    next_fit = float(t) + config.refit_every
                run.native_event(float(t), score=False)
        next_fit = t0  # refit at the run's start, as without the burn-in: same predictions
        for t in times:
            if t >= next_fit:
                refit_on_history(predictor, history, float(t), config.arrivals)
                next_fit = float(t) + config.refit_every
            run.native_event(float(t))
        run.finish()
        events += len(times)
        predictions += run.predictions
        pairs.append(run.pairs_frame())
        for name in POLICY_NAMES:
            totals[name].append(run.policies[name])
        spans.append((t0, t1))
        done = t1
    blocks = {
        name: tuple(
            np.concatenate(part) for part in zip(*(p.blocks() for p in states), strict=True)
        )
        if states
        else (np.empty(0), np.empty(0), np.empty(0, dtype=bool))
        for name, states in totals.items()
    }
    harvest = {name: block_harvest(p, a, config.costs, c) for name, (p, a, c) in blocks.items()}
    return EvalResult(
        trace=trace.machine.name,
        config=config,
        periods=spans,
        events=events,
        predictions=predictions,
        seconds=time.perf_counter() - t_start,
        pairs=pd.concat(pairs, ignore_index=True) if pairs else _empty_pairs(),
        harvest=harvest,
        oracle_node_hours=oracle / 3600,
        blocks=blocks,  # type: ignore[arg-type]
        native_ends=native_ends,
    )


def _empty_pairs() -> pd.DataFrame:
    return pd.DataFrame(
        {c: pd.Series(dtype=float) for c in _PAIR_COLUMNS[:-1]}
        | {"censored": pd.Series(dtype=bool)}
    )


_PAIR_COLUMNS = (
    "t",
    "node",
    "naive",
    "corrected",
    "expected",
    "calibrated",
    "conformal",
    "corrected50",
    "conformal50",
    "actual",
    "censored",
)


class _Run:
    """One contiguous evaluation period: its policies, draws cache and comparisons."""

    def __init__(
        self,
        state: ReplayState,
        predictor: WindowPredictor,
        timeline: IdleTimeline,
        config: EvalConfig,
        n_nodes: int,
        calibration: QuantileCalibration | None = None,
        outcomes: IdleTimeline | None = None,
    ) -> None:
        self.calibration = calibration
        # the conformal calibrator's outcomes: the whole replay, not cut at the run's end (an
        # outcome is used only once known, see WindowCalibration)
        self.outcomes = outcomes
        self.level = config.quantile  # the calibrated policy's draws level
        self.next_level = -math.inf
        self.state = state
        self.predictor = predictor
        self.timeline = timeline
        self.config = config
        self.policies = {name: PolicyState(n_nodes) for name in POLICY_NAMES}
        self.wakeups: list[tuple[float, int, int]] = []  # (time, policy, node) of blocks ending
        # absolute window ends of the last prediction, per node: naive and the draws
        self.naive_end = np.full(n_nodes, -math.inf)
        self.draw_end = np.full((max(config.samples, 1), n_nodes), -math.inf)
        # per node, whether its last prediction's naive window was the horizon (its class)
        self.naive_free = np.zeros(n_nodes, dtype=bool)
        self.predictions = 0
        self._pairs: list[tuple[np.ndarray, ...]] = []

    def native_event(self, t: float, score: bool = True) -> None:
        """Process block endings before ``t``, then the scheduling event at ``t``.
        ``score=False`` (the calibration burn-in): only predict and feed the calibrator."""
        if score:
            self._wake_until(t)
        self.state.advance(t)
        idle = self.state.idle_ids()
        if not len(idle):
            return
        nw = self.predictor.node_windows(self.state.snapshot(self.config.policy))
        ids = self.state.ids_of(nw.names)
        q = self.config.quantile
        conformal = {level: nw.length(level) for level in (q, MEDIAN)}  # before recording
        if nw.calibration is not None and nw.samples.shape[0] and self.outcomes is not None:
            # the whole outcome is handed over now, but the calibrator uses it only from
            # t + actual on (strictly online); windows past the replay's end stay censored
            actual = self.outcomes.remaining(ids, t)
            complete = t + actual < self.outcomes.t1
            for level in (q, MEDIAN):
                nw.record_outcome(level, actual, complete)
        if not score:
            return
        self.predictions += 1
        self.naive_end[idle] = t  # idle but taken now: not a hole
        self.draw_end[:, idle] = t
        # a window at the horizon means "not needed within it": a fresh prediction later
        # would say the horizon again, so keep those ends unbounded
        horizon = self.config.horizon
        self.naive_end[ids] = np.where(nw.naive >= horizon, math.inf, t + nw.naive)
        corrected = nw.draws_length(q)
        expected = nw.expected(self.config.costs)
        if self.calibration is not None and t >= self.next_level:
            self.level = self.calibration.level(self.config.quantile, t)
            self.next_level = t + 3600.0  # hourly: the level moves slowly
        calibrated = nw.draws_length(self.level)
        if nw.samples.shape[0]:
            self.draw_end[: nw.samples.shape[0], ids] = np.where(
                nw.samples >= horizon, math.inf, t + nw.samples
            )
        else:
            self.draw_end[:, ids] = self.naive_end[ids]
        actual = self.timeline.remaining(ids, t)
        seen = actual > 0
        horizon = self.config.horizon
        capped = np.minimum(actual, horizon)
        self._pairs.append(
            (
                np.full(int(seen.sum()), t),
                ids[seen],
                nw.naive[seen],
                corrected[seen],
                expected[seen],
                calibrated[seen],
                conformal[q][seen],
                nw.draws_length(MEDIAN)[seen],
                conformal[MEDIAN][seen],
                capped[seen],
                (t + actual[seen] >= self.timeline.t1) & (actual[seen] < horizon),
            )
        )
        self._place("naive", ids, t, nw.naive)
        self._place("corrected", ids, t, corrected)
        self._place("expected", ids, t, expected)
        if self.calibration is not None:
            self._place("calibrated", ids, t, calibrated)
        if nw.calibration is not None:
            self._place("conformal", ids, t, conformal[q])
            self.naive_free[ids] = nw.naive >= horizon
            resolved = seen & (t + actual < self.timeline.t1)
            # evaluate() gives the run a QuantileCalibration whenever the predictor calibrates
            if self.calibration is not None and nw.samples.shape[0] and resolved.any():
                # known once the window has ended (or reached the horizon)
                self.calibration.record(
                    t + capped[resolved], pit(nw.samples[:, resolved], capped[resolved])
                )

    def _place(self, name: str, ids: np.ndarray, t: float, lengths: np.ndarray) -> None:
        nodes, wake = self.policies[name].place(ids, t, lengths, self.timeline, self.config.costs)
        code = POLICY_NAMES.index(name)
        for node, w in zip(nodes.tolist(), wake.tolist(), strict=True):
            if w < self.timeline.t1:
                heapq.heappush(self.wakeups, (w, code, node))

    def _wake_until(self, t_next: float) -> None:
        while self.wakeups and self.wakeups[0][0] < t_next:
            w, code, node = heapq.heappop(self.wakeups)
            name = POLICY_NAMES[code]
            naive_left = min(self.naive_end[node] - w, self.config.horizon)
            if name == "naive":
                length = naive_left
            else:
                left = np.minimum(self.draw_end[:, node] - w, self.config.horizon)
                left = left[left > 0]  # draws in which the node is still idle
                if name == "expected":
                    # a node that outlived every draw gets the naive window (the chooser
                    # without draws), not nothing until the next scheduling event
                    length = float(
                        expected_lengths(left[:, None], np.array([naive_left]), self.config.costs)[
                            0
                        ]
                    )
                elif len(left):
                    level = self.level if name == "calibrated" else self.config.quantile
                    length = float(np.quantile(left, level, method="lower"))
                    cal = self.predictor.calibration
                    if name == "conformal" and cal is not None:
                        # the same factor as at the prediction, for the surviving draws' base
                        base = np.array([min(length, naive_left)])
                        naive = np.array(
                            [self.config.horizon if self.naive_free[node] else naive_left]
                        )
                        groups = cal.groups(base, naive, self.config.horizon)
                        length = float(
                            cal.adjust(level, base, groups, np.array([naive_left]), w)[0]
                        )
                else:
                    length = 0.0
                length = min(length, self.naive_end[node] - w)  # as NodeWindows.length
            self._place(name, np.array([node]), w, np.array([length]))

    def finish(self) -> None:
        """Process the block endings left before the period's end."""
        self._wake_until(self.timeline.t1)

    def pairs_frame(self) -> pd.DataFrame:
        """Every comparison of this run."""
        if not self._pairs:
            return _empty_pairs()
        cols = [np.concatenate(c) for c in zip(*self._pairs, strict=True)]
        return pd.DataFrame(dict(zip(_PAIR_COLUMNS, cols, strict=True)))
