"""How a training function travels to the workers: by name when importable, else by value."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

FunctionRef = tuple[str, str]


def function_reference(fn: Callable[..., Any]) -> FunctionRef | Callable[..., Any]:
    """``(module, qualname)`` of an importable function, else the function itself.

    Sent by name, a function decorated in place still resolves on the worker (to the wrapper,
    which :func:`resolve_function` unwraps); functions of ``__main__`` or a notebook travel by
    value, with Parsl's serialization.
    """
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if module and module != "__main__" and "<locals>" not in qualname:
        return (module, qualname)
    return fn


def resolve_function(ref: FunctionRef | Callable[..., Any]) -> Callable[..., Any]:
    """The training function named by ``ref`` (unwrapping a ``@malleable_app``)."""
    if callable(ref):
        obj: Any = ref
    else:
        module, qualname = ref
        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    # A MalleableApp keeps the plain function in ``fn``; checked by marker to stay below app.py.
    return obj.fn if getattr(obj, "is_malleable_app", False) else obj


__all__ = ["FunctionRef", "function_reference", "resolve_function"]
