"""The messages every authenticated JSON-lines connection shares, whatever it carries.

The handshake (:class:`Challenge`, :class:`Auth`, the :class:`Ok` that admits a client, the
:class:`Refusal` that does not), and the bases of a protocol's own messages: a
:class:`Request` names its ``op``, a :class:`Reply` is an answer; :func:`parse` validates a
request as the model its ``op`` names. The rank protocol
(:mod:`parsl_malleable.elastic.messages`) and the agent link
(:mod:`parsl_malleable.controller.agent_link`) declare theirs on these.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

# A nonce and a proof are SHA-256 sized hex strings; nothing longer is ever read as one.
Hex64 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class Challenge(BaseModel):
    """Server to client, first line of every connection: answer with :class:`Auth`."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    challenge: Hex64


class Auth(BaseModel):
    """Client to server: HMAC-SHA256 of the challenge's nonce with the shared secret."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    op: Literal["auth"] = "auth"
    mac: Hex64


class Refusal(BaseModel):
    """An ``error`` reply. ``retry``: the server was busy (the handshake was evicted or every
    handler slot is taken), so the same request may succeed later; otherwise it will not."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    error: str
    retry: bool = False

    def to_json(self) -> dict[str, Any]:
        """The wire form (``retry`` only when set, as older peers never sent it)."""
        return self.model_dump(exclude_defaults=True)


class Request(BaseModel):
    """An authenticated request; subclasses fix ``op`` and declare the fields it carries, with
    their defaults: a handler reads the validated model, never the raw message."""

    model_config = ConfigDict(extra="allow", frozen=True)

    op: str

    def to_json(self) -> dict[str, Any]:
        """The wire form: ``op`` and the fields given (a receiver fills in the defaults)."""
        return {"op": self.op, **self.model_dump(mode="json", exclude_unset=True)}


class Reply(BaseModel):
    """A message from the server: the answer to a request (the client validates it as the type
    the request expects), or one the server pushes (a notice, an order)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    def to_json(self) -> dict[str, Any]:
        """The wire form."""
        return self.model_dump(mode="json")


class Ok(Reply):
    """Done; nothing to return."""

    ok: Literal[True] = True


class Hello(Request):
    """A client's greeting after the handshake."""

    op: Literal["hello"] = "hello"


def parse(models: Mapping[str, type[Request]], raw: dict[str, Any]) -> Request | Refusal:
    """``raw`` as the model its ``op`` names, or the :class:`Refusal` to send back."""
    op = raw.get("op")
    if not isinstance(op, str):
        return Refusal(error="a request needs an 'op' string")
    model = models.get(op)
    if model is None:
        return Refusal(error=f"unknown op {op!r}")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "message"
        return Refusal(error=f"bad {op!r} request: {where}: {first['msg']}")


def parse_line(model: type[BaseModel], line: bytes) -> BaseModel | None:
    """One handshake line as ``model``, or ``None`` when it is not one (bad JSON included)."""
    try:
        return model.model_validate_json(line)
    except ValidationError:
        return None


__all__ = [
    "Auth",
    "Challenge",
    "Hello",
    "Hex64",
    "Ok",
    "Refusal",
    "Reply",
    "Request",
    "parse",
    "parse_line",
]
