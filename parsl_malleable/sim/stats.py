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

    def as_dict(self) -> dict:
        """Plain-python copy (for JSON or printing)."""
        return asdict(self)


def clip_intervals(
    node: np.ndarray, s: np.ndarray, e: np.ndarray, lo: float, hi: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Clip intervals to ``[lo, hi]`` and drop those left empty."""
    s = np.maximum(s, lo)
    e = np.minimum(e, hi)
    keep = e > s
    return node[keep], s[keep], e[keep]


def hole_summary(lengths: np.ndarray) -> tuple[dict[str, float], dict[str, float]]:
    """Percentiles (p25/p50/p75/p90, seconds; NaN when no hole) and node-hours per bucket."""
    q = np.percentile(lengths, [25, 50, 75, 90]) if len(lengths) else np.full(4, np.nan)
    pct = {"p25": float(q[0]), "p50": float(q[1]), "p75": float(q[2]), "p90": float(q[3])}
    hours = {
        label: float(lengths[(lengths >= a) & (lengths < b)].sum() / 3600.0)
        for label, (a, b) in HOLE_BUCKETS.items()
    }
    return pct, hours


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
