"""Idle-window prediction: how long will each idle node stay idle?

The snapshot it reads lives below this package, in :mod:`parsl_malleable.snapshot` (the scheduler
adapters fill it and must not import the predictor). The predictor, which loads the simulator's
numba kernel, is imported on first use of its names. The function ``predict`` lives in
:mod:`parsl_malleable.windows.predict` (a package attribute of that name would be shadowed by the
submodule).
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "WindowPredictor": "parsl_malleable.windows.predict",
    "NodeWindows": "parsl_malleable.windows.predict",
    "Window": "parsl_malleable.windows.window",
    "RuntimeRatioModel": "parsl_malleable.windows.runtime_model",
    "ArrivalModel": "parsl_malleable.windows.arrivals",
    "check_snapshot": "parsl_malleable.windows.validate",
    "BlockCosts": "parsl_malleable.windows.accounting",
    "expected_lengths": "parsl_malleable.windows.choose",
    "CheckedSnapshot": "parsl_malleable.windows.validate",
}

__all__ = [
    "ArrivalModel",
    "BlockCosts",
    "CheckedSnapshot",
    "NodeWindows",
    "RuntimeRatioModel",
    "Window",
    "WindowPredictor",
    "check_snapshot",
    "expected_lengths",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    # importing parsl_malleable.windows.predict binds the submodule to the name "predict"
    # here; the public name is the function
    globals()[name] = value
    return value
