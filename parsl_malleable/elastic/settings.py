"""What travels with a rank: its job's runtime settings, where to find the job, how it ended,
and the ``prepare`` hook a training function may carry.

Plain dataclasses without torch, so that an agent can unpickle its task and say hello before it
imports torch (controller/node_agent.py); :mod:`parsl_malleable.elastic.rank` re-exports them.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


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


@dataclass(frozen=True)
class RankSpec:
    """Everything a rank process needs to find its job (picklable: it travels in a Parsl task)."""

    host: str
    port: int
    token: str
    settings: RankSettings = field(default_factory=RankSettings)
    member_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    local_rank: int = 0
    device: str = "cpu"


@dataclass
class RankOutcome:
    """How a rank task ended: ``finished`` (with the return value), ``left`` or ``exited``;
    ``terminated`` when the rank left because its process was told to end (SIGTERM: a
    preemption's notice), so that whoever runs it ends the process too."""

    member_id: str
    status: str
    rank: int | None = None
    value: Any = None
    reason: str = ""
    terminated: bool = False


PREPARE_ATTRIBUTE = "__malleable_prepare__"


def prepared_by(prepare: Callable[..., Any]) -> Callable[[F], F]:
    """Mark a training function with ``prepare``, called once per worker process with the job's
    keyword arguments before its first rank there (while the controller is still deciding):
    load and stage data there, so a rank that joins finds it built."""

    def mark(fn: F) -> F:
        setattr(fn, PREPARE_ATTRIBUTE, prepare)
        return fn

    return mark


__all__ = ["PREPARE_ATTRIBUTE", "RankOutcome", "RankSettings", "RankSpec", "prepared_by"]
