"""The membership coordinator: the controller-side authority on who trains in which epoch.

It runs in the controller process (login node or notebook), never on a block that can vanish.
Ranks connect over TCP (:mod:`parsl_malleable.elastic.wire`). The protocol, from a rank's side:

1. ``register`` then open a liveness connection (its loss, or missing pings, marks the rank dead);
2. ``join``: wait until the coordinator places the rank in an epoch (rank number, world size and
   the backend's rendezvous) or tells it to exit;
3. while training, rank 0 sends ``poll`` at membership checks and learns whether a change is
   pending (a newcomer, a drained or dead member); the group then stops at that commit;
4. ``report`` at the end of an epoch (planned change or failed collective) and wait for the next
   assignment: a new epoch, ``leave`` (possibly saving a disk checkpoint first) or ``exit``;
5. ``finish`` (rank 0, training complete), ``left`` (a leaver is gone), ``abort`` (user error).

A new epoch is formed only when every live member of the current one has reported, so no rank is
left waiting in a collective of an abandoned group; members that neither report nor die within
``reform_timeout_s`` are evicted and rejoin later as newcomers.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from parsl_malleable.elastic.backend import RendezvousHost, RendezvousInfo
from parsl_malleable.elastic.coordinator_server import CoordinatorServer
from parsl_malleable.elastic.kv_table import KV_OPS
from parsl_malleable.elastic.kv_table import serve as serve_kv
from parsl_malleable.elastic.wire import send_message
from parsl_malleable.errors import ConfigError

logger = logging.getLogger(__name__)


@dataclass
class MemberRecord:
    """What the coordinator knows about one rank process."""

    member_id: str
    host: str
    pid: int
    block_id: str | None
    registered_at: float
    alive: bool = True
    leaving: bool = False
    evicted: bool = False
    gone: bool = False
    waiting: bool = True
    has_state: bool = False
    committed_step: int = -1
    assignment: dict[str, Any] | None = None
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


class Coordinator:
    """Tracks members, forms epochs, and serves the rank protocol on a TCP port."""

    def __init__(
        self,
        rendezvous: RendezvousHost,
        *,
        min_nodes: int = 1,
        max_nodes: int = 1 << 30,
        host: str = "127.0.0.1",
        port: int = 0,
        settle_s: float = 0.5,
        reform_timeout_s: float = 60.0,
        heartbeat_timeout_s: float = 10.0,
        token: str | None = None,
        measure_every_s: float = 2.0,
        checkpoint_policy: dict[str, Any] | None = None,
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
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.measure_every_s = measure_every_s
        self._throughput: list[tuple[int, float]] = []
        self._rescales: list[tuple[str, float]] = []
        self.token = token or secrets.token_hex(16)
        # Told to each rank at register: the job and campaign its checkpoints are bound to and
        # the folder it may warm-start from (plain JSON values, no secret: the checkpoint key
        # stays on disk beside the checkpoints).
        self.checkpoint_policy: dict[str, Any] = dict(checkpoint_policy or {})
        self._rendezvous = rendezvous
        self._bind = (host, port)
        self._cond = threading.Condition()
        self._members: dict[str, MemberRecord] = {}
        self._epochs: list[EpochRecord] = []
        self._current: EpochRecord | None = None
        self._saving: set[str] = set()
        self._drain_on_arrival: set[str] = set()
        self._liveness: dict[str, socket.socket] = {}
        self._events: list[dict[str, Any]] = []
        self._last_registration = 0.0
        self._outcome: str | None = None  # "done" or "aborted"
        self._abort_message: str | None = None
        # Rank 0's return value, sent with ``finish`` when it encodes as JSON: the copy the
        # controller uses if rank 0's worker is lost before its Parsl task returns.
        self._result: tuple[Any] | None = None
        self._server: CoordinatorServer | None = None
        self._threads: list[threading.Thread] = []
        self._closed = threading.Event()

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Start the rendezvous service, the TCP server and the reconcile timer."""
        if self._server is not None:
            return
        self._rendezvous.start()
        self._server = CoordinatorServer(self._bind, self)
        serve = threading.Thread(
            target=self._server.serve_forever, name="elastic-coordinator", daemon=True
        )
        timer = threading.Thread(target=self._tick, name="elastic-reconcile", daemon=True)
        self._threads = [serve, timer]
        for thread in self._threads:
            thread.start()

    @property
    def address(self) -> tuple[str, int]:
        """``(host, port)`` that ranks connect to."""
        if self._server is None:
            raise RuntimeError("Coordinator.start() has not been called")
        return self._bind[0], self._server.server_address[1]

    def close(self) -> None:
        """Stop serving; ranks still connected see the connection drop."""
        self._closed.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server.drop_connections()
        self._rendezvous.close()
        with self._cond:
            self._cond.notify_all()

    # ---------------------------------------------------------- controller API

    def drain(self, member_ids: Iterable[str] = (), block_ids: Iterable[str] = ()) -> list[str]:
        """Ask members (by id, or all members on the given blocks) to leave at the next check.

        Returns the ids marked. A planned leave costs no work: the group stops at a commit.
        """
        wanted, blocks = set(member_ids), {str(b) for b in block_ids}
        with self._cond:
            # A rank ordered to start but not registered yet leaves as soon as it arrives.
            self._drain_on_arrival.update(wanted - set(self._members))
            marked = [
                m.member_id
                for m in self._members.values()
                if m.alive and not m.gone and (m.member_id in wanted or m.block_id in blocks)
            ]
            for member_id in marked:
                self._members[member_id].leaving = True
            if marked:
                self._event("drain", members=marked)
            self._reconcile()
            self._cond.notify_all()
        return marked

    def abort(self, message: str) -> None:
        """End the job with an error: waiting ranks exit, running ones exit at their next report."""
        with self._cond:
            if self._outcome is None:
                self._outcome = "aborted"
                self._abort_message = message
                self._event("aborted", message=message)
            self._reconcile()
            self._cond.notify_all()

    @property
    def outcome(self) -> str | None:
        """``"done"``, ``"aborted"`` or ``None`` while training goes on."""
        return self._outcome

    @property
    def result(self) -> tuple[Any] | None:
        """``(value,)``: what rank 0 returned, as JSON decodes it, when it sent it with
        ``finish``; None when training is not done or the value does not encode as JSON."""
        return self._result

    def warn(self, message: str, member: str | None = None) -> None:
        """Record a warning for the job's owner (listed by :meth:`warnings`) and log it;
        ``member``: the rank it came from, if any."""
        with self._cond:
            self._event("warning", member=member, message=message)
        if member is None:
            logger.warning("%s", message)
        else:
            logger.warning("rank %s: %s", member, message)

    @property
    def abort_message(self) -> str | None:
        """Why the job was aborted, if it was."""
        return self._abort_message

    def members(self) -> list[MemberRecord]:
        """Copies of every member record, in registration order."""
        with self._cond:
            return [MemberRecord(**asdict(m)) for m in self._members.values()]

    def current_members(self) -> list[MemberRecord]:
        """Copies of the records of the group now training, in rank order (empty if none)."""
        with self._cond:
            if self._current is None:
                return []
            return [MemberRecord(**asdict(self._members[i])) for i in self._current.members]

    def registered(self, member_id: str) -> bool:
        """Whether ``member_id`` has registered."""
        with self._cond:
            return member_id in self._members

    def live_members(self) -> int:
        """Members alive and not leaving (running or waiting)."""
        with self._cond:
            return sum(
                1 for m in self._members.values() if m.alive and not m.leaving and not m.gone
            )

    def epochs(self) -> list[dict[str, Any]]:
        """History of epochs: number, world size, members, reason, times, steps."""
        with self._cond:
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
        with self._cond:
            return [dict(e) for e in self._events]

    def events_since(self, index: int) -> list[dict[str, Any]]:
        """The events after the first ``index`` (to read them as they come)."""
        with self._cond:
            return [dict(e) for e in self._events[index:]]

    def running_world_size(self) -> int:
        """Size of the group currently training (0 while none is)."""
        with self._cond:
            return self._current.world_size if self._current is not None else 0

    def wait_for(self, predicate: Callable[[Coordinator], bool], timeout_s: float) -> bool:
        """Block until ``predicate(self)`` holds (checked on every change); False on timeout.

        The predicate runs without the coordinator's lock held, so it may do anything,
        including talking to the coordinator over the network.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            if predicate(self):
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            with self._cond:
                self._cond.wait(min(left, 0.2))

    def resumed_at(self, world_size: int, min_step: int = 0) -> bool:
        """Whether the current epoch has this size and has made progress to ``min_step``."""
        with self._cond:
            cur = self._current
            return (
                cur is not None
                and cur.world_size == world_size
                and cur.resumed_at is not None
                and (cur.last_step or 0) >= min_step
            )

    def last_step(self) -> int:
        """Latest committed step reported by the running group (-1 before any)."""
        with self._cond:
            steps = [e.last_step for e in self._epochs if e.last_step is not None]
            return max(steps) if steps else -1

    # ------------------------------------------------------------ rank protocol

    def handle(self, message: dict[str, Any]) -> dict[str, Any]:
        """Answer one request of the rank protocol (may block until an assignment exists)."""
        op = message.get("op")
        if op == "hello":
            return {"ok": True}
        if op in KV_OPS:
            # The rendezvous keys of a backend that keeps them here (torch): any connection
            # that passed the challenge may use them, as a rank's store connection does.
            table = getattr(self._rendezvous, "table", None)
            if table is None:
                return {"error": f"the {type(self._rendezvous).__name__} keeps no keys here"}
            return serve_kv(table, message)
        member_id = message.get("member")
        if not isinstance(member_id, str):
            return {"error": f"request {op!r} lacks a member id"}
        if op == "register":
            return self._register(member_id, message)
        with self._cond:
            if member_id not in self._members:
                return {"error": f"member {member_id} has not registered"}
        handlers = {
            "join": self._join,
            "poll": self._poll,
            "report": self._report,
            "left": self._left,
            "finish": self._finish,
            "abort": self._abort_from_rank,
            "warn": self._warn_from_rank,
            "leaving": self._leaving_from_rank,
        }
        handler = handlers.get(op)  # type: ignore[arg-type]
        if handler is None:
            return {"error": f"unknown op {op!r}"}
        return handler(member_id, message)

    def _leaving_from_rank(self, member_id: str, message: dict[str, Any]) -> dict[str, Any]:
        """A rank got notice that its node goes (a preemption's SIGTERM): it leaves at the
        commit it is at, as if drained."""
        logger.info(
            "member %s leaves at its next commit: %s", member_id, message.get("reason", "notice")
        )
        self.drain(member_ids=[member_id])
        return {"ok": True}

    def member_lost(self, member_id: str, why: str) -> None:
        """The liveness connection of ``member_id`` broke or went silent."""
        with self._cond:
            member = self._members.get(member_id)
            if member is None or not member.alive:
                return
            member.alive = False
            self._saving.discard(member_id)
            self._liveness.pop(member_id, None)
            peers: list[socket.socket] = []
            notice: dict[str, Any] = {}
            cur = self._current
            if not member.gone and self._outcome is None:
                self._event("lost", member=member_id, why=why)
                if cur is not None and member_id in cur.members:
                    peers = [self._liveness[i] for i in cur.members if i in self._liveness]
                    notice = {"notice": "peer_lost", "epoch": cur.number, "member": member_id}
            self._reconcile()
            self._cond.notify_all()
        # Survivors blocked in a collective that cannot notice the loss by itself (Horovod
        # waits for its timeout) can give up at once; sent outside the lock, a slow peer
        # must not stall the coordinator.
        for sock in peers:
            with contextlib.suppress(OSError):
                send_message(sock, notice)

    def liveness_opened(self, member_id: str, sock: socket.socket) -> None:
        """Remember the liveness connection of ``member_id`` (to push notices on it)."""
        with self._cond:
            self._liveness[member_id] = sock

    def _register(self, member_id: str, message: dict[str, Any]) -> dict[str, Any]:
        with self._cond:
            if member_id in self._members:
                return {"error": f"member {member_id} registered twice"}
            block = message.get("block")
            self._members[member_id] = MemberRecord(
                member_id=member_id,
                host=str(message.get("host", "?")),
                pid=int(message.get("pid", -1)),
                block_id=None if block is None else str(block),
                registered_at=time.time(),
                waiting=False,
                leaving=member_id in self._drain_on_arrival,
            )
            self._drain_on_arrival.discard(member_id)
            self._event("registered", member=member_id, block=block)
            self._cond.notify_all()
            if self.checkpoint_policy:
                return {"ok": True, "checkpoint": dict(self.checkpoint_policy)}
            return {"ok": True}

    def _join(self, member_id: str, message: dict[str, Any]) -> dict[str, Any]:
        # A rank counts as available only once it has built its model and asks to join, so
        # that forming an epoch never waits on a newcomer that is still importing.
        with self._cond:
            member = self._members[member_id]
            if member.assignment_seq == 0:
                member.waiting = True
                self._last_registration = time.monotonic()
                self._event("joined", member=member_id, block=member.block_id)
            self._reconcile()
            return self._await_assignment(member_id, 0)

    def _poll(self, member_id: str, message: dict[str, Any]) -> dict[str, Any]:
        with self._cond:
            cur = self._current
            if cur is None or message.get("epoch") != cur.number:
                return {"change": True}
            step = int(message.get("step", 0))
            samples = message.get("samples")
            self._measure(cur, int(samples) if isinstance(samples, int) else step)
            if cur.resumed_at is None:
                cur.resumed_at = time.time()
                cur.start_step = step
                self._event("resumed", epoch=cur.number, world_size=cur.world_size, step=step)
                self._cond.notify_all()
            cur.last_step = step
            return {"change": self._change_pending(cur)}

    def _report(self, member_id: str, message: dict[str, Any]) -> dict[str, Any]:
        with self._cond:
            member = self._members[member_id]
            seq = member.assignment_seq
            cur = self._current
            member.has_state = bool(message.get("has_state"))
            member.committed_step = int(message.get("committed_step", -1))
            member.waiting = True
            if cur is not None and message.get("epoch") == cur.number and not member.evicted:
                if cur.first_report_at is None:
                    cur.first_report_at = time.monotonic()
                cur.reported[member_id] = dict(message)
                if message.get("reason") == "failure" and len(cur.reported) == 1:
                    self._event(
                        "rollback",
                        epoch=cur.number,
                        member=member_id,
                        attempted_step=message.get("attempted_step"),
                        committed_step=message.get("committed_step"),
                    )
            member.evicted = False
            self._reconcile()
            self._cond.notify_all()
            return self._await_assignment(member_id, seq)

    def _left(self, member_id: str, message: dict[str, Any]) -> dict[str, Any]:
        with self._cond:
            member = self._members[member_id]
            member.gone = True
            member.waiting = False
            self._saving.discard(member_id)
            # save_error: the leaver could not save the commit it held (it warned already).
            error = {"save_error": message["save_error"]} if message.get("save_error") else {}
            self._event("left", member=member_id, saved_step=message.get("saved_step"), **error)
            self._reconcile()
            self._cond.notify_all()
            return {"ok": True}

    def _finish(self, member_id: str, message: dict[str, Any]) -> dict[str, Any]:
        with self._cond:
            if self._outcome is None:
                self._outcome = "done"
                if "result" in message:
                    self._result = (message["result"],)
                self._event("finished", member=member_id, step=message.get("step"))
            self._reconcile()
            self._cond.notify_all()
            return {"ok": True}

    def _warn_from_rank(self, member_id: str, message: dict[str, Any]) -> dict[str, Any]:
        """Something the job's owner must know that did not stop it (a checkpoint skipped)."""
        self.warn(str(message.get("message", ""))[:2000], member=member_id)
        return {"ok": True}

    def warnings(self) -> list[str]:
        """What ranks reported with ``warn``, oldest first."""
        with self._cond:
            return [e["message"] for e in self._events if e["event"] == "warning"]

    def _abort_from_rank(self, member_id: str, message: dict[str, Any]) -> dict[str, Any]:
        self.abort(f"rank {member_id} failed: {message.get('error', '?')}")
        return {"ok": True}

    def take_measurements(self) -> tuple[list[tuple[int, float]], list[tuple[str, float]]]:
        """Measurements since the last call: ``(world_size, samples/s)`` over stretches of at
        least ``measure_every_s`` within one epoch, and ``(kind, seconds)`` rescale pauses
        (``start``, ``up``, ``down``: from the previous epoch's last progress, or from forming
        the first epoch, to the new epoch's first commit)."""
        with self._cond:
            taken = (self._throughput, self._rescales)
            self._throughput, self._rescales = [], []
            return taken

    # ----------------------------------------------------------------- internals

    def _measure(self, cur: EpochRecord, samples: int) -> None:
        now = time.time()
        if cur.mark is None:
            previous = [e for e in self._epochs if e.number < cur.number and e.progress_at]
            if previous:
                last = previous[-1]
                kind = "up" if cur.world_size > last.world_size else "down"
                if cur.world_size != last.world_size:
                    self._rescales.append((kind, now - (last.progress_at or now)))
            else:
                self._rescales.append(("start", now - cur.formed_at))
            cur.mark = (now, samples)
        elif now - cur.mark[0] >= self.measure_every_s:
            rate = (samples - cur.mark[1]) / (now - cur.mark[0])
            if rate > 0:
                self._throughput.append((cur.world_size, rate))
            cur.mark = (now, samples)
        cur.progress_at = now

    def _await_assignment(self, member_id: str, seq: int) -> dict[str, Any]:
        member = self._members[member_id]
        while member.assignment_seq == seq:
            if self._closed.is_set():
                return {"action": "exit", "reason": "coordinator closed"}
            self._cond.wait(0.5)
        assert member.assignment is not None
        return dict(member.assignment)

    def _assign(self, member: MemberRecord, assignment: dict[str, Any]) -> None:
        member.assignment = assignment
        member.assignment_seq += 1
        member.waiting = False

    def _change_pending(self, cur: EpochRecord) -> bool:
        if self._outcome is not None:
            return True
        for member_id in cur.members:
            m = self._members[member_id]
            if not m.alive or m.leaving or m.evicted:
                return True
        if cur.world_size < self.max_nodes:
            return any(
                m.alive and m.waiting and not m.leaving and not m.gone
                for m in self._members.values()
                if m.member_id not in cur.members
            )
        return False

    def _tick(self) -> None:
        while not self._closed.wait(0.1):
            with self._cond:
                self._reconcile()
                self._cond.notify_all()

    def _reconcile(self) -> None:
        """Hand out assignments that the current membership allows (caller holds the lock)."""
        waiting = [m for m in self._members.values() if m.alive and m.waiting and not m.gone]
        if self._outcome is not None:
            for m in waiting:
                self._assign(m, {"action": "exit", "reason": self._outcome})
            return
        for m in waiting:
            if m.leaving and not m.has_state:
                self._assign(m, {"action": "leave", "save": False})
        waiting = [m for m in waiting if m.waiting]
        cur = self._current
        if cur is not None:
            running = [
                self._members[i]
                for i in cur.members
                if self._members[i].alive
                and i not in cur.reported
                and not self._members[i].evicted
                and not self._members[i].gone
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
            self._assign(m, {"action": "leave", "save": save})
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
                {
                    "action": "run",
                    "epoch": number,
                    "rank": rank,
                    "world_size": len(chosen),
                    "info": _info_to_json(info),
                    # A group resuming from disk compares its step with this (lost work).
                    "known_step": self._known_step(),
                },
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


def _info_to_json(info: RendezvousInfo) -> dict[str, Any]:
    return {
        "backend": info.backend,
        "host": info.host,
        "port": info.port,
        "epoch": info.epoch,
        "world_size": info.world_size,
        "extra": [list(pair) for pair in info.extra],
    }


def info_from_json(data: dict[str, Any]) -> RendezvousInfo:
    """Rebuild the :class:`RendezvousInfo` sent in an assignment."""
    return RendezvousInfo(
        backend=str(data["backend"]),
        host=str(data["host"]),
        port=int(data["port"]),
        epoch=int(data["epoch"]),
        world_size=int(data["world_size"]),
        extra=tuple((str(k), str(v)) for k, v in data.get("extra", [])),
    )
