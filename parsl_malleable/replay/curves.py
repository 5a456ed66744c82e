"""A family of learning curves for replayed searches: what a trial's metric reads each epoch.

A replayed search (:mod:`parsl_malleable.replay.sweep`) trains no model; each of its configs
gets a true curve, the validation accuracy after epoch ``e``, and every report is that value
plus noise. The family:

* **Shape: ``pow3``, ``acc(e) = a - b * e**(-c)``** (``e >= 1``): a saturating power law
  rising from ``a - b`` after the first epoch towards the asymptote ``a``, at a speed set by
  ``c``. It is one of the eleven parametric shapes Domhan, Springenberg and Hutter combine to
  extrapolate learning curves ("Speeding up automatic hyperparameter optimization of deep
  neural networks by extrapolation of learning curves", IJCAI 2015), and one of the basis
  functions of Klein et al.'s LC-Net ("Learning curve prediction with Bayesian neural
  networks", ICLR 2017); Viering and Loog's review ("The shape of learning curves", TPAMI
  2022) finds power laws the most common good fit. Curves of this shape cross: a config that
  learns slowly (small ``c``) may start below and end above one that learns fast, which is
  what makes low-fidelity pruning err, as seen in benchmarks of real curves such as LCBench
  (Zimmer, Lindauer and Hutter, TPAMI 2021: 2,000 configs on 35 data sets, 50 epochs each).
* **Configs really differ.** A config is a learning rate ``lr`` (log-uniform 1e-4..1) and a
  weight decay ``weight_decay`` (log-uniform 1e-6..1e-2). With ``x = log10(lr)`` and
  ``y = log10(weight_decay)``, and four standard normal draws ``z`` per config (seeded from
  the family's seed and the config's values):

  - it **diverges** where ``x > -0.5 + 0.15 z0`` (learning rates above about 0.3): its
    accuracy stays at chance (``chance``, 0.001 for 1,000 classes) every epoch;
  - else ``a = 0.70 - 0.05 (x + 1.3)**2 - 0.012 (y + 4.3)**2 + 0.01 z1``: best near
    lr 0.05 and weight decay 5e-5, down to about 0.3 at the edges of the space (many
    mediocre configs, a few good ones);
  - the first epoch reaches a fraction ``s = 0.45 + 0.12 (x + 1.3) + 0.05 z2`` (clipped to
    0.05..0.9) of ``a``, so ``b = a (1 - s)``: larger learning rates start faster;
  - ``c = 0.7 + 0.2 (x + 1.3) + 0.1 z3`` (clipped to 0.15..1.5): and keep learning faster.

  These numbers are **assumptions**, chosen so that the best asymptote (0.70) and the share of
  diverging configs look like a ShuffleNet-sized ImageNet model's search; none is measured or
  fitted to a benchmark.
* **Noise.** Each report adds a normal draw of standard deviation ``noise`` (0.005; a 50,000
  image validation set alone gives about 0.002 by binomial sampling, the rest stands for
  epoch-to-epoch jitter), clipped to [0, 1]; seeded from the family's seed, the trial and the
  epoch.

Deterministic: the same seed and config give the same curve, and the same seed, trial and
epoch the same report.
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated

import numpy as np
from pydantic import Field

from parsl_malleable.errors import ConfigError
from parsl_malleable.inputs import Number, WholeCount, boundary

# The space the family reads (Optuna's distributions, as campaign files write them).
SPACE: dict[str, dict[str, object]] = {
    "lr": {"type": "float", "low": 1e-4, "high": 1.0, "log": True},
    "weight_decay": {"type": "float", "low": 1e-6, "high": 1e-2, "log": True},
}
BEST_ASYMPTOTE = 0.70
LR_OPT, WD_OPT = -1.3, -4.3  # log10 of the best learning rate and weight decay
DIVERGE_AT = -0.5  # log10 of the learning rate above which a config diverges (jittered)


@dataclass(frozen=True)
class LearningCurve:
    """One config's true curve: ``asymptote - gap * epoch**-rate``, or ``chance`` if it
    ``diverged``."""

    asymptote: float
    gap: float
    rate: float
    diverged: bool = False
    chance: float = 0.001

    def value(self, epoch: float) -> float:
        """The true accuracy after ``epoch`` epochs (``epoch >= 1``)."""
        if epoch < 1:
            raise ConfigError(f"learning curves start at epoch 1; got {epoch}")
        if self.diverged:
            return self.chance
        return self.asymptote - self.gap * epoch ** (-self.rate)

    def best(self, epochs: int) -> float:
        """The best true value within ``epochs`` epochs (the curve rises: the last one)."""
        return self.value(epochs)


def _stream(seed: int, *parts: float) -> np.random.Generator:
    """A generator seeded from ``seed`` and the exact bits of ``parts`` (stable across runs
    and machines, unlike ``hash``)."""
    digest = hashlib.blake2b(struct.pack(f"<q{len(parts)}d", seed, *parts), digest_size=16)
    return np.random.default_rng(int.from_bytes(digest.digest(), "little"))


@boundary(ConfigError)
class CurveFamily:
    """The family of the module docstring: ``curve(params)`` and noisy ``report``s; ``noise``
    is the reports' standard deviation, ``chance`` a diverged config's value."""

    seed: WholeCount = 0
    noise: Annotated[Number, Field(ge=0)] = 0.005
    chance: Annotated[Number, Field(ge=0, lt=BEST_ASYMPTOTE)] = 0.001

    @staticmethod
    def _point(params: Mapping[str, float]) -> tuple[float, float]:
        missing = sorted(set(SPACE) - set(params))
        if missing:
            raise ConfigError(
                f"a config of the learning-curve family needs {', '.join(SPACE)}; "
                f"{', '.join(missing)} missing from {dict(params)}"
            )
        lr, wd = float(params["lr"]), float(params["weight_decay"])
        if not (lr > 0 and wd > 0 and math.isfinite(lr) and math.isfinite(wd)):
            raise ConfigError(f"lr and weight_decay must be finite and > 0; got {dict(params)}")
        return lr, wd

    def curve(self, params: Mapping[str, float]) -> LearningCurve:
        """The true curve of the config ``params`` (``lr``, ``weight_decay``)."""
        lr, wd = self._point(params)
        x, y = math.log10(lr) - LR_OPT, math.log10(wd) - WD_OPT
        z = _stream(self.seed, 0.0, lr, wd).standard_normal(4)
        if x + LR_OPT > DIVERGE_AT + 0.15 * z[0]:
            return LearningCurve(self.chance, 0.0, 1.0, diverged=True, chance=self.chance)
        asymptote = BEST_ASYMPTOTE - 0.05 * x**2 - 0.012 * y**2 + 0.01 * z[1]
        asymptote = min(0.95, max(2 * self.chance, asymptote))
        start = min(0.9, max(0.05, 0.45 + 0.12 * x + 0.05 * z[2]))
        rate = min(1.5, max(0.15, 0.7 + 0.2 * x + 0.1 * z[3]))
        return LearningCurve(asymptote, asymptote * (1 - start), rate, chance=self.chance)

    def report(self, curve: LearningCurve, trial: int, epoch: int) -> float:
        """What trial ``trial`` (on ``curve``) reports after ``epoch``: its value plus noise."""
        draw = _stream(self.seed, 1.0, float(trial), float(epoch)).standard_normal()
        return min(1.0, max(0.0, curve.value(epoch) + self.noise * float(draw)))


__all__ = ["SPACE", "CurveFamily", "LearningCurve"]
