"""The one place where inputs are checked as they enter: API options, CLI flags, and names.

Python's own conversions give silent wrong answers at the edges (``int(1.5) == 1``, ``NaN`` passes
every ``<``/``>`` range check, ``list("abc")`` is three node names), so every boundary validates
with pydantic, through the types and helpers here, instead of converting by hand:

* data classes that users or files fill (allocator jobs, curves and windows, controller job specs
  and settings) are :func:`boundary` classes: pydantic dataclasses whose fields carry their rules
  (:data:`WholeCount`, :data:`Number`, ``Field(ge=...)``) and whose failures raise the package's
  own error type with :func:`explain`'s message;
* YAML files (site profiles, campaigns) are read by :func:`load_yaml_file` (or
  :func:`load_yaml_text`): bounded in size, anchors and aliases refused, so that a few lines
  cannot expand to gigabytes; they and option sets are :class:`InputModel` models
  (:func:`validated`), whose number fields follow the same rules whatever their annotation;
* single values (a CLI flag, a function argument) go through :func:`whole_count`,
  :func:`finite_number` or :class:`FiniteFloat`, which use the same two types.

Data made inside the package from checked inputs is plain typed data and is not checked again.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import stat
import types
import typing
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, TypeVar, cast, dataclass_transform

import click
import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
)
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


@dataclasses.dataclass(frozen=True)
class _NumberRule:
    """What a field's annotation lets through where a number may go."""

    numbers: str = ""  # "integer" or "number" when an int or a float may stand here
    bools: bool = False  # bool is one of the field's own types
    texts: bool = False  # any str is allowed (str, Path, an enum of strings...)
    literals: frozenset[object] = frozenset()  # Literal values, e.g. "auto"
    items: tuple[_NumberRule, ...] = ()  # rules of the members of a list, tuple or dict


def _number_rule(annotation: object) -> _NumberRule:
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _number_rule(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        parts = [_number_rule(a) for a in typing.get_args(annotation)]
        return _NumberRule(
            numbers=max((p.numbers for p in parts), key=("", "integer", "number").index),
            bools=any(p.bools for p in parts),
            texts=any(p.texts for p in parts),
            literals=frozenset().union(*(p.literals for p in parts)),
            items=tuple(i for p in parts for i in p.items),
        )
    if origin is Literal:
        return _NumberRule(literals=frozenset(typing.get_args(annotation)))
    if isinstance(origin, type) and issubclass(origin, Mapping):
        # the values; the keys of YAML maps are text anyway
        return _NumberRule(items=(_number_rule(typing.get_args(annotation)[-1]),))
    if isinstance(origin, type) and issubclass(origin, Collection) and origin is not str:
        members = [a for a in typing.get_args(annotation) if a is not Ellipsis]
        return _NumberRule(items=tuple(_number_rule(a) for a in members))
    if annotation is type(None):
        return _NumberRule()
    if annotation is bool:
        return _NumberRule(bools=True)
    if annotation is int:
        return _NumberRule(numbers="integer")
    if annotation is float:
        return _NumberRule(numbers="number")
    if annotation is Any:
        return _NumberRule(bools=True, texts=True)
    return _NumberRule(texts=True)


def _article(kind: str) -> str:
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def _refuse_bool_or_text(value: object, rule: _NumberRule, where: str) -> None:
    """Raise when ``value`` is a bool or a string standing where only numbers (or literals)
    may: pydantic's lax mode would read ``True`` as 1 and ``"5"`` as 5."""
    if rule.numbers and isinstance(value, bool) and not rule.bools:
        raise ValueError(f"{where}must be {_article(rule.numbers)}, not a bool")
    if rule.numbers and isinstance(value, str) and not rule.texts and value not in rule.literals:
        raise ValueError(f"{where}must be {_article(rule.numbers)}, not a string")
    if rule.items and isinstance(value, list | tuple):
        for i, item in enumerate(value):
            # list[X] and tuple[X, ...] have one member rule; tuple[X, Y] one per position
            member = (
                rule.items[0] if len(rule.items) == 1 else rule.items[min(i, len(rule.items) - 1)]
            )
            _refuse_bool_or_text(item, member, f"item {i} ")
    elif rule.items and isinstance(value, dict):
        for key, item in value.items():
            _refuse_bool_or_text(item, rule.items[0], f"{key!r} ")


class InputModel(BaseModel):
    """Base of the models that users fill from YAML files and option sets.

    Frozen, unknown keys refused, and every number field, whatever its annotation (``int``,
    ``float``, ``int | None``, ``list[float]``, ``int | Literal["auto"]``), under
    :data:`WholeCount` / :data:`Number`'s rules: no ``True`` for a count, no ``"5"`` for a
    number, no ``NaN``; ``inf`` only where the field says ``allow_inf_nan=True`` (as
    :data:`Period` and :data:`Amount` do) and its bounds let it through.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    _number_rules: ClassVar[dict[str, _NumberRule]]

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        cls._number_rules = {
            name: _number_rule(field.rebuild_annotation())
            for name, field in cls.model_fields.items()
        }

    @field_validator("*", mode="before")
    @classmethod
    def _numbers_are_numbers(cls, value: object, info: ValidationInfo) -> object:
        rule = cls._number_rules.get(info.field_name or "")
        if rule is not None:
            _refuse_bool_or_text(value, rule, "")
        return value


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


MAX_YAML_BYTES = 1 << 20
"""The largest YAML file (campaign, site profile) read: 1 MiB, far above any real one."""

MAX_YAML_DEPTH = 64
"""The deepest nesting of lists and mappings read (a campaign needs about 6)."""


class _Refused(Exception):
    """A YAML feature that the loader refuses, with where it was found."""

    def __init__(self, mark: yaml.Mark | None, message: str) -> None:
        super().__init__(message)
        self.mark = mark
        self.message = message


class _PlainLoader(yaml.SafeLoader):
    """:class:`yaml.SafeLoader` without anchors and aliases: an alias repeats a whole subtree,
    so nested aliases (the "billion laughs") make a 1 kB file a graph that every reader of the
    data (pydantic, ``json.dumps``, a table) walks as billions of nodes."""

    depth = 0

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node | None:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise _Refused(
                event.start_mark,
                "YAML anchors and aliases (&name, *name) are not allowed here (nested ones can "
                "expand a few lines to gigabytes); write the values out in full",
            )
        if self.depth >= MAX_YAML_DEPTH:
            raise _Refused(event.start_mark, f"nested more than {MAX_YAML_DEPTH} levels deep")
        self.depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        # YAML keeps the last of two equal keys without a word: a campaign with `epochs` twice,
        # or a second `jobs:` list, would run something other than what most of it says.
        first: dict[Any, int] = {}  # key -> the line it was first given on
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<:`, flattened by SafeLoader
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                repeated = key in first
            except TypeError:  # an unhashable key: the constructor below says so
                continue
            if repeated:
                raise _Refused(
                    key_node.start_mark,
                    f"key {key!r} is given twice in one mapping (lines {first[key]} and {line}); "
                    "YAML would keep only the last: keep one",
                )
            first[key] = line
        return super().construct_mapping(node, deep=deep)


def _parse_yaml(
    text: str | bytes, where: Callable[[int | None], str], error: type[Exception]
) -> Any:
    """The document in ``text``; ``error`` with ``where(line)`` (1-based, None: unknown) first."""
    loader = None
    try:
        # The reader decodes as it is made: a binary or non-UTF-8 file fails here already.
        loader = _PlainLoader(text)
        return loader.get_single_data()
    except _Refused as exc:
        raise error(f"{where(_line(exc.mark))}: {exc.message}") from None
    except yaml.reader.ReaderError as exc:
        raise error(f"{where(_reader_line(text, exc))}: {_not_text(exc)}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or exc
        raise error(f"{where(_line(mark))}: not valid YAML: {problem}") from None
    finally:
        if loader is not None:
            loader.dispose()


def _reader_line(text: str | bytes, exc: yaml.reader.ReaderError) -> int | None:
    """The 1-based line of a character the YAML reader refused. Its position counts bytes of
    the file for a byte that does not decode, characters of the decoded text otherwise."""
    if isinstance(text, bytes) and exc.encoding != "unicode":
        return text[: exc.position].count(b"\n") + 1
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    return text[: exc.position].count("\n") + 1


def _not_text(exc: yaml.reader.ReaderError) -> str:
    """One line for what the YAML reader refused: bytes that are not UTF-8 (UTF-16 with its
    byte order mark is read too), or a control character no YAML text may hold."""
    code = exc.character if isinstance(exc.character, int) else ord(exc.character)
    if exc.encoding != "unicode":
        return (
            f"not UTF-8 text (byte 0x{code:02x} at offset {exc.position}: {exc.reason}); a "
            "YAML file is UTF-8 text: is this the file you meant? (re-save it as UTF-8)"
        )
    return (
        f"not YAML text: character U+{code:04X} at offset {exc.position} is not allowed "
        f"({exc.reason}); is this the file you meant?"
    )


def _line(mark: yaml.Mark | None) -> int | None:
    return mark.line + 1 if mark is not None else None


def load_yaml_file(path: str | Path, what: str, *, error: type[Exception] = ConfigError) -> Any:
    """The YAML document in file ``path`` (None when empty), read with limits: a regular file
    of at most :data:`MAX_YAML_BYTES`, nested at most :data:`MAX_YAML_DEPTH` deep, without
    anchors or aliases. Anything else raises ``error`` naming the file, the line where known,
    and ``what`` the file is (``"campaign"``)."""
    path = Path(path)
    try:
        # Non-blocking: a FIFO in the file's place must not hang the reader.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as file:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise error(f"{what} {path}: not a regular file")
            data = file.read(MAX_YAML_BYTES + 1)
    except OSError as exc:
        raise error(f"{what} {path}: cannot read it: {exc.strerror or exc}") from None
    if len(data) > MAX_YAML_BYTES:
        raise error(
            f"{what} {path}: over {MAX_YAML_BYTES} bytes; a {what} file is a few kB (this is "
            "not the file you meant, or it was generated wrongly)"
        )

    def where(line: int | None) -> str:
        return f"{path}:{line}" if line is not None else str(path)

    return _parse_yaml(data, where, error)


def load_yaml_text(text: str, what: str, *, error: type[Exception] = ConfigError) -> Any:
    """:func:`load_yaml_file` for YAML given as text (``what`` names it in messages: ``"campaign
    text"``)."""
    if len(text.encode()) > MAX_YAML_BYTES:
        raise error(f"{what}: over {MAX_YAML_BYTES} bytes of YAML; refusing to read it")

    def where(line: int | None) -> str:
        return f"{what} (line {line})" if line is not None else what

    return _parse_yaml(text, where, error)
