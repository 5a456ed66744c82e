"""The rank protocol's messages, both ways: requests, replies, assignments and notices.

What a rank (or its store) sends its coordinator, and what comes back, as pydantic models on the
transport of :mod:`parsl_malleable.transport` (its bases: :class:`Request`, :class:`Reply`,
:class:`Ok`; its handshake and refusals). What a peer sends is validated before any handler
sees it: a request of the wrong shape gets an ``error`` reply and the connection stays as it
was, so a malformed message can neither crash a handler thread nor reach the coordinator's
state. Handlers are dispatched on the validated model and read its fields, whose defaults are
declared here once; fields a model does not declare pass through unread (a newer rank may send
more than this version knows). Answers are models too (:data:`Assignment`, the answer to
``join`` and ``report``), validated by the client as the type its request expects
(:meth:`~parsl_malleable.transport.wire.RequestClient.call`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, JsonValue, TypeAdapter

from parsl_malleable.elastic.metric_book import KEY, MAX_KEY_CHARS, MAX_KEYS
from parsl_malleable.transport.messages import Hello, Ok, Reply, Request

MemberId = Annotated[str, Field(min_length=1, max_length=256)]
Key = Annotated[str, Field(min_length=1, max_length=1024)]
MetricName = Annotated[str, Field(pattern=KEY.pattern, max_length=MAX_KEY_CHARS)]


class _MemberRequest(Request):
    member: MemberId


class Register(_MemberRequest):
    """A rank process announces itself."""

    op: Literal["register"] = "register"
    host: str = "?"
    pid: int = -1
    block: str | None = None


class Liveness(_MemberRequest):
    """Turns this connection into the rank's liveness connection (pings up, notices down)."""

    op: Literal["liveness"] = "liveness"


class Ping(Request):
    """A heartbeat on a liveness connection (read only as a sign of life)."""

    op: Literal["ping"] = "ping"


class Join(_MemberRequest):
    """Wait for a place in an epoch."""

    op: Literal["join"] = "join"


class Poll(_MemberRequest):
    """Rank 0 at a membership check: is a change pending?"""

    op: Literal["poll"] = "poll"
    epoch: int | None = None
    step: int = 0
    samples: int | float | None = None


class Report(_MemberRequest):
    """End of an epoch on this rank: what it holds, and why it stopped."""

    op: Literal["report"] = "report"
    epoch: int | None = None
    reason: str | None = None
    committed_step: int = -1
    attempted_step: int | None = None
    has_state: bool = False


class Left(_MemberRequest):
    """A leaver is gone (``saved_step``: the checkpoint it wrote first, if any;
    ``save_error``: why the commit it held could not be saved)."""

    op: Literal["left"] = "left"
    saved_step: int | None = None
    save_error: str | None = None
    committed_step: int | None = None


class Finish(_MemberRequest):
    """Rank 0 completed training; ``result``: its return value where it encodes as JSON."""

    op: Literal["finish"] = "finish"
    epoch: int | None = None
    step: int | None = None
    result: JsonValue = None


class Abort(_MemberRequest):
    """User code failed on this rank."""

    op: Literal["abort"] = "abort"
    error: str = "?"
    traceback: str = ""


class Warn(_MemberRequest):
    """Something the job's owner must know that did not stop training."""

    op: Literal["warn"] = "warn"
    message: str = ""


class Leaving(_MemberRequest):
    """This rank got notice that its node goes (SIGTERM) and leaves at its next commit."""

    op: Literal["leaving"] = "leaving"
    reason: str = "notice"


class Metrics(_MemberRequest):
    """Rank 0 of ``epoch`` reports metrics of ``step`` (:mod:`~parsl_malleable.elastic.metric_book`
    holds the limits and the merge rule)."""

    op: Literal["metrics"] = "metrics"
    epoch: int
    step: Annotated[int, Field(ge=0)]
    values: Annotated[
        dict[MetricName, Annotated[float, Field(strict=True)]],
        Field(min_length=1, max_length=MAX_KEYS),
    ]


class Timeline(_MemberRequest):
    """Rank 0 of a new ``epoch`` starts from committed step ``base``: reports above it belong to
    an abandoned timeline."""

    op: Literal["timeline"] = "timeline"
    epoch: int
    base: Annotated[int, Field(ge=0)]


class KvSet(Request):
    """Rendezvous key store: set ``key`` to base64 ``value``."""

    op: Literal["kv_set"] = "kv_set"
    key: Key
    value: str


class KvGet(Request):
    """Rendezvous key store: the value of ``key``, waiting up to ``timeout_s``."""

    op: Literal["kv_get"] = "kv_get"
    key: Key
    timeout_s: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0


class KvAdd(Request):
    """Rendezvous key store: add ``amount`` to a counter."""

    op: Literal["kv_add"] = "kv_add"
    key: Key
    amount: int


class KvCas(Request):
    """Rendezvous key store: compare and set (base64 values)."""

    op: Literal["kv_cas"] = "kv_cas"
    key: Key
    expected: str
    desired: str


class KvCheck(Request):
    """Rendezvous key store: whether every key exists now."""

    op: Literal["kv_check"] = "kv_check"
    keys: list[Key]


class KvWait(Request):
    """Rendezvous key store: wait up to ``timeout_s`` for every key."""

    op: Literal["kv_wait"] = "kv_wait"
    keys: list[Key]
    timeout_s: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0


class KvDelete(Request):
    """Rendezvous key store: remove ``key``."""

    op: Literal["kv_delete"] = "kv_delete"
    key: Key


class KvNum(Request):
    """Rendezvous key store: how many keys there are."""

    op: Literal["kv_num"] = "kv_num"


# ---------------------------------------------------------------- replies (coordinator -> rank)


class CheckpointPolicy(BaseModel):
    """The identity a job's checkpoints are bound to, and the folder it may start from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    job: str = ""
    campaign: str = ""
    warm_start_from: str | None = None


class Registered(Ok):
    """The answer to :class:`Register` (``checkpoint``: None for a job made without a name)."""

    checkpoint: CheckpointPolicy | None = None


class ChangeAnswer(Reply):
    """The answer to :class:`Poll`: whether the group must stop at this commit."""

    change: bool


class TimelineAnswer(Ok):
    """The answer to :class:`Timeline`: the newest metric step the coordinator holds."""

    last: int


class MetricsAnswer(Ok):
    """The answer to :class:`Metrics` (``stale``: from an abandoned timeline, dropped)."""

    stale: bool = False


class KvBytes(Reply):
    """A key's value, base64 (``kv_get``, ``kv_cas``)."""

    value: str


class KvCount(Reply):
    """A number (``kv_add``: the counter's new value; ``kv_num``: how many keys)."""

    value: int


class KvFlag(Reply):
    """A yes or no (``kv_check``: every key exists; ``kv_delete``: the key existed)."""

    ok: bool


# An assignment: the answer to Join and Report, and what the membership hands each member.


class Run(Reply):
    """Run as ``rank`` of ``world_size`` in ``epoch``; ``known_step`` is the newest step the
    coordinator knows the job committed (-1: none), to detect work lost on a resume."""

    action: Literal["run"] = "run"
    epoch: int
    rank: Annotated[int, Field(ge=0)]
    world_size: Annotated[int, Field(ge=1)]
    info: dict[str, JsonValue]
    known_step: int = -1


class Leave(Reply):
    """Leave the job (``save``: write a checkpoint of the commit held first)."""

    action: Literal["leave"] = "leave"
    save: bool = False


class Exit(Reply):
    """The job is over for this rank (``reason``: its outcome)."""

    action: Literal["exit"] = "exit"
    reason: str = "told to exit"


Assignment = Annotated[Run | Leave | Exit, Field(discriminator="action")]
ASSIGNMENT: TypeAdapter[Run | Leave | Exit] = TypeAdapter(Assignment)


# Notices the coordinator pushes on a rank's liveness connection.


class PeerLostNotice(Reply):
    """A member of ``epoch`` was lost: a collective blocked on it can give up now."""

    notice: Literal["peer_lost"] = "peer_lost"
    epoch: int
    member: str


class DroppedNotice(Reply):
    """The coordinator stopped counting this rank (``why``)."""

    notice: Literal["dropped"] = "dropped"
    why: str = "dropped"


Notice = Annotated[PeerLostNotice | DroppedNotice, Field(discriminator="notice")]
NOTICE: TypeAdapter[PeerLostNotice | DroppedNotice] = TypeAdapter(Notice)


def _by_op(*models: type[Request]) -> dict[str, type[Request]]:
    return {get_args(model.model_fields["op"].annotation)[0]: model for model in models}


# What a rank (or its store, or a plain client) may send the coordinator once authenticated.
COORDINATOR_REQUESTS: Mapping[str, type[Request]] = _by_op(
    Hello, Register, Liveness, Join, Poll, Report, Left, Finish, Abort, Warn, Leaving,
    Metrics, Timeline,
    KvSet, KvGet, KvAdd, KvCas, KvCheck, KvWait, KvDelete, KvNum,
)  # fmt: skip


__all__ = [
    "ASSIGNMENT",
    "COORDINATOR_REQUESTS",
    "NOTICE",
    "Abort",
    "Assignment",
    "ChangeAnswer",
    "CheckpointPolicy",
    "DroppedNotice",
    "Exit",
    "Finish",
    "Join",
    "KvAdd",
    "KvBytes",
    "KvCas",
    "KvCheck",
    "KvCount",
    "KvDelete",
    "KvFlag",
    "KvGet",
    "KvNum",
    "KvSet",
    "KvWait",
    "Leave",
    "Leaving",
    "Left",
    "Liveness",
    "Metrics",
    "MetricsAnswer",
    "Notice",
    "PeerLostNotice",
    "Ping",
    "Poll",
    "Register",
    "Registered",
    "Report",
    "Run",
    "Timeline",
    "TimelineAnswer",
    "Warn",
]
