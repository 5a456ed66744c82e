"""Statistics of a simulated schedule: idle holes, waits, slowdown."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

# hole-length buckets (seconds): label -> [low, high)
HOLE_BUCKETS: dict[str, tuple[float, float]] = {
    "<5min": (0.0, 300.0),
    "5-30min": (300.0, 1800.0),
    "30min-1h": (1800.0, 3600.0),
    "1-4h": (3600.0, 14400.0),
    ">4h": (14400.0, np.inf),
}
SLOWDOWN_TAU = 10.0  # seconds: runtimes below this count as 10 s in the bounded slowdown


@dataclass(frozen=True)
class SimStats:
    """Summary of one simulation. Times in seconds; idle figures cover ``[window_start,
    window_end]``, job figures cover every simulated job."""

    policy: str
    nodes: int
    jobs_in: int
    jobs_simulated: int
    dropped: dict[str, int]
    adjusted: dict[str, int]
    window_start: float
    window_end: float
    idle_fraction: float
    holes: int
    hole_p25: float
    hole_p50: float
    hole_p75: float
    hole_p90: float
    hole_node_hours: dict[str, float]
    wait_mean: float
    wait_median: float
    bounded_slowdown_mean: float
    backfilled: int
    makespan: float
    seconds: float
    jobs_per_second: float
    extra: dict[str, int] = field(default_factory=dict)
    dropped_jobs: dict[str, list[int]] = field(default_factory=dict)  # first ids per reason

    def as_dict(self) -> dict:
        """Plain-python copy (for JSON or printing)."""
        return asdict(self)


def hole_summary(
    lengths: np.ndarray, counts: np.ndarray | None = None
) -> tuple[dict[str, float], dict[str, float]]:
    """Percentiles (p25/p50/p75/p90, seconds; NaN when no hole) and node-hours per bucket.

    ``counts[i]`` is how many nodes share hole length ``lengths[i]`` (a run of nodes); the
    percentiles equal ``np.percentile`` (linear) over the holes expanded one per node.
    """
    counts = np.ones(len(lengths), dtype=np.int64) if counts is None else counts
    node_seconds = lengths * counts
    hours = {
        label: float(node_seconds[(lengths >= a) & (lengths < b)].sum() / 3600.0)
        for label, (a, b) in HOLE_BUCKETS.items()
    }
    q = weighted_percentiles(lengths, counts, (25, 50, 75, 90))
    pct = {"p25": q[0], "p50": q[1], "p75": q[2], "p90": q[3]}
    return pct, hours


def weighted_percentiles(
    values: np.ndarray, counts: np.ndarray, qs: tuple[float, ...]
) -> list[float]:
    """``np.percentile(np.repeat(values, counts), qs)`` without building the repeat."""
    keep = counts > 0
    values, counts = values[keep], counts[keep]
    if len(values) == 0:
        return [float("nan")] * len(qs)
    order = np.argsort(values, kind="stable")
    v = values[order]
    cum = np.cumsum(counts[order].astype(np.int64))
    total = int(cum[-1])
    out = []
    for q in qs:
        pos = q / 100.0 * (total - 1)
        low = int(np.floor(pos))
        a = v[np.searchsorted(cum, low, side="right")]
        b = v[np.searchsorted(cum, min(low + 1, total - 1), side="right")]
        out.append(float(a + (pos - low) * (b - a)))
    return out


def wait_summary(
    submit: np.ndarray, start: np.ndarray, end: np.ndarray
) -> tuple[float, float, float]:
    """Mean wait, median wait and mean bounded slowdown of the jobs given (all started)."""
    if len(submit) == 0:
        return float("nan"), float("nan"), float("nan")
    wait = start - submit
    run = end - start
    bsld = np.maximum((wait + run) / np.maximum(run, SLOWDOWN_TAU), 1.0)
    return float(wait.mean()), float(np.median(wait)), float(bsld.mean())
