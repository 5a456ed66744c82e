"""The membership state machine: who trains in which epoch, and what each rank does next.

:class:`Membership` holds one job's group state (member records, the epochs formed so far, the
current one, the event log, the outcome) and makes its transitions; it knows nothing of sockets
or messages, so it can be driven directly (``tests/elastic/test_membership.py``). The
:class:`~parsl_malleable.elastic.coordinator.Coordinator` serves it to ranks over TCP: it turns
each request into one call here and the result into the reply.

A rank's life, as transitions: :meth:`~Membership.register`, then :meth:`~Membership.join`
(blocks until the rank is placed in an epoch or sent away), rank 0's :meth:`~Membership.poll`
at membership checks, :meth:`~Membership.report` at the end of an epoch (blocks until the next
assignment: ``run`` in a new epoch, ``leave`` or ``exit``), :meth:`~Membership.left` once a
leaver is gone; :meth:`~Membership.lose` when its liveness connection breaks. The controller
calls :meth:`~Membership.drain` and :meth:`~Membership.abort`; rank 0's
:meth:`~Membership.finish` ends training.

A new epoch is formed only when every live member of the current one has reported, so no rank is
left waiting in a collective of an abandoned group; members that neither report nor die within
``reform_timeout_s`` are evicted and rejoin later as newcomers.

Thread safety: one lock, the condition :attr:`Membership.cond` (re-entrant). Every public method
takes it; the private ones expect it held. Blocking calls wait on it and wake on every change,
and give up with an ``exit`` once :attr:`Membership.closed` is set (then notify ``cond``). A
caller may hold ``cond`` around several calls to make them one step (the coordinator does, to
keep its liveness connections consistent with the members).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, Protocol

from parsl_malleable.elastic.backend_interface import RendezvousInfo, info_to_json
from parsl_malleable.elastic.measurements import Measurements
from parsl_malleable.elastic.messages import Exit, Leave, Run
from parsl_malleable.elastic.settings import MEMBERSHIP_DEFAULTS
from parsl_malleable.errors import ConfigError

# The coordinator's state: its log lines keep the coordinator's logger name.
logger = logging.getLogger("parsl_malleable.elastic.coordinator")


class EpochRendezvous(Protocol):
    """What forming an epoch needs of the backend's rendezvous service."""

    def prepare_epoch(self, epoch: int, world_size: int) -> RendezvousInfo:
        """Make ready for ``world_size`` ranks to form group number ``epoch``."""
        ...


class MemberPhase(Enum):
    """Where a rank process is in its life, as its coordinator sees it.

    ``REGISTERED`` -> ``WAITING`` (in ``join`` or ``report``, for an assignment) -> ``ASSIGNED``
    (training in an epoch, or told to leave or exit) -> ``WAITING`` ... -> ``GONE`` (it said it
    left). ``LOST`` from any of them when its liveness connection breaks or goes silent; it is
    final: a lost member that comes back is sent away and stays lost, as does one that then
    says it left.
    """

    REGISTERED = "registered"
    WAITING = "waiting"
    ASSIGNED = "assigned"
    GONE = "gone"
    LOST = "lost"


OUT = (MemberPhase.GONE, MemberPhase.LOST)
"""The phases of a member that will never train again."""


@dataclass
class MemberRecord:
    """What the coordinator knows about one rank process.

    ``phase``: where it is (:class:`MemberPhase`). Besides it: ``leaving``, it was asked to leave
    at its next check (a drain: it may still be training); ``evicted``, it neither reported nor
    died within ``reform_timeout_s`` of its group's first report, so the next group formed
    without it (cleared when it reports); ``has_state``, its last report said it holds the
    committed training state in memory.
    """

    member_id: str
    host: str
    pid: int
    block_id: str | None
    registered_at: float
    phase: MemberPhase = MemberPhase.REGISTERED
    leaving: bool = False
    evicted: bool = False
    has_state: bool = False
    committed_step: int = -1
    assignment: Run | Leave | Exit | None = None
    assignment_seq: int = 0


@dataclass
class EpochRecord:
    """One membership epoch: a fixed group of ranks between two changes."""

    number: int
    members: list[str]
    formed_at: float
    reason: str
    info: RendezvousInfo | None = None
    resumed_at: float | None = None
    start_step: int | None = None
    last_step: int | None = None
    reported: dict[str, dict[str, Any]] = field(default_factory=dict)
    first_report_at: float | None = None
    progress_at: float | None = None
    mark: tuple[float, int] | None = None

    @property
    def world_size(self) -> int:
        """Number of ranks in the epoch."""
        return len(self.members)


@dataclass(frozen=True)
class Loss:
    """What :meth:`Membership.lose` found: the epoch the lost member trained in and the members
    of it to tell (``epoch`` None and no peers: it trained in none, had left, or training is
    over). ``peers`` includes the lost member itself; the caller skips it."""

    epoch: int | None = None
    peers: tuple[str, ...] = ()


class Membership:
    """One job's members and epochs; thread-safe (see the module's docstring)."""

    def __init__(
        self,
        rendezvous: EpochRendezvous,
        *,
        min_nodes: int = 1,
        max_nodes: int = 1 << 30,
        settle_s: float = MEMBERSHIP_DEFAULTS.settle_s,
        reform_timeout_s: float = MEMBERSHIP_DEFAULTS.reform_timeout_s,
        measure_every_s: float = 2.0,
    ) -> None:
        if not 1 <= min_nodes <= max_nodes:
            raise ConfigError(
                f"need 1 <= min_nodes <= max_nodes; got min_nodes={min_nodes}, "
                f"max_nodes={max_nodes}"
            )
        self.min_nodes = min_nodes
        self.max_nodes = max_nodes
        self.settle_s = settle_s
        self.reform_timeout_s = reform_timeout_s
        self.measurements = Measurements(measure_every_s)
        self.cond = threading.Condition()
        self.closed = threading.Event()
        self._rendezvous = rendezvous
        self._members: dict[str, MemberRecord] = {}
        self._epochs: list[EpochRecord] = []
        self._current: EpochRecord | None = None
        self._saving: set[str] = set()
        self._drain_on_arrival: set[str] = set()
        self._events: list[dict[str, Any]] = []
        self._last_registration = 0.0
        self._outcome: str | None = None  # "done" or "aborted"
        self._abort_message: str | None = None
        # Rank 0's return value, sent with ``finish`` when it encodes as JSON: the copy the
        # controller uses if rank 0's worker is lost before its Parsl task returns.
        self._result: tuple[Any] | None = None

    # ------------------------------------------------------------- controller side

    def drain(self, member_ids: Iterable[str] = (), block_ids: Iterable[str] = ()) -> list[str]:
        """Ask members (by id, or all members on the given blocks) to leave at the next check.

        Returns the ids marked. A planned leave costs no work: the group stops at a commit.
        """
        wanted, blocks = set(member_ids), {str(b) for b in block_ids}
        with self.cond:
            # A rank ordered to start but not registered yet leaves as soon as it arrives.
            self._drain_on_arrival.update(wanted - set(self._members))
            marked = [
                m.member_id
                for m in self._members.values()
                if m.phase not in OUT and (m.member_id in wanted or m.block_id in blocks)
            ]
            for member_id in marked:
                self._members[member_id].leaving = True
            if marked:
                self._event("drain", members=marked)
            self._reconcile()
            self.cond.notify_all()
        return marked

    def abort(self, message: str) -> None:
        """End the job with an error: waiting ranks exit, running ones exit at their next report."""
        with self.cond:
            if self._outcome is None:
                self._outcome = "aborted"
                self._abort_message = message
                self._event("aborted", message=message)
            self._reconcile()
            self.cond.notify_all()

    def warn(self, message: str, member: str | None = None) -> None:
        """Record a warning for the job's owner (listed by :meth:`warnings`)."""
        with self.cond:
            self._event("warning", member=member, message=message)

    def tick(self) -> None:
        """Hand out what the passing of time allows (a settled cold start, an eviction)."""
        with self.cond:
            self._reconcile()
            self.cond.notify_all()

    # ------------------------------------------------------------------ rank side

    def register(self, member_id: str, host: str, pid: int, block: str | None) -> bool:
        """A rank process announces itself; False (nothing changed) if it already had."""
        with self.cond:
            if member_id in self._members:
                return False
            self._members[member_id] = MemberRecord(
                member_id=member_id,
                host=host,
                pid=pid,
                block_id=None if block is None else str(block),
                registered_at=time.time(),
                leaving=member_id in self._drain_on_arrival,
            )
            self._drain_on_arrival.discard(member_id)
            self._event("registered", member=member_id, block=block)
            self.cond.notify_all()
            return True

    def join(self, member_id: str) -> Run | Leave | Exit:
        """A registered rank is ready; blocks until its first assignment, which it returns."""
        # A rank counts as available only once it has built its model and asks to join, so
        # that forming an epoch never waits on a newcomer that is still importing.
        with self.cond:
            member = self._members[member_id]
            if member.phase is MemberPhase.LOST:
                seq = member.assignment_seq
                self._send_away(member, "(asking to join)")
                return self._await_assignment(member_id, seq)
            if member.assignment_seq == 0:
                member.phase = MemberPhase.WAITING
                self._last_registration = time.monotonic()
                self._event("joined", member=member_id, block=member.block_id)
            self._reconcile()
            return self._await_assignment(member_id, 0)

    def poll(self, epoch: int | None, step: int, samples: int) -> bool:
        """Rank 0 of ``epoch`` at a membership check (``step``, ``samples`` trained): whether
        its group must stop at this commit (always True for an epoch that is not current)."""
        with self.cond:
            cur = self._current
            if cur is None or epoch != cur.number:
                return True
            previous = [e for e in self._epochs if e.number < cur.number and e.progress_at]
            self.measurements.progress(cur, samples, previous[-1] if previous else None)
            if cur.resumed_at is None:
                cur.resumed_at = time.time()
                cur.start_step = step
                self._event("resumed", epoch=cur.number, world_size=cur.world_size, step=step)
                self.cond.notify_all()
            cur.last_step = step
            return self._change_pending(cur)

    def report(
        self,
        member_id: str,
        *,
        epoch: int | None,
        has_state: bool,
        committed_step: int | None = None,
        reason: str | None = None,
        attempted_step: int | None = None,
    ) -> Run | Leave | Exit:
        """A rank ended its epoch (``reason`` "failure": a collective failed, so the group rolls
        back to ``committed_step``); blocks until its next assignment, which it returns."""
        with self.cond:
            member = self._members[member_id]
            seq = member.assignment_seq
            if member.phase is MemberPhase.LOST:
                # Marked lost (a frozen process, a host cut off) and now back: the group went on
                # without it, so its state is behind, and its liveness connection is gone, so it
                # can never be counted again. Sent away at once rather than left to wait.
                self._send_away(member, f"(reporting the end of epoch {epoch}: {reason})")
                return self._await_assignment(member_id, seq)
            cur = self._current
            member.has_state = has_state
            member.committed_step = -1 if committed_step is None else int(committed_step)
            member.phase = MemberPhase.WAITING
            if cur is not None and epoch == cur.number and not member.evicted:
                if cur.first_report_at is None:
                    cur.first_report_at = time.monotonic()
                cur.reported[member_id] = {
                    "reason": reason,
                    "committed_step": committed_step,
                    "attempted_step": attempted_step,
                    "has_state": has_state,
                }
                if reason == "failure" and len(cur.reported) == 1:
                    self._event(
                        "rollback",
                        epoch=cur.number,
                        member=member_id,
                        attempted_step=attempted_step,
                        committed_step=committed_step,
                    )
            member.evicted = False
            self._reconcile()
            self.cond.notify_all()
            return self._await_assignment(member_id, seq)

    def _send_away(self, member: MemberRecord, when: str | None) -> None:
        """Tell a member marked lost to leave (caller holds the lock); ``when`` it came back,
        for the owner's warning (None: it never went, it was waiting when its liveness broke)."""
        if when is not None:
            self._event(
                "warning",
                member=member.member_id,
                message=(
                    f"member {member.member_id} (block {member.block_id}) came back {when} "
                    "after it was marked lost; told to leave"
                ),
            )
        self._event("sent_away", member=member.member_id)
        self._assign(member, Leave(save=False))

    def left(
        self, member_id: str, saved_step: int | None = None, save_error: str | None = None
    ) -> None:
        """A leaver is gone (``saved_step``: the checkpoint it wrote first; ``save_error``: why
        it could not save the commit it held, if so)."""
        with self.cond:
            member = self._members[member_id]
            if member.phase is not MemberPhase.LOST:
                member.phase = MemberPhase.GONE
            self._saving.discard(member_id)
            error = {"save_error": save_error} if save_error else {}
            self._event("left", member=member_id, saved_step=saved_step, **error)
            self._reconcile()
            self.cond.notify_all()

    def finish(
        self, member_id: str, step: int | None = None, result: tuple[Any] | None = None
    ) -> None:
        """Rank 0 completed training at ``step``; ``result``: ``(value,)`` it returned, if sent."""
        with self.cond:
            if self._outcome is None:
                self._outcome = "done"
                if result is not None:
                    self._result = result
                self._event("finished", member=member_id, step=step)
            self._reconcile()
            self.cond.notify_all()

    def lose(self, member_id: str, why: str) -> Loss | None:
        """``member_id`` is dead (its liveness connection broke or went silent).

        None if it was unknown or already dead; else the :class:`Loss`, whose peers may be
        blocked in a collective that cannot notice the loss by itself.
        """
        with self.cond:
            member = self._members.get(member_id)
            if member is None or member.phase is MemberPhase.LOST:
                return None
            was = member.phase
            member.phase = MemberPhase.LOST
            self._saving.discard(member_id)
            if was is MemberPhase.WAITING:
                # Blocked in join or report: a live process cut off only from its liveness
                # connection would otherwise wait there forever.
                self._send_away(member, None)
            loss = Loss()
            cur = self._current
            if was is not MemberPhase.GONE and self._outcome is None:
                self._event("lost", member=member_id, why=why)
                if cur is not None and member_id in cur.members:
                    loss = Loss(cur.number, tuple(cur.members))
            self._reconcile()
            self.cond.notify_all()
            return loss

    # -------------------------------------------------------------------- reading

    @property
    def outcome(self) -> str | None:
        """``"done"``, ``"aborted"`` or ``None`` while training goes on."""
        return self._outcome

    @property
    def abort_message(self) -> str | None:
        """Why the job was aborted, if it was."""
        return self._abort_message

    @property
    def result(self) -> tuple[Any] | None:
        """``(value,)`` rank 0 sent with ``finish``, None when it sent none (or not yet)."""
        return self._result

    def registered(self, member_id: str) -> bool:
        """Whether ``member_id`` has registered."""
        with self.cond:
            return member_id in self._members

    def members(self) -> list[MemberRecord]:
        """Copies of every member record, in registration order."""
        with self.cond:
            return [MemberRecord(**asdict(m)) for m in self._members.values()]

    def current_members(self) -> list[MemberRecord]:
        """Copies of the records of the group now training, in rank order (empty if none)."""
        with self.cond:
            if self._current is None:
                return []
            return [MemberRecord(**asdict(self._members[i])) for i in self._current.members]

    def live_members(self) -> int:
        """Members alive and not leaving (running or waiting)."""
        with self.cond:
            return sum(1 for m in self._members.values() if m.phase not in OUT and not m.leaving)

    def epochs(self) -> list[dict[str, Any]]:
        """History of epochs: number, world size, members, reason, times, steps."""
        with self.cond:
            return [
                {
                    "epoch": e.number,
                    "world_size": e.world_size,
                    "members": list(e.members),
                    "reason": e.reason,
                    "formed_at": e.formed_at,
                    "resumed_at": e.resumed_at,
                    "start_step": e.start_step,
                    "last_step": e.last_step,
                    "progress_at": e.progress_at,
                }
                for e in self._epochs
            ]

    def events(self) -> list[dict[str, Any]]:
        """Timestamped events (wall clock): joined, lost, drain, formed, resumed, rollback, ..."""
        with self.cond:
            return [dict(e) for e in self._events]

    def events_since(self, index: int) -> list[dict[str, Any]]:
        """The events after the first ``index`` (to read them as they come)."""
        with self.cond:
            return [dict(e) for e in self._events[index:]]

    def warnings(self) -> list[str]:
        """The messages of ``warning`` events, oldest first."""
        with self.cond:
            return [e["message"] for e in self._events if e["event"] == "warning"]

    def running_world_size(self) -> int:
        """Size of the group currently training (0 while none is)."""
        with self.cond:
            return self._current.world_size if self._current is not None else 0

    def resumed_at(self, world_size: int, min_step: int = 0) -> bool:
        """Whether the current epoch has this size and has made progress to ``min_step``."""
        with self.cond:
            cur = self._current
            return (
                cur is not None
                and cur.world_size == world_size
                and cur.resumed_at is not None
                and (cur.last_step or 0) >= min_step
            )

    def last_step(self) -> int:
        """Latest committed step reported by the running group (-1 before any)."""
        with self.cond:
            steps = [e.last_step for e in self._epochs if e.last_step is not None]
            return max(steps) if steps else -1

    def take_measurements(self) -> tuple[list[tuple[int, float]], list[tuple[str, float]]]:
        """Measurements since the last call (see :mod:`~parsl_malleable.elastic.measurements`)."""
        with self.cond:
            return self.measurements.take()

    # ------------------------------------------------------------------ internals

    def _await_assignment(self, member_id: str, seq: int) -> Run | Leave | Exit:
        member = self._members[member_id]
        while member.assignment_seq == seq:
            if self.closed.is_set():
                return Exit(reason="coordinator closed")
            self.cond.wait(0.5)
        assert member.assignment is not None
        return member.assignment

    def _assign(self, member: MemberRecord, assignment: Run | Leave | Exit) -> None:
        member.assignment = assignment
        member.assignment_seq += 1
        if member.phase is not MemberPhase.LOST:
            member.phase = MemberPhase.ASSIGNED

    def _change_pending(self, cur: EpochRecord) -> bool:
        if self._outcome is not None:
            return True
        for member_id in cur.members:
            m = self._members[member_id]
            if m.phase is MemberPhase.LOST or m.leaving or m.evicted:
                return True
        if cur.world_size < self.max_nodes:
            return any(
                m.phase is MemberPhase.WAITING and not m.leaving
                for m in self._members.values()
                if m.member_id not in cur.members
            )
        return False

    def _reconcile(self) -> None:
        """Hand out assignments that the current membership allows (caller holds the lock)."""
        waiting = [m for m in self._members.values() if m.phase is MemberPhase.WAITING]
        if self._outcome is not None:
            for m in waiting:
                self._assign(m, Exit(reason=self._outcome))
            return
        for m in waiting:
            if m.leaving and not m.has_state:
                self._assign(m, Leave(save=False))
        waiting = [m for m in waiting if m.phase is MemberPhase.WAITING]
        cur = self._current
        if cur is not None:
            running = [
                self._members[i]
                for i in cur.members
                if self._members[i].phase not in OUT
                and i not in cur.reported
                and not self._members[i].evicted
            ]
            if running:
                started = cur.first_report_at
                if started is None or time.monotonic() - started < self.reform_timeout_s:
                    return
                for m in running:
                    m.evicted = True
                    self._event("evicted", member=m.member_id, epoch=cur.number)
            self._current = None
            self._event("dissolved", epoch=cur.number)

        pool = [m for m in waiting if not m.leaving]
        leavers = [m for m in waiting if m.leaving]
        state_kept = any(m.has_state for m in pool) or bool(self._saving)
        holders = [m for m in leavers if m.has_state]
        saver = max(holders, key=lambda m: m.committed_step) if holders and not state_kept else None
        for m in leavers:
            save = m is saver
            if save:
                self._saving.add(m.member_id)
            self._assign(m, Leave(save=save))
        if self._saving:
            return
        previous = {i: r for r, i in enumerate(cur.members)} if cur is not None else {}
        pool.sort(
            key=lambda m: (not m.has_state, previous.get(m.member_id, 1 << 30), m.registered_at)
        )
        size = min(len(pool), self.max_nodes)
        if size < self.min_nodes:
            return
        cold = not any(m.has_state for m in pool)
        if cold and time.monotonic() - self._last_registration < self.settle_s:
            return
        self._form(pool[:size], reason="cold start" if cold else "membership change")

    def _form(self, chosen: list[MemberRecord], reason: str) -> None:
        number = (self._epochs[-1].number + 1) if self._epochs else 1
        info = self._rendezvous.prepare_epoch(number, len(chosen))
        epoch = EpochRecord(
            number=number,
            members=[m.member_id for m in chosen],
            formed_at=time.time(),
            reason=reason,
            info=info,
        )
        self._epochs.append(epoch)
        self._current = epoch
        for rank, m in enumerate(chosen):
            self._assign(
                m,
                Run(
                    epoch=number,
                    rank=rank,
                    world_size=len(chosen),
                    info=info_to_json(info),
                    # A group resuming from disk compares its step with this (lost work).
                    known_step=self._known_step(),
                ),
            )
        self._event("formed", epoch=number, world_size=len(chosen), members=epoch.members)
        logger.info("epoch %d formed with %d ranks (%s)", number, len(chosen), reason)

    def _known_step(self) -> int:
        """The newest step any rank reported committed (-1: none), caller holds the lock."""
        reported = [m.committed_step for m in self._members.values()]
        polled = [e.last_step for e in self._epochs if e.last_step is not None]
        return max([-1, *reported, *polled])

    def _event(self, kind: str, **fields: Any) -> None:
        self._events.append({"time": time.time(), "event": kind, **fields})


__all__ = [
    "OUT",
    "EpochRecord",
    "EpochRendezvous",
    "Loss",
    "MemberPhase",
    "MemberRecord",
    "Membership",
]
