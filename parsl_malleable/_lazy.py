"""Lazy package attributes (PEP 562): a name is imported from its submodule on first use.

A package whose submodules pull in pandas, numba or pulp would otherwise load them for anything
that imports one light submodule (``parsl-malleable sim --help`` imports ``sim.command``, which
runs ``sim/__init__.py`` first). A package names its public attributes and their modules::

    __getattr__, __dir__ = lazy_exports(globals(), {"simulate": "parsl_malleable.sim.trace_replay"})

A public name must not also be the name of a submodule: importing the submodule binds it on the
package and hides the lazy attribute.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    namespace: dict[str, Any], names: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__`` for ``names`` (public name -> module).

    ``namespace`` is the package's ``globals()``; the first lookup of a name imports its module
    and stores the value there, so later lookups do not reach ``__getattr__``.
    """
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *names})

    return __getattr__, __dir__
