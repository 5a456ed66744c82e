"""Errors raised by the allocator (subclasses of the project's shared error types)."""

from __future__ import annotations

from parsl_malleable.errors import ConfigError, SolverError


class AllocationInputError(ConfigError):
    """An allocator input (job, curve, window, option) is invalid; the message names it."""


class AllocationSolverError(SolverError):
    """The MILP solver failed and no fallback was allowed."""
