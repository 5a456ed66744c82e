"""Online scalability profiling of running training jobs (see docs/profile.md)."""

from parsl_malleable.profile.fit import ScalingFit, fit_scaling
from parsl_malleable.profile.profiler import (
    ExplorationAdvice,
    ProfileInputError,
    ScalabilityProfiler,
)

__all__ = [
    "ExplorationAdvice",
    "ProfileInputError",
    "ScalabilityProfiler",
    "ScalingFit",
    "fit_scaling",
]
