"""Idle-window prediction: how long will each idle node stay idle?

The snapshot it reads lives below this package, in :mod:`parsl_malleable.snapshot` (the scheduler
adapters fill it and must not import the predictor). The predictor, which loads the simulator's
numba kernel, is imported on first use of its names. The function ``predict`` lives in
:mod:`parsl_malleable.windows.predict` (a package attribute of that name would be shadowed by the
submodule).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from parsl_malleable._lazy import lazy_exports

if TYPE_CHECKING:
    from parsl_malleable.windows.accounting import BlockCosts
    from parsl_malleable.windows.arrivals import ArrivalModel
    from parsl_malleable.windows.choose import expected_lengths
    from parsl_malleable.windows.predict import NodeWindows, WindowPredictor
    from parsl_malleable.windows.runtime_model import RuntimeRatioModel
    from parsl_malleable.windows.validate import CheckedSnapshot, check_snapshot
    from parsl_malleable.windows.window import Window

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


__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
