"""Online scalability profiling of running training jobs (see docs/profile.md)."""

from parsl_malleable.profile.design import most_informative_size, size_grid
from parsl_malleable.profile.fit import ScalingFit, fit_scaling
from parsl_malleable.profile.model import CurveModel, MeasuredSizes
from parsl_malleable.profile.profiler import (
    ExplorationAdvice,
    ProfileInputError,
    ScalabilityProfiler,
)

__all__ = [
    "CurveModel",
    "ExplorationAdvice",
    "MeasuredSizes",
    "ProfileInputError",
    "ScalabilityProfiler",
    "ScalingFit",
    "fit_scaling",
    "most_informative_size",
    "size_grid",
]
