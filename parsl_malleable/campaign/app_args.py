"""A campaign's training functions: imported by name, their arguments checked before a run.

``app: module:function`` is imported (:func:`resolve_app`; an error inside the module is named
by file and line, not shown as a traceback), the job's arguments are bound to the function's
signature (:func:`check_app_args`) and checked against its annotations (:class:`ArgTypes`), so
that ``lr: "fast"`` for ``lr: float`` fails at ``validate``, naming ``jobs[0].args.lr``, instead
of as a TypeError in a rank. The rules are pydantic's lax mode (``1`` is a fine ``float``, a
YAML list a fine ``tuple``), less its conversions of text and bools to numbers: a quoted
``"0.1"`` would reach the function as text, and ``"false"`` is true.
"""

from __future__ import annotations

import contextlib
import enum
import importlib
import inspect
import os
import threading
import traceback
import types
import typing
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

from pydantic import ConfigDict, TypeAdapter, ValidationError
from pydantic.errors import PydanticSchemaGenerationError


def resolve_app(ref: str) -> Callable[..., Any]:
    """The function ``module:function`` names; ValueError saying what is missing, or where the
    module failed to import."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"app must look like 'module:function'; got {ref!r}")
    try:
        with _exit_refused():
            module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"cannot import {module_name!r}: {exc}") from None
    except Exception as exc:  # the app's own code failed: name it, no traceback through click
        raise ValueError(f"cannot import {module_name!r}: {import_failure(exc)}") from None
    except (SystemExit, _ExitAtImport) as exc:  # `validate` would end with the app's status
        raise ValueError(f"cannot import {module_name!r}: {exit_failure(exc)}") from None
    fn: Any = module
    for part in attr.split("."):
        fn = getattr(fn, part, None)
        if fn is None:
            raise ValueError(f"module {module_name!r} has no {attr!r}")
    if not callable(fn):
        raise ValueError(f"{ref!r} is not callable")
    return fn


class _ExitAtImport(BaseException):
    """``os._exit(code)`` called by a module while :func:`resolve_app` imports it, raised in its
    place. A BaseException, like SystemExit, so that the module's own ``except Exception`` does
    not swallow it."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


_real_os_exit = os._exit
_importing: set[int] = set()  # threads in resolve_app's import of an app module


def _os_exit_guard(status: int) -> NoReturn:
    """``os._exit`` while an app module is imported: in the importing thread it raises, so the
    check can name the app instead of the process ending at once with the app's status (rc 0,
    not a word, for ``os._exit(0)``); anywhere else, and after the import (a module that kept
    ``from os import _exit``), it is the real one."""
    if threading.get_ident() in _importing:
        raise _ExitAtImport(status)
    _real_os_exit(status)


@contextlib.contextmanager
def _exit_refused() -> Iterator[None]:
    """Around an app's import: ``os._exit`` in this thread raises :class:`_ExitAtImport`.

    ``os._exit`` cannot be caught; the alternative, importing every app in a child process first,
    would import torch twice per ``validate``. A hard crash at import (a signal) is not caught."""
    _importing.add(threading.get_ident())
    os._exit = _os_exit_guard
    try:
        yield
    finally:
        _importing.discard(threading.get_ident())
        if not _importing:
            os._exit = _real_os_exit


def exit_failure(exc: SystemExit | _ExitAtImport) -> str:
    """``file:line: called sys.exit(2) while imported; ...`` for a module that exits at import."""
    call = "sys.exit" if isinstance(exc, SystemExit) else "os._exit"
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if not f.filename.startswith("<frozen") and f.filename != __file__
    ]
    where = f"{frames[-1].filename}:{frames[-1].lineno}: " if frames else ""
    return (
        f"{where}called {call}({exc.code!r}) while imported; an app module must not exit at "
        "import (put that code under `if __name__ == '__main__':`)"
    )


def import_failure(exc: BaseException) -> str:
    """``file:line: SyntaxError: message`` for an exception raised while importing a module:
    where it happened (the innermost line of code, not importlib's machinery)."""
    if isinstance(exc, SyntaxError) and exc.filename:
        where = f"{exc.filename}:{exc.lineno}" if exc.lineno else exc.filename
        return f"{where}: {type(exc).__name__}: {exc.msg}"
    frames = [
        f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<frozen")
    ]
    where = f"{frames[-1].filename}:{frames[-1].lineno}: " if frames else ""
    return f"{where}{type(exc).__name__}: {exc}"


def check_app_args(fn: Callable[..., Any], args: dict[str, Any]) -> None:
    """Raise ValueError if ``fn(ctx, **args)`` would not bind."""
    try:
        inspect.signature(fn).bind(None, **args)
    except TypeError as exc:
        raise ValueError(f"{getattr(fn, '__name__', fn)}(ctx, ...): {exc}") from None


def _annotations(fn: Callable[..., Any]) -> dict[str, Any]:
    """``fn``'s parameter annotations, evaluated; one that cannot be (a name imported only for
    type checkers) is left out rather than failing the others."""
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except Exception:  # noqa: S110 (one bad annotation: evaluate them one by one below)
        pass
    globalns = getattr(inspect.unwrap(fn), "__globals__", {})
    out = {}
    for name, annotation in getattr(fn, "__annotations__", {}).items():
        holder = types.SimpleNamespace(__annotations__={name: annotation})
        try:
            out.update(typing.get_type_hints(holder, globalns=globalns, include_extras=True))
        except Exception:  # noqa: S112 (not checkable here; the rank will use it as it is)
            continue
    return out


def _adapter(annotation: Any) -> TypeAdapter[Any] | None:
    """A validator of ``annotation`` (None: pydantic cannot check it)."""
    try:
        return TypeAdapter(annotation)
    except PydanticSchemaGenerationError:
        pass  # a class pydantic does not know: an isinstance check is still a check
    except Exception:
        return None
    try:
        return TypeAdapter(annotation, config=ConfigDict(arbitrary_types_allowed=True))
    except Exception:
        return None


def _label(annotation: Any) -> str:
    if isinstance(annotation, type) and not isinstance(annotation, types.GenericAlias):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def _text_or_bool_converted(value: Any, result: Any) -> bool:
    """Whether lax validation made a number or bool of text, or a number of a bool: the
    function would get the text (or the bool) itself."""
    if isinstance(result, enum.Enum):
        return False
    if isinstance(value, str):
        return isinstance(result, int | float)  # bool is an int
    if isinstance(value, bool):
        return not isinstance(result, bool)
    if isinstance(value, list | tuple) and isinstance(result, list | tuple | set | frozenset):
        if len(value) != len(result) or isinstance(result, set | frozenset):
            return False
        return any(_text_or_bool_converted(v, r) for v, r in zip(value, result, strict=True))
    if isinstance(value, dict) and isinstance(result, dict):
        return any(_text_or_bool_converted(v, result.get(k)) for k, v in value.items())
    return False


class ArgTypes:
    """The annotated parameters of one training function, ready to check arguments against."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.name = getattr(fn, "__name__", str(fn))
        annotations = _annotations(fn)
        self.checks: dict[str, tuple[TypeAdapter[Any], str]] = {}
        self.rest: tuple[TypeAdapter[Any], str] | None = None  # **kwargs: T
        params = list(inspect.signature(fn).parameters.values())[1:]  # after ctx
        self.named = {p.name for p in params if p.kind is not inspect.Parameter.VAR_KEYWORD}
        for param in params:
            annotation = annotations.get(param.name, inspect.Parameter.empty)
            if annotation in (inspect.Parameter.empty, Any, object):
                continue
            adapter = _adapter(annotation)
            if adapter is None:
                continue
            if param.kind is inspect.Parameter.VAR_KEYWORD:
                self.rest = (adapter, _label(annotation))
            elif param.kind is not inspect.Parameter.VAR_POSITIONAL:
                self.checks[param.name] = (adapter, _label(annotation))

    def problem(self, name: str, value: Any) -> str | None:
        """Why ``value`` does not fit parameter ``name`` (None: it fits, or is not annotated):
        ``train() takes lr: float; Input should be a valid number``."""
        check = self.checks.get(name) if name in self.named else self.rest
        if check is None:
            return None
        adapter, label = check
        takes = f"{self.name}() takes {name}: {label}"
        try:
            result = adapter.validate_python(value)
        except ValidationError as exc:
            reasons = []
            for error in exc.errors(include_url=False):
                at = "".join(f"[{p!r}]" for p in error["loc"])
                reasons.append(f"{at}: {error['msg']}" if at else error["msg"])
            return f"{takes}; {'; '.join(reasons)}"
        if _text_or_bool_converted(value, result):
            kind = "text" if isinstance(value, str) else "a bool"
            return f"{takes}; got {kind}, which it would receive as it is (write a plain number)"
        return None


__all__ = ["ArgTypes", "check_app_args", "import_failure", "resolve_app"]
