"""parsl-malleable: train DNNs on the idle nodes that FCFS + backfill scheduling leaves behind.

Data flows one way: ``traces -> sim -> windows -> allocate -> provider/controller -> elastic``.
Heavy submodules (torch, parsl) are imported lazily so that ``import parsl_malleable`` stays cheap.
``set_stream_logger`` / ``set_file_logger`` / ``remove_logger`` (:mod:`parsl_malleable.logs`)
show the project's log records, as Parsl's helpers of those names do for Parsl's.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LOGS = ("remove_logger", "set_file_logger", "set_stream_logger")

__all__ = ["__version__", *_LOGS]


def __getattr__(name: str) -> Any:
    # Loaded on first use, like the heavy parts: the package's own import stays the version only.
    if name not in _LOGS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module("parsl_malleable.logs"), name)
    globals()[name] = value
    return value
