"""What travels with a rank: its job's runtime settings, where to find the job, how it ended,
and the ``prepare`` hook a training function may carry.

Plain dataclasses without torch, so that an agent can unpickle its task and say hello before it
imports torch (controller/node_agent.py); :mod:`parsl_malleable.elastic.rank` re-exports them.

A :class:`RankSpec` carries its job's coordinator token: the field is left out of the repr, so
that Parsl's DEBUG log of task arguments and any log line that prints a spec never show it.
"""

from __future__ import annotations

import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

F = TypeVar("F", bound=Callable[..., Any])
BatchMeaning = Literal["global", "per_rank"]
"""What a sampler's ``batch_size`` means: one optimizer step's (``global``) or each rank's."""


@dataclass(frozen=True)
class RankSettings:
    """Runtime knobs shared by every rank of a job."""

    backend: str = "torch"
    checkpoint_dir: str | None = None
    keep_checkpoints: int = 3
    check_every: int = 1
    checkpoint_every: int = 200
    collective_timeout_s: float = 30.0
    heartbeat_interval_s: float = 1.0
    torch_threads: int | None = 1
    # What a sampler's batch_size means where the training function did not say (app option).
    batch: BatchMeaning = "global"


@dataclass(frozen=True)
class MembershipSettings:
    """How a job's coordinator forms its groups: the one home of these defaults
    (:class:`~parsl_malleable.elastic.coordinator.Coordinator`,
    :class:`~parsl_malleable.elastic.membership.Membership` and ``@malleable_app``'s options
    read them here)."""

    settle_s: float = 0.5  # newcomers and leavers gathered this long into one regroup
    reform_timeout_s: float = 60.0  # a group that has not formed by then is formed again
    heartbeat_timeout_s: float = 10.0  # a rank silent this long is lost


RANK_DEFAULTS = RankSettings()
"""The defaults of every rank setting, read by whatever takes one as an option."""
MEMBERSHIP_DEFAULTS = MembershipSettings()
"""The defaults of the coordinator's grouping settings."""


@dataclass(frozen=True)
class RankSpec:
    """Everything a rank process needs to find its job (picklable: it travels in a Parsl task)."""

    host: str
    port: int
    token: str = field(repr=False)
    settings: RankSettings = field(default_factory=RankSettings)
    member_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    local_rank: int = 0
    device: str = "cpu"


@dataclass
class RankOutcome:
    """How a rank task ended: ``finished`` (with the return value), ``left``, ``exited`` or
    ``failed`` (the training function raised: ``reason`` in one line, ``traceback`` formatted,
    its last :data:`TRACEBACK_CHARS` characters); ``terminated`` when the rank left because its
    process was told to end (SIGTERM: a preemption's notice), so that whoever runs it ends the
    process too."""

    member_id: str
    status: str
    rank: int | None = None
    value: Any = None
    reason: str = ""
    terminated: bool = False
    traceback: str = ""


# A failing rank's traceback travels to the driver in one JSON line (wire.MAX_LINE is 1 MiB):
# the last 16 KB hold the user's innermost frames and the exception, however deep the stack.
TRACEBACK_CHARS = 16_000
# One frame or exception message of a traceback at most: a huge message (a tensor printed in
# full) must not push the frame that raised it out of the kept tail.
CHUNK_CHARS = 2_000


def keep_tail(text: str, limit: int = TRACEBACK_CHARS) -> str:
    """``text``, or its last ``limit`` characters after a line saying how many were cut."""
    if len(text) <= limit:
        return text
    return f"[... {len(text) - limit} characters cut ...]\n{text[-limit:]}"


def _clip(chunk: str) -> str:
    if len(chunk) <= CHUNK_CHARS:
        return chunk
    return f"{chunk[:CHUNK_CHARS]} [... {len(chunk) - CHUNK_CHARS} characters cut ...]\n"


def failure_traceback(error: BaseException, limit: int = TRACEBACK_CHARS) -> str:
    """The formatted traceback of ``error`` with the exceptions it was raised from, as Python
    prints it (innermost frame last): each frame and message clipped to :data:`CHUNK_CHARS`,
    the whole to its last ``limit`` characters."""
    return keep_tail("".join(_clip(c) for c in traceback.format_exception(error)), limit)


PREPARE_ATTRIBUTE = "__malleable_prepare__"


def prepared_by(prepare: Callable[..., Any]) -> Callable[[F], F]:
    """Mark a training function with ``prepare``, called once per worker process with the job's
    keyword arguments before its first rank there (while the controller is still deciding):
    load and stage data there, so a rank that joins finds it built."""

    def mark(fn: F) -> F:
        setattr(fn, PREPARE_ATTRIBUTE, prepare)
        return fn

    return mark


__all__ = [
    "PREPARE_ATTRIBUTE",
    "TRACEBACK_CHARS",
    "RankOutcome",
    "RankSettings",
    "RankSpec",
    "failure_traceback",
    "keep_tail",
    "prepared_by",
]
