"""The one place where inputs are checked as they enter: API options, CLI flags, and names.

Python's own conversions give silent wrong answers at the edges (``int(1.5) == 1``, ``NaN`` passes
every ``<``/``>`` range check, ``list("abc")`` is three node names), so every boundary validates
through the pydantic models and helpers here instead of converting by hand.
"""

from __future__ import annotations

import math
import re
from typing import Any, TypeVar

import click
from pydantic import BaseModel, TypeAdapter, ValidationError

from parsl_malleable.errors import ConfigError

_COUNT = TypeAdapter(int)
M = TypeVar("M", bound=BaseModel)

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
    """``value`` as an ``int`` when it is a whole number ``>= minimum`` (``2.0`` yes; ``1.5``,
    ``NaN``, ``True`` and ``"2"`` no), else ``error`` naming ``what``."""
    if isinstance(value, bool | str):
        raise error(f"{what} must be a whole number, got {value!r}")
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
    """``value`` as a finite float within the bound, else ``error`` naming ``what``."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise error(f"{what} must be a number, got {value!r}") from None
    if isinstance(value, bool | str) or not math.isfinite(number):
        raise error(f"{what} must be a finite number, got {value!r}")
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
