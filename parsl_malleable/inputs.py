"""The one place where inputs are checked as they enter: API options, CLI flags, and names.

Python's own conversions give silent wrong answers at the edges (``int(1.5) == 1``, ``NaN`` passes
every ``<``/``>`` range check, ``list("abc")`` is three node names), so every boundary validates
with pydantic, through the types and helpers here, instead of converting by hand:

* data classes that users or files fill (allocator jobs, curves and windows, controller job specs
  and settings) are :func:`boundary` classes: pydantic dataclasses whose fields carry their rules
  (:data:`WholeCount`, :data:`Number`, ``Field(ge=...)``) and whose failures raise the package's
  own error type with :func:`explain`'s message;
* YAML files (site profiles, campaigns) and option sets are pydantic models (:func:`validated`);
* single values (a CLI flag, a function argument) go through :func:`whole_count`,
  :func:`finite_number` or :class:`FiniteFloat`, which use the same two types.

Data made inside the package from checked inputs is plain typed data and is not checked again.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable
from typing import Annotated, Any, TypeVar, cast, dataclass_transform

import click
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, TypeAdapter, ValidationError
from pydantic.dataclasses import dataclass as pydantic_dataclass

from parsl_malleable.errors import ConfigError

M = TypeVar("M", bound=BaseModel)
C = TypeVar("C", bound=type)


def _not_bool_or_text(value: object) -> object:
    # pydantic's lax mode reads True as 1 and "2" as 2: a flag or a quoted YAML value in a count
    # is a mistake to report, not to convert.
    if isinstance(value, bool | str):
        raise ValueError("must be a number, not a bool or a string")
    return value


WholeCount = Annotated[int, BeforeValidator(_not_bool_or_text)]
"""An ``int`` from a whole number (``2`` or ``2.0``; not ``1.5``, ``NaN``, ``True`` or ``"2"``)."""

Number = Annotated[float, BeforeValidator(_not_bool_or_text), Field(allow_inf_nan=False)]
"""A finite ``float`` (not ``NaN``, ``inf``, ``True`` or ``"2"``)."""

Period = Annotated[
    float, Field(allow_inf_nan=True), Field(ge=0), BeforeValidator(_not_bool_or_text)
]
"""Seconds ``>= 0`` where ``inf`` means never (``NaN`` is refused by the bound)."""

Amount = Annotated[
    float, Field(allow_inf_nan=True), Field(gt=0), BeforeValidator(_not_bool_or_text)
]
"""A quantity ``> 0`` where ``inf`` means unlimited (``NaN`` is refused by the bound)."""

_COUNT: TypeAdapter[int] = TypeAdapter(WholeCount)
_NUMBER: TypeAdapter[float] = TypeAdapter(Number)

BOUNDARY_CONFIG = ConfigDict(
    allow_inf_nan=False, arbitrary_types_allowed=True, revalidate_instances="never"
)


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, Field))
def boundary(error: type[Exception] = ConfigError) -> Callable[[C], C]:
    """Make a class a frozen pydantic dataclass whose invalid input raises ``error`` (with
    :func:`explain`'s message: every bad field, its value and its rule).

    Field rules go in the annotations; rules across fields in ``__post_init__``, which raises
    ``error`` itself. It runs once, after the fields are checked (a ``model_validator`` would run
    again each time an instance is passed as another class's field).
    """

    def wrap(cls: C) -> C:
        made = pydantic_dataclass(frozen=True, config=BOUNDARY_CONFIG)(cls)
        init = made.__init__
        names = [f.name for f in dataclasses.fields(made)]

        @functools.wraps(init)
        def checked_init(self: Any, *args: Any, **kwargs: Any) -> None:
            # By keyword, so that errors name fields ("nodes.0"), not argument positions.
            if len(args) > len(names):
                raise TypeError(f"{cls.__name__} takes {len(names)} fields, got {len(args)}")
            positional = dict(zip(names, args, strict=False))
            if twice := positional.keys() & kwargs.keys():
                raise TypeError(f"{cls.__name__} got {sorted(twice)} twice")
            kwargs.update(positional)
            try:
                init(self, **kwargs)
            except ValidationError as exc:
                named = kwargs.get("name")
                what = f"{cls.__name__} {named!r}" if isinstance(named, str) else cls.__name__
                raise error(f"{what}: {explain(exc)}") from None

        made.__init__ = checked_init  # type: ignore[method-assign]
        return cast(C, made)

    return wrap


SAFE_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
"""Names that go into file names, job names and scripts: 1-64 letters, digits, ``_.-``."""
_SAFE_NAME = re.compile(SAFE_NAME)


def safe_name(value: object, what: str, *, error: type[Exception] = ConfigError) -> str:
    """``value`` when it matches :data:`SAFE_NAME` (it can be put unquoted into a file name, a
    batch job's name or a shell script), else ``error`` naming ``what``."""
    if not isinstance(value, str) or not _SAFE_NAME.match(value):
        raise error(
            f"{what} must be 1-64 letters, digits, '_', '.' or '-', starting with a letter or "
            f"digit; got {value!r}"
        )
    return value


def explain(exc: ValidationError) -> str:
    """A one-line message naming every bad field, its value and the rule it broke."""
    parts = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(p) for p in error["loc"]) or "value"
        parts.append(f"{where}={error.get('input')!r}: {error['msg']}")
    return "; ".join(parts)


def validated(model: type[M], error: type[Exception] = ConfigError, **values: Any) -> M:
    """``model(**values)``, raising ``error`` with :func:`explain`'s message when invalid."""
    try:
        return model(**values)
    except ValidationError as exc:
        raise error(explain(exc)) from None


def whole_count(
    value: object, what: str, *, minimum: int = 0, error: type[Exception] = ConfigError
) -> int:
    """``value`` as an ``int`` when it is a :data:`WholeCount` ``>= minimum``, else ``error``
    naming ``what``."""
    try:
        count = _COUNT.validate_python(value)
    except ValidationError:
        raise error(f"{what} must be a whole number, got {value!r}") from None
    if count < minimum:
        raise error(f"{what} must be >= {minimum}, got {value!r}")
    return count


def finite_number(
    value: object,
    what: str,
    *,
    gt: float | None = None,
    ge: float | None = None,
    le: float | None = None,
    error: type[Exception] = ConfigError,
) -> float:
    """``value`` as a :data:`Number` within the bound, else ``error`` naming ``what``."""
    try:
        number = _NUMBER.validate_python(value)
    except ValidationError:
        raise error(f"{what} must be a finite number, got {value!r}") from None
    if (gt is not None and not number > gt) or (ge is not None and not number >= ge):
        bound = f"> {gt}" if gt is not None else f">= {ge}"
        raise error(f"{what} must be {bound}, got {value!r}")
    if le is not None and not number <= le:
        raise error(f"{what} must be <= {le}, got {value!r}")
    return number


class FiniteFloat(click.ParamType):
    """A click float option that refuses ``nan``/``inf`` (``click.FloatRange`` lets NaN pass)."""

    name = "number"

    def __init__(
        self, *, gt: float | None = None, ge: float | None = None, le: float | None = None
    ) -> None:
        self.gt, self.ge, self.le = gt, ge, le

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None):
        """Parse and range-check one command-line value."""
        if isinstance(value, float):
            text = value
        else:
            try:
                text = float(value)
            except ValueError:
                self.fail(f"{value!r} is not a number", param, ctx)
        try:
            return finite_number(text, "value", gt=self.gt, ge=self.ge, le=self.le)
        except ConfigError as exc:
            self.fail(str(exc).removeprefix("value "), param, ctx)


def require_parquet() -> None:
    """Raise :class:`ConfigError` unless pandas can write Parquet (checked before the work)."""
    for engine in ("pyarrow", "fastparquet"):
        try:
            __import__(engine)
            return
        except ImportError:
            continue
    raise ConfigError(
        "writing Parquet needs pyarrow (pip install pyarrow) or fastparquet; "
        "use --format csv / a .csv file instead"
    )
