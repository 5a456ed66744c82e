"""The profiler's curve model: Gaussian processes over log efficiency, averaged by evidence.

Each hyperparameter pair (roughness, length scale) of :data:`HYPERPARAMETERS` gives one
:class:`~parsl_malleable.profile.gp.LogEfficiencyGP`; they are weighted by their marginal
likelihood (Bayesian model averaging), so a smooth curve is pooled across sizes and a kinked one
(AlexNet's) follows its data. The estimate is the averaged posterior mean of ``ln(T(n)/n)``;
its variance adds the spread between the models.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from parsl_malleable.profile.gp import LogEfficiencyGP

#: (roughness, length scale in doublings) pairs averaged over.
HYPERPARAMETERS: tuple[tuple[float, float], ...] = tuple(
    (r, ell) for r in (0.02, 0.05, 0.1, 0.2) for ell in (1.0, 2.0, 3.0)
)
NEGLIGIBLE_WEIGHT = 1e-3


@dataclass(frozen=True)
class MeasuredSizes:
    """Per measured size: mean samples/s and sample count; ``noise_rel`` is the relative
    standard deviation of one sample (pooled over sizes)."""

    sizes: tuple[int, ...]
    means: tuple[float, ...]
    counts: tuple[int, ...]
    noise_rel: float

    def variances(self, extra: int | None = None) -> tuple[list[int], list[float]]:
        """Sizes and variances of their mean log efficiency, with one more sample at ``extra``."""
        counts = dict(zip(self.sizes, self.counts, strict=True))
        if extra is not None:
            counts[extra] = counts.get(extra, 0) + 1
        sizes = sorted(counts)
        return sizes, [self.noise_rel**2 / counts[n] for n in sizes]


class CurveModel:
    """Throughput estimate and its standard error at any size, from :class:`MeasuredSizes`."""

    def __init__(
        self,
        data: MeasuredSizes,
        *,
        slope_sd: float = 0.1,
        hyperparameters: Sequence[tuple[float, float]] = HYPERPARAMETERS,
    ) -> None:
        if not data.sizes:
            raise ValueError("CurveModel needs at least one measured size")
        self.data = data
        self.measured = tuple(data.sizes)
        self.slope_sd = slope_sd
        sizes, var = data.variances()
        z = [math.log(m / n) for n, m in zip(data.sizes, data.means, strict=True)]
        self.models = [
            LogEfficiencyGP(sizes, z, var, slope_sd=slope_sd, roughness=r, lengthscale=ell)
            for r, ell in hyperparameters
        ]
        evidence = np.array([m.log_evidence for m in self.models])
        weights = np.exp(evidence - evidence.max())
        self.weights = weights / weights.sum()

    def log_efficiency(self, sizes: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
        """Averaged posterior mean and variance of ``ln(T(n)/n)`` at ``sizes``."""
        means, variances = [], []
        for model in self.models:
            m, v = model.predict(sizes)
            means.append(m)
            variances.append(v)
        mean_arr, var_arr = np.array(means), np.array(variances)
        mean = self.weights @ mean_arr
        return mean, self.weights @ (var_arr + (mean_arr - mean) ** 2)

    def predict(self, sizes: Sequence[float]) -> tuple[list[float], list[float]]:
        """Throughput (samples/s) and its standard error (delta method) at ``sizes``."""
        mean, var = self.log_efficiency(sizes)
        rates = [n * math.exp(z) for n, z in zip(sizes, mean, strict=True)]
        return rates, [r * math.sqrt(v) for r, v in zip(rates, var, strict=True)]

    def throughput(self, n: float) -> float:
        """Estimated samples/s on ``n`` nodes."""
        return self.predict([n])[0][0]

    def stderr(self, n: float) -> float:
        """Standard error of :meth:`throughput` at ``n``."""
        return self.predict([n])[1][0]

    def covariances(self, sizes: Sequence[int]) -> list[np.ndarray | None]:
        """Posterior covariance of ``ln T`` at ``sizes`` per model (``None`` for models of
        negligible weight)."""
        return [
            model.covariance(sizes) if weight >= NEGLIGIBLE_WEIGHT else None
            for model, weight in zip(self.models, self.weights, strict=True)
        ]
