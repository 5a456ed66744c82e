"""The membership coordinator: the controller-side authority on who trains in which epoch.

It runs in the controller process (login node or notebook), never on a block that can vanish.
Ranks connect over TCP (:mod:`parsl_malleable.transport.wire`). The protocol, from a rank's side:

1. ``register`` then open a liveness connection (its loss, or missing pings, marks the rank dead);
2. ``join``: wait until the coordinator places the rank in an epoch (rank number, world size and
   the backend's rendezvous) or tells it to exit;
3. while training, rank 0 sends ``poll`` at membership checks and learns whether a change is
   pending (a newcomer, a drained or dead member); the group then stops at that commit;
4. ``report`` at the end of an epoch (planned change or failed collective) and wait for the next
   assignment: a new epoch, ``leave`` (possibly saving a disk checkpoint first) or ``exit``;
5. ``finish`` (rank 0, training complete), ``left`` (a leaver is gone), ``abort`` (user error).

Beside the protocol, rank 0 sends ``timeline`` when its group starts (the step it starts from)
and ``metrics`` for each ``ctx.report``; they are kept in a
:class:`~parsl_malleable.elastic.metric_book.MetricBook` (the merge rule that keeps the reports
of the committed timeline through rollbacks and resumes is described there).

This module is the protocol's dispatch and the coordinator's lifecycle: :meth:`Coordinator.handle`
turns each request into a call of the socket-free state machine,
:class:`~parsl_malleable.elastic.membership.Membership` (members, epochs, assignments, events;
the forming rules are described there), and its result into the reply; throughput and rescale
pauses are measured in :mod:`~parsl_malleable.elastic.measurements`. The TCP front end is
:mod:`~parsl_malleable.elastic.coordinator_server`. The coordinator shares the membership's
lock (``Membership.cond``) for what it keeps itself: the ranks' liveness connections.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from parsl_malleable.elastic.backend_interface import KeyTableHost, RendezvousHost
from parsl_malleable.elastic.coordinator_server import CoordinatorServer
from parsl_malleable.elastic.kv_table import KV_REQUESTS
from parsl_malleable.elastic.kv_table import serve as serve_kv
from parsl_malleable.elastic.membership import MemberRecord, Membership
from parsl_malleable.elastic.messages import (
    Abort,
    ChangeAnswer,
    CheckpointPolicy,
    DroppedNotice,
    Finish,
    Join,
    Leaving,
    Left,
    Metrics,
    MetricsAnswer,
    PeerLostNotice,
    Poll,
    Register,
    Registered,
    Report,
    Timeline,
    TimelineAnswer,
    Warn,
)
from parsl_malleable.elastic.metric_book import (
    MAX_REPORTS,
    MetricBook,
    MetricChanges,
    MetricRecord,
    finite,
)
from parsl_malleable.elastic.settings import MEMBERSHIP_DEFAULTS, keep_tail
from parsl_malleable.transport.messages import Hello, Ok, Refusal, Reply, Request
from parsl_malleable.transport.wire import send_message

logger = logging.getLogger(__name__)


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
        settle_s: float = MEMBERSHIP_DEFAULTS.settle_s,
        reform_timeout_s: float = MEMBERSHIP_DEFAULTS.reform_timeout_s,
        heartbeat_timeout_s: float = MEMBERSHIP_DEFAULTS.heartbeat_timeout_s,
        token: str | None = None,
        measure_every_s: float = 2.0,
        checkpoint_policy: CheckpointPolicy | None = None,
        max_reports: int = MAX_REPORTS,
    ) -> None:
        self._membership = Membership(
            rendezvous,
            min_nodes=min_nodes,
            max_nodes=max_nodes,
            settle_s=settle_s,
            reform_timeout_s=reform_timeout_s,
            measure_every_s=measure_every_s,
        )
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.token = token or secrets.token_hex(16)
        # Told to each rank at register: the job and campaign its checkpoints are bound to and
        # the folder it may warm-start from (plain JSON values, no secret: the checkpoint key
        # stays on disk beside the checkpoints).
        self.checkpoint_policy = checkpoint_policy
        self._rendezvous = rendezvous
        self._bind = (host, port)
        # One lock for the membership and what is kept here (the liveness connections).
        self._cond = self._membership.cond
        self._closed = self._membership.closed
        self._liveness: dict[str, socket.socket] = {}
        self._server: CoordinatorServer | None = None
        self._threads: list[threading.Thread] = []
        self._abort_traceback = ""
        self._metrics = MetricBook(max_reports)

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

    def _tick(self) -> None:
        while not self._closed.wait(0.1):
            self._membership.tick()

    # ------------------------------------------------------ the membership's settings

    @property
    def min_nodes(self) -> int:
        """Fewest ranks an epoch is formed with."""
        return self._membership.min_nodes

    @property
    def max_nodes(self) -> int:
        """Most ranks an epoch is formed with."""
        return self._membership.max_nodes

    @property
    def settle_s(self) -> float:
        """How long a cold start waits after the latest join before it forms an epoch."""
        return self._membership.settle_s

    @property
    def reform_timeout_s(self) -> float:
        """How long members that neither report nor die may hold up the next epoch."""
        return self._membership.reform_timeout_s

    @property
    def measure_every_s(self) -> float:
        """Shortest stretch of one epoch a throughput measurement covers."""
        return self._membership.measurements.every_s

    # ---------------------------------------------------------- controller API

    def drain(self, member_ids: Iterable[str] = (), block_ids: Iterable[str] = ()) -> list[str]:
        """Ask members (by id, or all members on the given blocks) to leave at the next check.

        Returns the ids marked. A planned leave costs no work: the group stops at a commit.
        """
        return self._membership.drain(member_ids, block_ids)

    def abort(self, message: str, traceback: str = "") -> None:
        """End the job with an error: waiting ranks exit, running ones exit at their next report.

        ``traceback``: the failing rank's formatted traceback, kept (its last
        :data:`~parsl_malleable.elastic.settings.TRACEBACK_CHARS` characters) when this is the
        abort that ends the job."""
        with self._cond:
            first = self._membership.outcome is None
            self._membership.abort(message)
            if first and traceback:
                self._abort_traceback = keep_tail(traceback)

    @property
    def outcome(self) -> str | None:
        """``"done"``, ``"aborted"`` or ``None`` while training goes on."""
        return self._membership.outcome

    @property
    def result(self) -> tuple[Any] | None:
        """``(value,)``: what rank 0 returned, as JSON decodes it, when it sent it with
        ``finish``; None when training is not done or the value does not encode as JSON."""
        return self._membership.result

    def warn(self, message: str, member: str | None = None) -> None:
        """Record a warning for the job's owner (listed by :meth:`warnings`) and log it;
        ``member``: the rank it came from, if any."""
        self._membership.warn(message, member=member)
        if member is None:
            logger.warning("%s", message)
        else:
            logger.warning("rank %s: %s", member, message)

    @property
    def abort_message(self) -> str | None:
        """Why the job was aborted, if it was."""
        return self._membership.abort_message

    @property
    def abort_traceback(self) -> str:
        """The traceback of the rank failure that aborted the job ("" when none came with it)."""
        return self._abort_traceback

    def members(self) -> list[MemberRecord]:
        """Copies of every member record, in registration order."""
        return self._membership.members()

    def current_members(self) -> list[MemberRecord]:
        """Copies of the records of the group now training, in rank order (empty if none)."""
        return self._membership.current_members()

    def registered(self, member_id: str) -> bool:
        """Whether ``member_id`` has registered."""
        return self._membership.registered(member_id)

    def live_members(self) -> int:
        """Members alive and not leaving (running or waiting)."""
        return self._membership.live_members()

    def epochs(self) -> list[dict[str, Any]]:
        """History of epochs: number, world size, members, reason, times, steps."""
        return self._membership.epochs()

    def events(self) -> list[dict[str, Any]]:
        """Timestamped events (wall clock): joined, lost, drain, formed, resumed, rollback, ..."""
        return self._membership.events()

    def events_since(self, index: int) -> list[dict[str, Any]]:
        """The events after the first ``index`` (to read them as they come)."""
        return self._membership.events_since(index)

    def running_world_size(self) -> int:
        """Size of the group currently training (0 while none is)."""
        return self._membership.running_world_size()

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
        return self._membership.resumed_at(world_size, min_step)

    def last_step(self) -> int:
        """Latest committed step reported by the running group (-1 before any)."""
        return self._membership.last_step()

    def warnings(self) -> list[str]:
        """What ranks reported with ``warn``, oldest first."""
        return self._membership.warnings()

    def take_measurements(self) -> tuple[list[tuple[int, float]], list[tuple[str, float]]]:
        """Measurements since the last call: ``(world_size, samples/s)`` over stretches of at
        least ``measure_every_s`` within one epoch, and ``(kind, seconds)`` rescale pauses
        (``start``, ``up``, ``down``: from the previous epoch's last progress, or from forming
        the first epoch, to the new epoch's first commit)."""
        return self._membership.take_measurements()

    def metric_records(self) -> list[MetricRecord]:
        """The reports of rank 0's ``ctx.report`` kept for this job, by step (the newest
        ``max_reports`` steps; see :mod:`~parsl_malleable.elastic.metric_book`)."""
        return self._metrics.records()

    def take_metrics(self) -> MetricChanges:
        """The reports changed since the last call, and the step above which stored ones were
        dropped: for the one consumer that persists them (the campaign runner)."""
        return self._metrics.take()

    def metric_counts(self) -> dict[str, int]:
        """Reports accepted, stale, dropped by a rollback, evicted, non-finite values, kept."""
        return self._metrics.counts()

    # ------------------------------------------------------------ rank protocol

    def handle(self, request: Request) -> Reply | Refusal:
        """Answer one validated request of the rank protocol (may block until an assignment
        exists)."""
        if isinstance(request, Hello):
            return Ok()
        if isinstance(request, KV_REQUESTS):
            # The rendezvous keys of a backend that keeps them here (torch): any connection
            # that passed the challenge may use them, as a rank's store connection does.
            if not isinstance(self._rendezvous, KeyTableHost):
                return Refusal(error=f"the {type(self._rendezvous).__name__} keeps no keys here")
            return serve_kv(self._rendezvous.table, request)
        if isinstance(request, Register):
            return self._register(request)
        member = getattr(request, "member", None)
        if not isinstance(member, str):
            return Refusal(error=f"request {request.op!r} lacks a member id")
        if not self._membership.registered(member):
            return Refusal(error=f"member {member} has not registered")
        match request:
            case Join():
                return self._membership.join(member)
            case Poll():
                samples = request.samples
                trained = int(samples) if isinstance(samples, int) else request.step
                return ChangeAnswer(
                    change=self._membership.poll(request.epoch, request.step, trained)
                )
            case Report():
                return self._membership.report(
                    member,
                    epoch=request.epoch,
                    has_state=request.has_state,
                    committed_step=request.committed_step,
                    reason=request.reason,
                    attempted_step=request.attempted_step,
                )
            case Left():
                self._membership.left(
                    member, saved_step=request.saved_step, save_error=request.save_error
                )
                return Ok()
            case Finish():
                result = (request.result,) if "result" in request.model_fields_set else None
                self._membership.finish(member, step=request.step, result=result)
                return Ok()
            case Abort():
                self.abort(f"rank {member} failed: {request.error}", traceback=request.traceback)
                return Ok()
            case Warn():
                # Something the job's owner must know that did not stop it (a checkpoint skipped).
                self.warn(request.message[:2000], member=member)
                return Ok()
            case Leaving():
                return self._leaving_from_rank(member, request)
            case Metrics():
                return self._metrics_from_rank(member, request)
            case Timeline():
                return self._timeline_from_rank(request)
        return Refusal(error=f"unknown op {request.op!r}")

    def member_lost(self, member_id: str, why: str) -> None:
        """The liveness connection of ``member_id`` broke or went silent."""
        with self._cond:  # one step with the membership's change (the lock is re-entrant)
            loss = self._membership.lose(member_id, why)
            if loss is None:
                return
            own = self._liveness.pop(member_id, None)
            peers = [self._liveness[i] for i in loss.peers if i in self._liveness]
            peer_lost = (
                None if loss.epoch is None else PeerLostNotice(epoch=loss.epoch, member=member_id)
            )
        # Survivors blocked in a collective that cannot notice the loss by itself (Horovod
        # waits for its timeout, torch's gloo until collective_timeout_s) give up at once;
        # sent outside the lock, a slow peer must not stall the coordinator.
        if peer_lost is not None:
            for sock in peers:
                with contextlib.suppress(OSError):
                    send_message(sock, peer_lost.to_json())
        # A frozen or cut-off rank reads this when it runs again, and leaves instead of
        # waiting on a group that went on without it.
        if own is not None:
            with contextlib.suppress(OSError):
                send_message(own, DroppedNotice(why=why).to_json())

    def liveness_opened(self, member_id: str, sock: socket.socket) -> None:
        """Remember the liveness connection of ``member_id`` (to push notices on it)."""
        with self._cond:
            self._liveness[member_id] = sock

    def _register(self, request: Register) -> Reply | Refusal:
        new = self._membership.register(
            request.member, host=request.host, pid=request.pid, block=request.block
        )
        if not new:
            return Refusal(error=f"member {request.member} registered twice")
        return Registered(checkpoint=self.checkpoint_policy)

    def _leaving_from_rank(self, member_id: str, request: Leaving) -> Ok:
        """A rank got notice that its node goes (a preemption's SIGTERM): it leaves at the
        commit it is at, as if drained."""
        logger.info("member %s leaves at its next commit: %s", member_id, request.reason)
        self.drain(member_ids=[member_id])
        return Ok()

    def _timeline_from_rank(self, request: Timeline) -> TimelineAnswer:
        if self._metrics.timeline(request.epoch, request.base):
            logger.debug("epoch %d starts from step %d: later reports dropped", request.epoch,
                         request.base)  # fmt: skip
        # Rank 0 sends its committed reports above this step (all of them to a new driver).
        return TimelineAnswer(last=self._metrics.last_step())

    def _metrics_from_rank(self, member_id: str, request: Metrics) -> MetricsAnswer:
        values = dict(request.values)
        evicted, nonfinite = self._metrics.evicted, self._metrics.nonfinite
        if not self._metrics.add(request.epoch, request.step, values):
            return MetricsAnswer(stale=True)
        bad = sorted(k for k, v in values.items() if not finite(v))
        if bad:
            # The first at WARNING; the rest are counted (metric_counts), not one line each.
            logger.log(
                logging.WARNING if nonfinite == 0 else logging.DEBUG,
                "member %s reported non-finite %s at step %s (kept as reported, never a best; "
                "later ones are counted)",
                member_id,
                ", ".join(f"{k}={values[k]}" for k in bad),
                request.step,
            )
        if evicted == 0 and self._metrics.evicted:
            self.warn(
                f"more than {self._metrics.max_reports} metric reports: the coordinator keeps "
                "the newest ones only (a campaign's store keeps all; report less often)"
            )
        return MetricsAnswer()
