"""One Gaussian process over log efficiency: ``z(x) = ln(throughput(n) / n)``, ``x = log2 n``.

``z(x) = level + slope * (x - centre) + g(x)``: a flat-ish level, a slope (change of log
efficiency per doubling) with prior standard deviation ``slope_sd`` around 0 (linear scaling), and
a smooth departure ``g`` with a Matern-5/2 kernel of amplitude ``roughness`` and length scale
``lengthscale`` doublings. Observations are mean log efficiencies with known variances.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

LEVEL_VAR = 10.0  # prior variance of the level (ln units): wide, the data fix it


def matern52(distance: np.ndarray, lengthscale: float) -> np.ndarray:
    """The Matern-5/2 correlation at ``distance`` (same units as ``lengthscale``)."""
    r = math.sqrt(5.0) * np.abs(distance) / lengthscale
    return (1.0 + r + r * r / 3.0) * np.exp(-r)


class LogEfficiencyGP:
    """Posterior of ``z`` given observations ``z_obs`` (variances ``z_var``) at sizes ``sizes``."""

    def __init__(
        self,
        sizes: Sequence[float],
        z_obs: Sequence[float],
        z_var: Sequence[float],
        *,
        slope_sd: float,
        roughness: float,
        lengthscale: float,
    ) -> None:
        self.x = np.log2(np.asarray(sizes, dtype=float))
        z = np.asarray(z_obs, dtype=float)
        var = np.asarray(z_var, dtype=float)
        weights = 1.0 / var
        self.centre = float(np.average(self.x, weights=weights))
        self.prior_mean = float(np.average(z, weights=weights))
        self.slope_sd, self.roughness, self.lengthscale = slope_sd, roughness, lengthscale
        cov = self.kernel(self.x, self.x) + np.diag(var)
        self._chol = np.linalg.cholesky(cov)
        resid = z - self.prior_mean
        self._alpha = np.linalg.solve(cov, resid)
        self.log_evidence = float(
            -0.5 * resid @ self._alpha
            - np.sum(np.log(np.diag(self._chol)))
            - 0.5 * len(z) * math.log(2 * math.pi)
        )

    def kernel(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Prior covariance of ``z`` between log2 sizes ``a`` and ``b``."""
        linear = self.slope_sd**2 * np.outer(a - self.centre, b - self.centre)
        smooth = self.roughness**2 * matern52(a[:, None] - b[None, :], self.lengthscale)
        return LEVEL_VAR + linear + smooth

    def predict(self, sizes: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and variance of ``z`` at ``sizes``."""
        xs = np.log2(np.asarray(sizes, dtype=float))
        cross = self.kernel(xs, self.x)
        mean = self.prior_mean + cross @ self._alpha
        v = np.linalg.solve(self._chol, cross.T)
        prior_var = np.diag(self.kernel(xs, xs))
        return mean, np.maximum(prior_var - np.sum(v * v, axis=0), 0.0)

    def covariance(self, sizes: Sequence[float]) -> np.ndarray:
        """Posterior covariance matrix of ``z`` at ``sizes``."""
        xs = np.log2(np.asarray(sizes, dtype=float))
        v = np.linalg.solve(self._chol, self.kernel(xs, self.x).T)
        return self.kernel(xs, xs) - v.T @ v
