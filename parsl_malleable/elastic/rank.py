"""The rank side of the elastic runtime: join epochs, sync state, check membership at commits.

A rank is one long-running process (a Parsl task on a worker, or any process) that runs the user's
training function with a :class:`RankContext`. The function builds its model and an
:class:`~parsl_malleable.elastic.state.ElasticState` and hands its training loop to
:meth:`RankContext.run`, which re-enters the loop after every membership change, always from the
last commit.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import threading
import traceback
from collections.abc import Callable
from numbers import Integral
from typing import Any, TypeVar

import torch

from parsl_malleable.elastic.backend_interface import (
    Abortable,
    CoordinatorKeyed,
    ProcessGroupBackend,
    info_from_json,
)
from parsl_malleable.elastic.backend_registry import get_backend
from parsl_malleable.elastic.ddp import ElasticDDP
from parsl_malleable.elastic.heartbeat import Heartbeat
from parsl_malleable.elastic.messages import (
    ASSIGNMENT,
    Abort,
    ChangeAnswer,
    CheckpointPolicy,
    DroppedNotice,
    Exit,
    Finish,
    Join,
    Leave,
    Leaving,
    Left,
    Metrics,
    MetricsAnswer,
    Notice,
    PeerLostNotice,
    Poll,
    Register,
    Registered,
    Report,
    Run,
    Timeline,
    TimelineAnswer,
    Warn,
)
from parsl_malleable.elastic.metric_book import check_metrics
from parsl_malleable.elastic.rank_checkpoints import RankCheckpoints
from parsl_malleable.elastic.sampler import ElasticDistributedSampler
from parsl_malleable.elastic.settings import (
    RankOutcome,
    RankSettings,
    RankSpec,
    failure_traceback,
)
from parsl_malleable.elastic.state import (
    ElasticSampler,
    ElasticState,
    ResizeHook,
    job_batch_defaults,
)
from parsl_malleable.errors import ConfigError
from parsl_malleable.transport.messages import Ok
from parsl_malleable.transport.wire import MAX_LINE, PeerUnavailable, RequestClient

logger = logging.getLogger(__name__)
T = TypeVar("T")


class EpochInterrupt(BaseException):
    """Unwinds the training loop at a membership change.

    A ``BaseException`` so that a user's ``except Exception`` cannot swallow it.
    """


class PlannedChange(EpochInterrupt):
    """The group agreed at a commit that membership changes; the state is committed."""


# gloo's transport raises plain RuntimeError (not DistError) when a peer's socket closes in a
# collective that DDP did not route through its communication hook (a buffer broadcast, a
# GradScaler's inf check): seen in CI as "[.../gloo/transport/tcp/pair.cc:537] Read error
# [127.0.0.1]:13497: Connection reset by peer". Such an error is a lost peer, not user code.
_TRANSPORT_MARKS = ("gloo/transport", "Connection reset by peer", "Connection closed by peer")


def is_transport_error(exc: BaseException) -> bool:
    """Whether ``exc`` is torch.distributed telling that a peer or its connection went away."""
    if isinstance(exc, torch.distributed.DistError):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and any(mark in text for mark in _TRANSPORT_MARKS)


def failure_message(error: BaseException, causes: int = 3) -> str:
    """``error`` in one line, with up to ``causes`` of the exceptions it was raised from.

    Libraries re-raise with a generic message (a DataLoader's worker "exited unexpectedly" is
    raised ``from`` whatever interrupted its wait); the job's owner reads the chain.
    """
    parts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen and len(parts) <= causes:
        seen.add(id(current))
        parts.append("".join(traceback.format_exception_only(type(current), current)).strip())
        current = current.__cause__ or (
            None if current.__suppress_context__ else current.__context__
        )
    return " <- ".join(parts)


class PeerLost(EpochInterrupt):
    """A collective failed (a peer died or timed out); the state rolls back to the last commit."""


class RankExit(BaseException):
    """This rank is not needed any more (it left, the job ended, or the controller went away)."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class RankContext:
    """A rank's handle on the job: its rank and world size, collectives, and :meth:`run`.

    ``local_rank`` is the rank's index on its node and ``device`` the device it is bound to
    (``cuda:i`` on a GPU node, else ``cpu``); both stay fixed while ``rank`` and
    ``world_size`` change at every membership change.
    """

    def __init__(self, spec: RankSpec) -> None:
        self.member_id = spec.member_id
        self.settings = spec.settings
        self.local_rank = spec.local_rank
        self.device = spec.device
        self.rank = -1
        self.world_size = 0
        self.epoch = 0
        self._client = RequestClient(spec.host, spec.port, spec.token)
        registered = self._client.call(
            Register(
                member=self.member_id,
                host=socket.gethostname(),
                pid=os.getpid(),
                block=os.environ.get("PARSL_WORKER_BLOCK_ID"),
            ),
            Registered,
        )
        options = {"device": spec.device} if spec.settings.backend == "torch" else {}
        self._backend = get_backend(spec.settings.backend, **options)
        if isinstance(self._backend, CoordinatorKeyed):
            self._backend.attach_coordinator(spec.host, spec.port, spec.token)
        # Why the coordinator stopped counting this rank (its liveness went silent: frozen,
        # cut off); set from the heartbeat's thread before that thread may call back.
        self._dropped = ""
        self._heartbeat = Heartbeat(
            spec.host,
            spec.port,
            spec.token,
            self.member_id,
            spec.settings.heartbeat_interval_s,
            on_notice=self._on_notice,
        )
        self.checkpoints = RankCheckpoints(
            spec.settings.checkpoint_dir,
            spec.settings.keep_checkpoints,
            registered.checkpoint or CheckpointPolicy(),
            warn=self._warn,
        )
        self._finished_rank: int | None = None
        self._notice = ""  # why this rank must leave (a SIGTERM: preemption, a cancel)
        self._notice_sent = False
        self._wrapped: list[ElasticDDP] = []
        self._state: ElasticState | None = None
        self._known_step = -1

    # --------------------------------------------------------------- user API

    def state(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        scheduler: Any = None,
        sampler: ElasticSampler | ElasticDistributedSampler | None = None,
        resize_hooks: list[ResizeHook] | None = None,
        scaler: Any = None,
        **fields: Any,
    ) -> ElasticState:
        """Create the job's :class:`ElasticState` (same arguments); the job's ``batch`` option
        fills in a sampler made without ``batch=`` and the default resize hooks."""
        return ElasticState(
            model,
            optimizer=optimizer,
            scheduler=scheduler,
            sampler=sampler,
            resize_hooks=job_batch_defaults(self.settings.batch, sampler, resize_hooks),
            scaler=scaler,
            **fields,
        )

    def wrap(self, model: torch.nn.Module, **ddp_options: Any) -> ElasticDDP:
        """``model`` as ``DistributedDataParallel`` over the current group, rebuilt at each resize.

        Call it once, before or inside the loop (the same model gives the same wrapper); the
        wrapper's DDP is rebuilt whenever a group forms. ``ddp_options`` go to DDP
        (``bucket_cap_mb``, ``find_unused_parameters``, ...). With an
        :class:`~parsl_malleable.elastic.sampler.ElasticDistributedSampler` in the state, each
        rank's gradient is weighted by ``sampler.weight()`` so uneven steps average exactly.
        Needs the torch backend: with Horovod, call :meth:`allreduce_gradients` after
        ``backward()`` instead (raises :class:`ConfigError`).
        """
        if self._backend.name != "torch":
            raise ConfigError(
                f"ctx.wrap (DistributedDataParallel) needs backend='torch', this job uses "
                f"{self._backend.name!r}: keep the model unwrapped and call "
                f"ctx.allreduce_gradients(model) after backward()"
            )
        if isinstance(model, ElasticDDP):
            return model
        for wrapper in self._wrapped:
            if wrapper.module is model:
                return wrapper
        wrapper = ElasticDDP(model, **ddp_options)
        self._wrapped.append(wrapper)
        if isinstance(self._backend, ProcessGroupBackend) and self._backend.group is not None:
            self._rebuild(wrapper)  # called inside the loop: a group exists
        return wrapper

    def allreduce_mean_(self, tensors: list[torch.Tensor]) -> None:
        """Average ``tensors`` in place over the group; a failure raises :class:`PeerLost`."""
        try:
            self._backend.allreduce_mean_(tensors)
        except Exception as exc:
            raise PeerLost(f"allreduce failed in epoch {self.epoch}: {exc}") from exc

    def allreduce_gradients(
        self,
        model: torch.nn.Module,
        local_count: int | None = None,
        global_count: int | None = None,
    ) -> None:
        """Average the gradients of ``model`` over the group.

        With ``local_count`` and ``global_count`` (samples in this rank's part and in the whole
        global batch, e.g. from :class:`ElasticSampler`), each rank's mean-loss gradient is
        weighted so the result is the exact mean over the global batch even when parts differ in
        size or are empty.
        """
        params = [p for p in model.parameters() if p.requires_grad]
        grads: list[torch.Tensor] = []
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            grads.append(p.grad)
        if local_count is not None and global_count:
            weight = local_count * self.world_size / global_count
            for g in grads:
                g.mul_(weight)
        self.allreduce_mean_(grads)

    def report(self, step: int, **metrics: Any) -> None:
        """Report ``metrics`` (names to numbers) of ``step``: the job's lead rank sends them to
        the driver; every rank keeps them in its state, committed and checkpointed with it.

        Call it on every rank (DDP keeps the models equal, so an evaluation gives each rank
        the same values), before ``state.commit()``, with the step that commit completes
        (``state.step + 1``): a membership change can stop the loop inside ``commit()``, so a
        report placed after it may never be made. Reports survive resizes and resumes: the
        driver keeps, for each step, the report of the timeline that was finally committed
        (:mod:`~parsl_malleable.elastic.metric_book`), and a driver that starts again (after a
        crash) gets the reports it never received from the checkpoint the job resumes from.
        At most 16 names per report; NaN and infinities are kept and counted, never taken as a
        best. A bad name or value raises :class:`~parsl_malleable.errors.ConfigError`."""
        try:
            values = check_metrics(metrics)
        except ValueError as exc:
            raise ConfigError(f"ctx.report(step={step!r}): {exc}") from None
        if isinstance(step, bool) or not isinstance(step, Integral) or step < 0:
            raise ConfigError(f"ctx.report: step must be a whole number >= 0, got {step!r}")
        if self._state is not None:
            self._state.record_report(int(step), values)
        if self.rank == 0:
            self._send_report(int(step), values)

    def _send_report(self, step: int, values: dict[str, float]) -> None:
        self._client.call(
            Metrics(member=self.member_id, epoch=self.epoch, step=step, values=values),
            MetricsAnswer,
        )

    def run(self, loop: Callable[[ElasticState], T], state: ElasticState) -> T:
        """Train with ``loop(state)`` until it returns, across any number of membership changes.

        ``loop`` must resume from ``state`` (sampler position, user fields) and call
        ``state.commit()`` after every update. It is re-entered after each change; its return
        value on the final group is this function's return value.
        """
        state._commit_hook = self._on_commit
        previous = _catch_notice(self._on_term)
        self._state = state
        try:
            return self._run(loop, state)
        except PeerUnavailable:
            # The driver is gone (killed, its host lost): nobody will hand this job's state
            # to a new group, so rank 0 keeps the last commit on disk for the rerun; so does
            # any rank whose commit is newer than the disk's (rank 0 may have left in a
            # change that never formed). Concurrent savers are safe: the store locks, and
            # keeps a step already committed. The block's grace (TERM to KILL) covers this.
            if state.has_commit and (self.rank == 0 or self.checkpoints.newer_than_disk(state)):
                where = self.checkpoints.where
                logger.warning(
                    "coordinator lost: saving the commit of step %d to %s before exiting",
                    state.step,
                    where,
                )
                saved = self.checkpoints.save_retrying(state)
                if saved is not None:
                    logger.warning(
                        "coordinator lost: saved the commit of step %d to %s before exiting",
                        saved,
                        where,
                    )
            raise
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)

    def _on_term(self, signum: int, _frame: object) -> None:
        # Slurm's notice to a preempted block (and a cancel's first signal): leave at the next
        # check, at a commit, instead of dying now and costing the group a rollback.
        self._notice = f"signal {signal.Signals(signum).name}"

    def _run(self, loop: Callable[[ElasticState], T], state: ElasticState) -> T:
        assignment = self._client.call(Join(member=self.member_id), ASSIGNMENT)
        while True:
            run = self._obey(assignment, state)
            reason = "failure"
            attempted = -1
            try:
                self._enter(run, state)
                result = self._call(loop, state)
            except PlannedChange:
                reason = "change"
                attempted = state.step
            except PeerLost as exc:
                attempted = state.step + 1
                logger.info("rank %d: %s; rolling back to step %d", self.rank, exc, state.step)
                state.restore()
            else:
                self._finish(state, result)
                return result
            self._shutdown_backend()
            report = Report(
                member=self.member_id,
                epoch=self.epoch,
                reason=reason,
                committed_step=state.step if state.has_commit else -1,
                attempted_step=attempted,
                has_state=state.has_commit,
            )
            assignment = self._client.call(report, ASSIGNMENT)

    @property
    def failed_checkpoints(self) -> int:
        """Disk checkpoints that could not be written."""
        return self.checkpoints.failed

    @property
    def last_save_error(self) -> str | None:
        """Why the last disk checkpoint was not written (None if it was)."""
        return self.checkpoints.last_error

    @property
    def terminated(self) -> bool:
        """Whether this process got SIGTERM while the rank ran (it left at a commit)."""
        return self._notice.startswith("signal")

    @property
    def finished_rank(self) -> int | None:
        """This rank's number in the group that completed training (None if it did not)."""
        return self._finished_rank

    def abort(self, error: BaseException) -> None:
        """Tell the coordinator that user code failed on this rank (ends the job)."""
        message = failure_message(error)
        try:
            request = Abort(
                member=self.member_id, error=message, traceback=failure_traceback(error)
            )
            self._client.call(request, Ok)
        except Exception:
            logger.warning("could not report the failure to the coordinator")

    def close(self) -> None:
        """Leave the group and close the coordinator connections."""
        self._shutdown_backend()
        self._heartbeat.close()
        self._client.close()

    # -------------------------------------------------------------- internals

    def _on_notice(self, notice: Notice) -> None:
        """A peer of the current epoch died, or this rank was dropped: abandon a blocked
        collective now instead of at ``collective_timeout_s``.

        Optional for backends (:class:`~parsl_malleable.elastic.backend_interface.Abortable`):
        one with ``abort(reason)``, safe to call from another thread, makes the pending
        collective raise at once. Runs on the heartbeat's thread.
        """
        match notice:
            case DroppedNotice():
                if self._dropped:
                    return
                self._dropped = notice.why
                # info, not warning: the driver's own shutdown closes the connection too; a real
                # drop reaches the job's owner as the coordinator's warning when this rank
                # reports.
                logger.info(
                    "member %s: the coordinator dropped this rank (%s)",
                    self.member_id,
                    self._dropped,
                )
                reason = f"this rank was dropped: {self._dropped}"
            case PeerLostNotice() if notice.epoch == self.epoch:
                reason = f"member {notice.member} of epoch {self.epoch} was lost"
            case _:
                return
        if isinstance(self._backend, Abortable):
            self._backend.abort(reason)

    def _call(self, loop: Callable[[ElasticState], T], state: ElasticState) -> T:
        """``loop(state)``; a collective error raised through user code (DDP's gradient
        exchange fails inside ``backward()``) becomes :class:`PeerLost`."""
        try:
            return loop(state)
        except Exception as exc:
            failures = [w.failure for w in self._wrapped if w.failure is not None]
            if failures or is_transport_error(exc):
                cause = failures[0] if failures else exc
                raise PeerLost(f"gradient exchange failed in epoch {self.epoch}: {cause}") from exc
            raise

    def _rebuild(self, wrapper: ElasticDDP) -> None:
        """Build ``wrapper``'s DDP over the current group (a collective: all ranks call it)."""
        sampler = self._state.sampler if self._state is not None else None
        weight = sampler.weight if isinstance(sampler, ElasticDistributedSampler) else None
        group, device = None, torch.device("cpu")
        if isinstance(self._backend, ProcessGroupBackend):
            group, device = self._backend.group, self._backend.device
        try:
            wrapper.rebuild(group, self.rank, self.world_size, device, weight)
        except RuntimeError as exc:  # torch.distributed's errors; a bad option is the user's
            raise PeerLost(f"building DDP in epoch {self.epoch} failed: {exc}") from exc

    def _obey(self, assignment: Run | Leave | Exit, state: ElasticState) -> Run:
        """The assignment to run, or leave or exit as told."""
        match assignment:
            case Run():
                return assignment
            case Leave():
                saved: dict[str, Any] = {"saved_step": None}
                if assignment.save and state.has_commit:
                    saved = self.checkpoints.save_on_leaving(state)
                self._client.call(Left(member=self.member_id, **saved), Ok)
                raise RankExit("left", "asked to leave")
            case Exit():
                raise RankExit("exited", assignment.reason)

    def _enter(self, run: Run, state: ElasticState) -> None:
        self.rank, self.world_size, self.epoch = run.rank, run.world_size, run.epoch
        # The newest step the coordinator knows this job committed: a resume from disk that
        # is behind it has lost work, which the driver must hear of.
        self._known_step = run.known_step
        info = info_from_json(run.info)
        logger.debug(
            "member %s: rank %d of %d in epoch %d",
            self.member_id,
            self.rank,
            self.world_size,
            self.epoch,
        )
        try:
            self._backend.init(self.rank, info, self.settings.collective_timeout_s)
        except Exception as exc:
            raise PeerLost(f"forming epoch {self.epoch} failed: {exc}") from exc
        self._sync(state)
        if self.rank == 0:
            self._mark_timeline(state)
        if isinstance(state.sampler, ElasticDistributedSampler):
            state.sampler.set_group(self.rank, self.world_size)
        for wrapper in self._wrapped:
            self._rebuild(wrapper)

    def _mark_timeline(self, state: ElasticState) -> None:
        """Tell the driver the step this group starts from (its reports above it are void),
        then send the committed reports it lacks: after a driver restart it has none, and the
        checkpoint this job resumed from holds those the old driver never stored."""
        timeline = Timeline(member=self.member_id, epoch=self.epoch, base=state.step)
        last = self._client.call(timeline, TimelineAnswer).last
        for step, pairs in state.reports:
            if last < step <= state.step:
                self._send_report(step, dict(pairs))

    def _sync(self, state: ElasticState) -> None:
        """Make every rank hold the newest committed state, then apply resize hooks."""
        held = torch.zeros(self.world_size, dtype=torch.float64)
        held[self.rank] = state.step + 1 if state.has_commit else 0
        self.allreduce_mean_([held])
        held = torch.round(held * self.world_size)
        best = int(held.max().item())
        if best == 0:
            snap = (
                self.checkpoints.initial_snapshot(state, self._known_step)
                if self.rank == 0
                else None
            )
            state.load_snapshot(self._broadcast(snap, 0))
        elif bool((held != best).any()):
            src = int(torch.nonzero(held == best)[0].item())
            snap = self._broadcast(state.committed() if self.rank == src else None, src)
            if self.rank != src:
                state.load_snapshot(snap)
        state.resized(self.world_size)

    def _warn(self, text: str) -> None:
        """Log ``text`` here and on the driver (the coordinator logs it and keeps it)."""
        logger.warning("%s", text)
        try:
            self._client.call(Warn(member=self.member_id, message=text), Ok)
        except PeerUnavailable:
            logger.warning("could not report the warning above to the coordinator")

    def _broadcast(self, obj: Any, src: int) -> Any:
        try:
            return self._backend.broadcast_object(obj, src)
        except Exception as exc:
            raise PeerLost(f"state broadcast failed in epoch {self.epoch}: {exc}") from exc

    def _on_commit(self, state: ElasticState) -> None:
        if self._dropped:  # the group went on without this rank: its report is told to leave
            raise PeerLost(f"dropped by the coordinator ({self._dropped})")
        every = self.settings.checkpoint_every
        due = every and state.step % every == 0
        if due and self.rank == 0 and self.checkpoints.store is not None:
            self.checkpoints.save_periodic(state)
        if state.step % self.settings.check_every:
            return
        flag = torch.zeros(1, dtype=torch.float64)
        if self._notice and not self._notice_sent:
            # Marked leaving before the flag is reduced, so the change the group agrees on
            # already leaves this rank out.
            self._client.call(Leaving(member=self.member_id, reason=self._notice), Ok)
            self._notice_sent = True
            flag[0] = 1.0
        if self.rank == 0:
            poll = Poll(
                member=self.member_id,
                epoch=self.epoch,
                step=state.step,
                samples=state.samples_trained(),
            )
            change = self._client.call(poll, ChangeAnswer).change
            flag[0] = max(flag.item(), 1.0 if change else 0.0)
        self.allreduce_mean_([flag])
        if flag.item() > 0:
            raise PlannedChange(f"membership changes after step {state.step}")

    def _finish(self, state: ElasticState, result: Any) -> None:
        self._finished_rank = self.rank
        if self.rank == 0:
            self.checkpoints.save_final(state)
            finish = Finish(member=self.member_id, step=state.step, **_result_copy(result))
            self._client.call(finish, Ok)
        self._shutdown_backend()

    def _shutdown_backend(self) -> None:
        for wrapper in self._wrapped:
            wrapper.release()
        try:
            self._backend.shutdown()
        except Exception as exc:
            logger.debug("backend shutdown: %s", exc)


def _result_copy(result: Any) -> dict[str, Any]:
    """``{"result": result}`` when it travels as JSON within a quarter of a message, else {}.

    The copy lets the driver finish the job if this rank's worker is lost between ``finish``
    and the return of its Parsl task (a block ending at that moment); a value JSON cannot carry
    (tensors, objects) still returns only through Parsl.
    """
    try:
        size = len(json.dumps(result))
    except (TypeError, ValueError):
        return {}
    return {"result": result} if size <= MAX_LINE // 4 else {}


def _catch_notice(handler: Callable[[int, Any], None]) -> Any:
    """Install ``handler`` for SIGTERM; the handler it replaced, or None where signals cannot
    be caught (not the main thread: the rank then dies on SIGTERM as before)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, handler)


def run_rank(
    spec: RankSpec, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> RankOutcome:
    """Entry point of a rank process: run ``fn(ctx, *args, **kwargs)`` and report how it ended."""
    if spec.settings.torch_threads:
        torch.set_num_threads(spec.settings.torch_threads)
    try:
        ctx = RankContext(spec)
    except PeerUnavailable as exc:
        return RankOutcome(spec.member_id, "exited", reason=str(exc))
    try:
        value = fn(ctx, *args, **kwargs)
        return RankOutcome(spec.member_id, "finished", ctx.finished_rank, value)
    except RankExit as exc:
        return RankOutcome(spec.member_id, exc.status, reason=exc.reason, terminated=ctx.terminated)
    except PeerUnavailable as exc:
        return RankOutcome(spec.member_id, "exited", reason=str(exc))
    except BaseException as exc:
        ctx.abort(exc)
        raise
    finally:
        ctx.close()


__all__ = [
    "PeerLost",
    "RankContext",
    "RankExit",
    "RankOutcome",
    "RankSettings",
    "RankSpec",
    "is_transport_error",
    "run_rank",
]
