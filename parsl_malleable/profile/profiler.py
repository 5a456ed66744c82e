"""``ScalabilityProfiler``: learn each job's scalability curve and rescale costs while it runs."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from parsl_malleable.allocate.curve import ScalingCurve
from parsl_malleable.allocate.spec import TrainingJob
from parsl_malleable.errors import ConfigError
from parsl_malleable.inputs import finite_number, whole_count
from parsl_malleable.profile.design import most_informative_size, size_grid
from parsl_malleable.profile.model import CurveModel, MeasuredSizes

RESCALE_KINDS = ("up", "down", "start")


class ProfileInputError(ConfigError):
    """A measurement given to the profiler is invalid; the message names the job and value."""


@dataclass
class _Stats:
    """Running mean and variance (Welford) of one job's throughput at one world size."""

    count: int = 0
    mean: float = 0.0
    m2: float = 0.0

    def add(self, value: float) -> None:
        self.count += 1
        delta = value - self.mean
        self.mean += delta / self.count
        self.m2 += delta * (value - self.mean)

    def rel_var(self) -> float:
        """Sample variance relative to the squared mean (0 with fewer than two samples)."""
        if self.count < 2 or self.mean <= 0:
            return 0.0
        return self.m2 / (self.count - 1) / (self.mean * self.mean)

    def stderr(self, floor_rel: float) -> float:
        spread = math.sqrt(self.m2 / (self.count - 1)) if self.count > 1 else 0.0
        # Few samples understate noise: never claim better than floor_rel of the mean.
        return max(spread, floor_rel * self.mean) / math.sqrt(self.count)


@dataclass(frozen=True)
class ExplorationAdvice:
    """Try ``size`` nodes: ``gain`` (samples, optimistic) outweighs ``cost`` (samples lost)."""

    size: int
    gain: float
    cost: float
    reason: str


class ScalabilityProfiler:
    """Online estimates of throughput per world size, a fitted curve, and rescale costs.

    Jobs report ``record(job, world_size, samples_per_s)`` while they run and
    ``record_rescale(job, kind, seconds)`` after each rescale. ``curve(job)`` returns a
    :class:`ScalingCurve` with standard errors for the allocator; ``training_job`` wraps it,
    with the measured costs, into a :class:`TrainingJob`; ``next_size`` says which size to
    measure next to learn the curve fastest.

    ``extrapolation_rel`` is the prior standard deviation of the change of log efficiency per
    doubling (0.1: about 10 % per doubling away from the measured sizes); ``noise_floor`` the
    smallest relative noise of one sample ever assumed, and the prior guess of it.
    """

    def __init__(
        self,
        *,
        noise_floor: float = 0.02,
        extrapolation_rel: float = 0.1,
        default_scale_up_s: float = 30.0,
        default_scale_down_s: float = 15.0,
    ) -> None:
        noise_floor = finite_number(noise_floor, "noise_floor", ge=0, error=ProfileInputError)
        if noise_floor >= 1:
            raise ProfileInputError(f"noise_floor must be < 1, got {noise_floor}")
        self.noise_floor = noise_floor
        self.extrapolation_rel = finite_number(
            extrapolation_rel, "extrapolation_rel", ge=0, error=ProfileInputError
        )
        # a negative default pause would make every unmeasured rescale look profitable
        up = finite_number(default_scale_up_s, "default_scale_up_s", ge=0, error=ProfileInputError)
        down = finite_number(
            default_scale_down_s, "default_scale_down_s", ge=0, error=ProfileInputError
        )
        self.defaults = {"up": up, "down": down, "start": up}
        self._stats: dict[str, dict[int, _Stats]] = defaultdict(lambda: defaultdict(_Stats))
        self._rescales: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        # Fitting costs milliseconds and the controller asks for every job at every decision:
        # keep each job's model until it gets a new sample.
        self._samples: dict[str, int] = defaultdict(int)
        self._fits: dict[str, tuple[int, CurveModel]] = {}
        # Predicting at the grid costs milliseconds too (a dozen models): keep each job's curves,
        # per (max_nodes, sizes), until it gets a new sample. ScalingCurve is immutable.
        self._curves: dict[str, tuple[int, dict[tuple[int, ...], ScalingCurve]]] = {}

    def record(self, job: str, world_size: int, samples_per_s: float) -> None:
        """One throughput sample of ``job`` running on ``world_size`` nodes."""
        size = whole_count(
            world_size, f"job {job!r}: world_size", minimum=1, error=ProfileInputError
        )
        rate = finite_number(
            samples_per_s, f"job {job!r}: samples_per_s", gt=0, error=ProfileInputError
        )
        self._stats[job][size].add(rate)
        self._samples[job] += 1

    def record_rescale(self, job: str, kind: str, seconds: float) -> None:
        """The measured pause of one rescale: ``kind`` is ``up``, ``down`` or ``start``."""
        if kind not in RESCALE_KINDS:
            raise ProfileInputError(f"job {job!r}: rescale kind {kind!r} not in {RESCALE_KINDS}")
        seconds = finite_number(
            seconds, f"job {job!r}: rescale seconds", ge=0, error=ProfileInputError
        )
        self._rescales[job][kind].append(seconds)

    def rescale_cost(self, job: str, kind: str) -> float:
        """Mean measured pause of ``kind`` for ``job``, else the default."""
        if kind not in RESCALE_KINDS:
            raise ProfileInputError(f"rescale kind {kind!r} not in {RESCALE_KINDS}")
        seen = self._rescales.get(job, {}).get(kind)
        return sum(seen) / len(seen) if seen else self.defaults[kind]

    def measured(self, job: str) -> dict[int, tuple[float, float, int]]:
        """``{world_size: (mean samples/s, standard error, samples)}`` for ``job``."""
        return {
            n: (s.mean, s.stderr(self.noise_floor), s.count)
            for n, s in sorted(self._stats.get(job, {}).items())
        }

    def noise(self, job: str) -> float:
        """Relative standard deviation of one sample of ``job``, pooled over its sizes (the
        prior guess ``noise_floor`` counts as two degrees of freedom; never below it)."""
        stats = self._stats.get(job, {}).values()
        dof = sum(s.count - 1 for s in stats if s.count > 1)
        spread = sum((s.count - 1) * s.rel_var() for s in stats if s.count > 1)
        prior_dof = 2
        pooled = (prior_dof * self.noise_floor**2 + spread) / (prior_dof + dof)
        return max(math.sqrt(pooled), self.noise_floor)

    def fit(self, job: str) -> CurveModel:
        """The curve model of ``job`` (needs at least one sample): ``throughput(n)``,
        ``stderr(n)``, ``predict(sizes)``; see docs/profile.md."""
        stats = self._stats.get(job)
        if not stats:
            raise ProfileInputError(f"job {job!r}: no throughput samples recorded")
        cached = self._fits.get(job)
        if cached is not None and cached[0] == self._samples[job]:
            return cached[1]
        sizes = sorted(stats)
        data = MeasuredSizes(
            tuple(sizes),
            tuple(stats[n].mean for n in sizes),
            tuple(stats[n].count for n in sizes),
            self.noise(job),
        )
        model = CurveModel(data, slope_sd=self.extrapolation_rel)
        self._fits[job] = (self._samples[job], model)
        return model

    def curve(self, job: str, max_nodes: int, sizes: Iterable[int] | None = None) -> ScalingCurve:
        """Estimated throughput with standard errors at ``sizes`` (default: measured sizes up to
        ``max_nodes``, powers of two and ``max_nodes``), from the curve model at every point
        (measured sizes too: the model pools their neighbours' samples)."""
        model = self.fit(job)
        if sizes is None:
            sizes = {*(n for n in model.measured if n <= max_nodes), *size_grid(max(1, max_nodes))}
        points = tuple(sorted({int(n) for n in sizes if 1 <= n <= max_nodes}))
        count, cached = self._curves.get(job, (-1, {}))
        if count != self._samples[job]:
            cached = {}
            self._curves[job] = (self._samples[job], cached)
        if points not in cached:
            rates, errors = model.predict(points)
            cached[points] = ScalingCurve(points, tuple(rates), tuple(errors))
        return cached[points]

    def next_size(
        self,
        job: str,
        current_size: int,
        max_nodes: int,
        candidates: Iterable[int] | None = None,
    ) -> int:
        """The size (above or below ``current_size``, or it) whose next sample most reduces the
        curve's largest uncertainties at the powers of two up to ``max_nodes`` (and
        ``max_nodes``); candidates default to those sizes. Ignores rescale costs: use
        :meth:`suggest_exploration` to weigh them."""
        max_nodes = whole_count(max_nodes, "max_nodes", minimum=1, error=ProfileInputError)
        current_size = whole_count(current_size, "current_size", minimum=1, error=ProfileInputError)
        grid = size_grid(max_nodes)
        return most_informative_size(self.fit(job), current_size, grid, candidates)

    def training_job(
        self,
        job: str,
        *,
        min_nodes: int,
        max_nodes: int,
        current_nodes: tuple[str, ...] = (),
        weight: float = 1.0,
        pessimism: float = 0.0,
    ) -> TrainingJob:
        """A :class:`TrainingJob` for the allocator from what has been measured.

        ``pessimism`` shifts the curve down by that many standard errors (0: the estimate).
        """
        curve = self.curve(job, max_nodes).shifted(-pessimism)
        return TrainingJob(
            name=job,
            min_nodes=min_nodes,
            max_nodes=max_nodes,
            curve=curve,
            scale_up_cost=self.rescale_cost(job, "up"),
            scale_down_cost=self.rescale_cost(job, "down"),
            weight=weight,
            current_nodes=current_nodes,
        )

    def suggest_exploration(
        self,
        job: str,
        current_size: int,
        *,
        horizon_s: float,
        candidates: Iterable[int] | None = None,
        max_nodes: int | None = None,
        kappa: float = 1.0,
        min_rel_uncertainty: float = 0.05,
    ) -> ExplorationAdvice | None:
        """An unmeasured size worth trying next, or ``None``.

        A size ``m`` is worth a try when its throughput is still uncertain (relative standard
        error above ``min_rel_uncertainty``) and the optimistic gain of running there for the
        rest of the horizon, ``horizon_s * (mu(m) + kappa*sigma(m) - rate_now)``, exceeds the
        samples lost to the pauses of going there and, if it disappoints, back
        (``(pause_to + pause_back) * rate_now``). Candidates default to the powers of two next
        to ``current_size`` (within ``max_nodes``).
        """
        horizon_s = finite_number(horizon_s, "horizon_s", gt=0, error=ProfileInputError)
        seen = self.measured(job)
        if current_size not in seen:
            raise ProfileInputError(f"job {job!r}: no samples at its current size {current_size}")
        model = self.fit(job)
        cap = max_nodes if max_nodes is not None else 2 * current_size
        if candidates is None:
            up = 1 << current_size.bit_length()
            down = 1 << (current_size.bit_length() - 1)
            down = down // 2 if down == current_size else down
            candidates = [up, down]
        rate_now = seen[current_size][0]
        best: ExplorationAdvice | None = None
        for m in sorted({int(c) for c in candidates if 1 <= c <= cap and c != current_size}):
            if m in seen:
                continue
            mu, sigma = model.throughput(m), model.stderr(m)
            if mu <= 0 or sigma / mu < min_rel_uncertainty:
                continue
            there = self.rescale_cost(job, "up" if m > current_size else "down")
            back = self.rescale_cost(job, "down" if m > current_size else "up")
            gain = horizon_s * (mu + kappa * sigma - rate_now)
            cost = (there + back) * rate_now
            if gain > cost and (best is None or gain - cost > best.gain - best.cost):
                reason = f"{m} nodes: {mu:.0f} +- {sigma:.0f} samples/s vs {rate_now:.0f} now"
                best = ExplorationAdvice(m, gain, cost, reason)
        return best
