"""Make ``provider: {type: BackfillProvider}`` resolvable in a Globus Compute user endpoint.

Why this file exists: the user endpoint process builds its engine from the rendered
``user_config_template.yaml.j2`` with ``EngineDispatcher`` (``globus_compute_endpoint/endpoint/
config/dispatch.py``), which resolves ``provider: {type: X}`` with ``getattr(parsl.providers, X)``
and nothing else: no dotted import path, no entry point, no plugin hook. So ``BackfillProvider``
must be an attribute of ``parsl.providers`` in that process before the config is loaded, and the
only code a site can run there before that is Python's own start-up hook.

How: the endpoint's ``user_environment.yaml`` puts this folder on ``PYTHONPATH``; Python imports
``sitecustomize`` at start-up; this module only installs a one-shot import hook (nothing is
imported now, so other Python processes of the endpoint's environment, such as worker pools, pay
nothing). When the endpoint's ``dispatch`` module is first imported, the hook adds
``parsl.providers.BackfillProvider``. Parsl's own providers are untouched.

If another ``sitecustomize`` module exists further along ``sys.path`` (Debian's Python ships
one), it is run too, as if this folder were not there.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from types import ModuleType

#: The module whose import triggers the registration: it resolves provider names.
TARGET = "globus_compute_endpoint.endpoint.config.dispatch"


def register_backfill_provider() -> None:
    """Make ``BackfillProvider`` an attribute of ``parsl.providers`` (idempotent)."""
    import parsl.providers

    from parsl_malleable.provider import BackfillProvider

    parsl.providers.BackfillProvider = BackfillProvider  # type: ignore[attr-defined]


class _RegisterAfter(importlib.abc.Loader):
    """Runs the real loader, then registers ``BackfillProvider``."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        """Delegate module creation to the real loader."""
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        """Execute the module with the real loader, then register the provider."""
        self._loader.exec_module(module)
        register_backfill_provider()


class _DispatchHook(importlib.abc.MetaPathFinder):
    """One-shot finder: wraps the loader of :data:`TARGET`, passes on every other module."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        """Return :data:`TARGET`'s spec with a wrapped loader; ``None`` for any other module."""
        if fullname != TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _RegisterAfter(spec.loader)
        return spec


def _run_shadowed_sitecustomize() -> None:
    """Run the next ``sitecustomize`` on ``sys.path`` that this one hides, if any."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


if not any(isinstance(f, _DispatchHook) for f in sys.meta_path):
    sys.meta_path.insert(0, _DispatchHook())
_run_shadowed_sitecustomize()
