"""Typed messages of the JSON-lines protocols: the handshake, refusals, and the rank requests.

Every message is one JSON object on one line (:mod:`~parsl_malleable.elastic.wire`). What a
peer sends is validated here before any handler sees it: a request of the wrong shape gets an
``error`` reply (:class:`Refusal`) and the connection stays as it was, so a malformed message can
neither crash a handler thread nor reach the coordinator's state. Declared fields are checked;
others pass through as the JSON values they are (a newer rank may send more than this version
declares, and handlers read every field with a default). :func:`parse` is shared with the
controller's agent link, which declares its own requests.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

from parsl_malleable.elastic.metric_book import KEY, MAX_KEY_CHARS, MAX_KEYS

# A nonce and a proof are SHA-256 sized hex strings; nothing longer is ever read as one.
Hex64 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
MemberId = Annotated[str, Field(min_length=1, max_length=256)]
Key = Annotated[str, Field(min_length=1, max_length=1024)]
MetricName = Annotated[str, Field(pattern=KEY.pattern, max_length=MAX_KEY_CHARS)]


class Challenge(BaseModel):
    """Server to client, first line of every connection: answer with :class:`Auth`."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    challenge: Hex64


class Auth(BaseModel):
    """Client to server: HMAC-SHA256 of the challenge's nonce with the shared secret."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    op: Literal["auth"]
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
    """An authenticated request; subclasses fix ``op`` and declare the fields it carries."""

    model_config = ConfigDict(extra="allow", frozen=True)

    op: str

    def to_json(self) -> dict[str, Any]:
        """The fields the peer sent, declared ones as checked (defaults are not filled in:
        handlers keep their own)."""
        return self.model_dump(exclude_unset=True)


class Hello(Request):
    """A client's greeting after the handshake."""

    op: Literal["hello"]


class _MemberRequest(Request):
    member: MemberId


class Register(_MemberRequest):
    """A rank process announces itself."""

    op: Literal["register"]
    host: str = "?"
    pid: int = -1
    block: str | None = None


class Liveness(_MemberRequest):
    """Turns this connection into the rank's liveness connection (pings up, notices down)."""

    op: Literal["liveness"]


class Join(_MemberRequest):
    """Wait for a place in an epoch."""

    op: Literal["join"]


class Poll(_MemberRequest):
    """Rank 0 at a membership check: is a change pending?"""

    op: Literal["poll"]
    epoch: int | None = None
    step: int = 0
    samples: int | float | None = None


class Report(_MemberRequest):
    """End of an epoch on this rank: what it holds, and why it stopped."""

    op: Literal["report"]
    epoch: int | None = None
    reason: str | None = None
    committed_step: int = -1
    attempted_step: int | None = None
    has_state: bool = False


class Left(_MemberRequest):
    """A leaver is gone (``saved_step``: the checkpoint it wrote first, if any;
    ``save_error``: why the commit it held could not be saved)."""

    op: Literal["left"]
    saved_step: int | None = None
    save_error: str | None = None
    committed_step: int | None = None


class Finish(_MemberRequest):
    """Rank 0 completed training; ``result``: its return value where it encodes as JSON."""

    op: Literal["finish"]
    epoch: int | None = None
    step: int | None = None
    result: JsonValue = None


class Abort(_MemberRequest):
    """User code failed on this rank."""

    op: Literal["abort"]
    error: str = "?"


class Warn(_MemberRequest):
    """Something the job's owner must know that did not stop training."""

    op: Literal["warn"]
    message: str = ""


class Leaving(_MemberRequest):
    """This rank got notice that its node goes (SIGTERM) and leaves at its next commit."""

    op: Literal["leaving"]
    reason: str = "notice"


class Metrics(_MemberRequest):
    """Rank 0 of ``epoch`` reports metrics of ``step`` (:mod:`~parsl_malleable.elastic.metric_book`
    holds the limits and the merge rule)."""

    op: Literal["metrics"]
    epoch: int
    step: Annotated[int, Field(ge=0)]
    values: Annotated[
        dict[MetricName, Annotated[float, Field(strict=True)]],
        Field(min_length=1, max_length=MAX_KEYS),
    ]


class Timeline(_MemberRequest):
    """Rank 0 of a new ``epoch`` starts from committed step ``base``: reports above it belong to
    an abandoned timeline."""

    op: Literal["timeline"]
    epoch: int
    base: Annotated[int, Field(ge=0)]


class KvSet(Request):
    """Rendezvous key store: set ``key`` to base64 ``value``."""

    op: Literal["kv_set"]
    key: Key
    value: str


class KvGet(Request):
    """Rendezvous key store: the value of ``key``, waiting up to ``timeout_s``."""

    op: Literal["kv_get"]
    key: Key
    timeout_s: float = 0.0


class KvAdd(Request):
    """Rendezvous key store: add ``amount`` to a counter."""

    op: Literal["kv_add"]
    key: Key
    amount: int


class KvCas(Request):
    """Rendezvous key store: compare and set (base64 values)."""

    op: Literal["kv_cas"]
    key: Key
    expected: str
    desired: str


class KvCheck(Request):
    """Rendezvous key store: whether every key exists now."""

    op: Literal["kv_check"]
    keys: list[Key]


class KvWait(Request):
    """Rendezvous key store: wait up to ``timeout_s`` for every key."""

    op: Literal["kv_wait"]
    keys: list[Key]
    timeout_s: float = 0.0


class KvDelete(Request):
    """Rendezvous key store: remove ``key``."""

    op: Literal["kv_delete"]
    key: Key


class KvNum(Request):
    """Rendezvous key store: how many keys there are."""

    op: Literal["kv_num"]


def _by_op(*models: type[Request]) -> dict[str, type[Request]]:
    return {get_args(model.model_fields["op"].annotation)[0]: model for model in models}


# What a rank (or its store, or a plain client) may send the coordinator once authenticated.
COORDINATOR_REQUESTS: Mapping[str, type[Request]] = _by_op(
    Hello, Register, Liveness, Join, Poll, Report, Left, Finish, Abort, Warn, Leaving,
    Metrics, Timeline,
    KvSet, KvGet, KvAdd, KvCas, KvCheck, KvWait, KvDelete, KvNum,
)  # fmt: skip


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
    "COORDINATOR_REQUESTS",
    "Auth",
    "Challenge",
    "Hello",
    "Liveness",
    "Refusal",
    "Request",
    "parse",
    "parse_line",
]
