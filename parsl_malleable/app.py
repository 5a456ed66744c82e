"""``@malleable_app``: a training function becomes a Parsl app that survives resizes.

Calling the decorated function returns an :class:`~parsl.dataflow.futures.AppFuture` whose result
is the training function's return value on rank 0 of the group that finished training, however
many times the job grew, shrank or stopped on the way. Behind it:

* a controller task runs in the calling process (on a thread executor added to the DFK) and owns
  the membership :class:`~parsl_malleable.elastic.coordinator.Coordinator` and the backend's
  rendezvous service, so neither lives on a block that can vanish;
* it submits one long-running rank task per idle worker of the HighThroughputExecutor (one worker
  per node) and keeps doing so as blocks appear;
* ranks join at the next commit, leave at a commit when their block is drained, and roll back to
  the last commit when a peer is lost; with no rank left the job waits, and the next ranks resume
  from the last disk checkpoint.
"""

from __future__ import annotations

import functools
import importlib
import logging
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import parsl
from parsl.app.app import python_app
from parsl.dataflow.futures import AppFuture
from parsl.executors import HighThroughputExecutor, ThreadPoolExecutor
from parsl.executors.high_throughput.errors import ManagerLost, WorkerLost

from parsl_malleable.elastic.backends import BACKENDS, get_rendezvous_host
from parsl_malleable.elastic.coordinator import Coordinator
from parsl_malleable.elastic.rank import RankOutcome, RankSettings, RankSpec, run_rank
from parsl_malleable.errors import ConfigError, MalleableError

logger = logging.getLogger(__name__)

CONTROLLER_EXECUTOR = "_malleable_controller"


class ElasticJobError(MalleableError):
    """Training failed on a rank (user code raised) or the job could not run."""


@dataclass(frozen=True)
class ElasticOptions:
    """Settings of one malleable app (see :func:`malleable_app` for their meaning)."""

    checkpoint_dir: str
    min_nodes: int = 1
    max_nodes: int = 1024
    backend: str = "torch"
    executor: str | None = None
    controller_host: str | None = None
    check_every: int = 1
    checkpoint_every: int = 200
    keep_checkpoints: int = 3
    collective_timeout_s: float = 30.0
    heartbeat_interval_s: float = 1.0
    heartbeat_timeout_s: float = 10.0
    settle_s: float = 0.5
    reform_timeout_s: float = 60.0
    poll_interval_s: float = 0.25
    rank_start_timeout_s: float = 120.0
    torch_threads: int | None = 1

    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the first bad setting."""
        if self.backend not in BACKENDS:
            raise ConfigError(f"backend must be one of {', '.join(BACKENDS)}; got {self.backend!r}")
        if not 1 <= self.min_nodes <= self.max_nodes:
            raise ConfigError(
                f"need 1 <= min_nodes <= max_nodes; got min_nodes={self.min_nodes}, "
                f"max_nodes={self.max_nodes}"
            )
        for name in ("check_every", "keep_checkpoints"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1; got {getattr(self, name)}")
        if self.checkpoint_every < 0:
            raise ConfigError(f"checkpoint_every must be >= 0; got {self.checkpoint_every}")
        if not self.checkpoint_dir:
            raise ConfigError(
                "checkpoint_dir is required (a job with no node left resumes from it)"
            )

    def rank_settings(self) -> RankSettings:
        """The part of the options that ranks need."""
        return RankSettings(
            backend=self.backend,
            checkpoint_dir=self.checkpoint_dir,
            keep_checkpoints=self.keep_checkpoints,
            check_every=self.check_every,
            checkpoint_every=self.checkpoint_every,
            collective_timeout_s=self.collective_timeout_s,
            heartbeat_interval_s=self.heartbeat_interval_s,
            torch_threads=self.torch_threads,
        )


FunctionRef = tuple[str, str]


def _reference(fn: Callable[..., Any]) -> FunctionRef | Callable[..., Any]:
    """``(module, qualname)`` of an importable function, else the function itself.

    Sent by name, a function decorated in place still resolves on the worker (to the wrapper,
    which :func:`_resolve` unwraps); functions of ``__main__`` or a notebook travel by value.
    """
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if module and module != "__main__" and "<locals>" not in qualname:
        return (module, qualname)
    return fn


def _resolve(ref: FunctionRef | Callable[..., Any]) -> Callable[..., Any]:
    if callable(ref):
        return ref
    module, qualname = ref
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj.fn if isinstance(obj, MalleableApp) else obj


def _rank_task(
    spec: RankSpec,
    fn: FunctionRef | Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> RankOutcome:
    return run_rank(spec, _resolve(fn), args, kwargs)


def _control_task(job: ElasticJob) -> Any:
    return job.control()


class ElasticJob:
    """One call of a malleable app: its future, its coordinator, and controls for providers.

    A provider that is about to lose a block (deadline, preemption notice) calls
    :meth:`drain_blocks` first; ranks there leave at the next commit without losing work.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        options: ElasticOptions,
        executor: HighThroughputExecutor,
    ) -> None:
        self.options = options
        self.executor = executor
        self._fn = fn
        self._args = args
        self._kwargs = kwargs
        host = options.controller_host or executor.address or "127.0.0.1"
        self.coordinator = Coordinator(
            get_rendezvous_host(options.backend, host=host),
            min_nodes=options.min_nodes,
            max_nodes=options.max_nodes,
            host=host,
            settle_s=options.settle_s,
            reform_timeout_s=options.reform_timeout_s,
            heartbeat_timeout_s=options.heartbeat_timeout_s,
        )
        self._drained_blocks: set[str] = set()
        self._submitted: dict[str, tuple[AppFuture, float]] = {}
        self._rank_app = python_app(_rank_task, executors=[executor.label])
        self.future: AppFuture | None = None
        self._dfk = parsl.dfk()

    # ------------------------------------------------------------ controls

    def drain_blocks(self, block_ids: Iterable[str]) -> list[str]:
        """Ranks on these blocks leave at their next commit; no new rank is sent there."""
        blocks = [str(b) for b in block_ids]
        self._drained_blocks.update(blocks)
        return self.coordinator.drain(block_ids=blocks)

    def cancel(self, reason: str = "cancelled by the user") -> None:
        """Stop training: ranks exit at their next membership check; the future raises."""
        self.coordinator.abort(reason)

    def ranks_submitted(self) -> int:
        """Rank tasks submitted so far."""
        return len(self._submitted)

    # ------------------------------------------------------------ controller

    def control(self) -> Any:
        """Run the job to completion (the body of the controller task)."""
        self.coordinator.start()
        try:
            return self._loop()
        finally:
            self.coordinator.close()

    def _loop(self) -> Any:
        host, port = self.coordinator.address
        while True:
            if getattr(self._dfk, "cleanup_called", False) and self.coordinator.outcome is None:
                # The DFK waits for its thread executor's tasks: end instead of blocking it.
                self.coordinator.abort("the Parsl DataFlowKernel is shutting down")
            if self.coordinator.outcome == "aborted":
                raise ElasticJobError(self.coordinator.abort_message or "training aborted")
            finished = self._collect()
            if finished is not None:
                return finished.value
            if self.coordinator.outcome == "done" and not self._submitted:
                raise ElasticJobError(
                    "training finished but the task of rank 0 failed before returning its "
                    "result (its worker was lost); the final checkpoint is in "
                    f"{self.options.checkpoint_dir}"
                )
            if self.coordinator.outcome is None:
                for _ in range(self._ranks_to_submit()):
                    self._submit(host, port)
            time.sleep(self.options.poll_interval_s)

    def _collect(self) -> RankOutcome | None:
        for member_id, (future, _) in list(self._submitted.items()):
            if not future.done():
                continue
            error = future.exception()
            if error is not None:
                del self._submitted[member_id]
                if isinstance(error, ManagerLost | WorkerLost):
                    # A node (or its worker) is gone: expected, the survivors carry on.
                    self.coordinator.member_lost(member_id, f"rank task lost: {error}")
                else:
                    # run_rank returns for every expected ending; anything else would fail
                    # again on the next rank, so end the job with the error.
                    self.coordinator.abort(f"rank task {member_id} failed: {error!r}")
                continue
            outcome: RankOutcome = future.result()
            del self._submitted[member_id]
            if outcome.status == "finished" and outcome.rank == 0:
                return outcome
        return None

    def _ranks_to_submit(self) -> int:
        now = time.monotonic()
        inflight = sum(
            1
            for member_id, (future, submitted_at) in self._submitted.items()
            if not future.done()
            and not self.coordinator.registered(member_id)
            and now - submitted_at < self.options.rank_start_timeout_s
        )
        try:
            managers = self.executor.connected_managers()
        except Exception as exc:
            logger.debug("cannot list managers: %s", exc)
            return 0
        idle = sum(
            max(0, int(m["worker_count"]) - int(m["tasks"]))
            for m in managers
            if m.get("active", True) and str(m.get("block_id")) not in self._drained_blocks
        )
        room = self.options.max_nodes - self.coordinator.live_members() - inflight
        return max(0, min(idle - inflight, room))

    def _submit(self, host: str, port: int) -> None:
        spec = RankSpec(
            host=host,
            port=port,
            token=self.coordinator.token,
            settings=self.options.rank_settings(),
            member_id=uuid.uuid4().hex[:12],
        )
        future = self._rank_app(spec, _reference(self._fn), self._args, self._kwargs)
        self._submitted[spec.member_id] = (future, time.monotonic())


class MalleableApp:
    """A training function wrapped by :func:`malleable_app`."""

    def __init__(self, fn: Callable[..., Any], options: ElasticOptions) -> None:
        options.validate()
        self.fn = fn
        self.options = options
        functools.update_wrapper(self, fn)

    def submit(self, *args: Any, **kwargs: Any) -> ElasticJob:
        """Start a job and return its :class:`ElasticJob` (``job.future`` is the AppFuture)."""
        dfk = parsl.dfk()
        executor = _find_executor(dfk, self.options.executor)
        if CONTROLLER_EXECUTOR not in dfk.executors:
            dfk.add_executors([ThreadPoolExecutor(label=CONTROLLER_EXECUTOR, max_threads=16)])
        job = ElasticJob(self.fn, args, kwargs, self.options, executor)
        job.future = python_app(_control_task, executors=[CONTROLLER_EXECUTOR])(job)
        return job

    def __call__(self, *args: Any, **kwargs: Any) -> AppFuture:
        """Start a job; the AppFuture resolves with rank 0's return value."""
        future = self.submit(*args, **kwargs).future
        assert future is not None
        return future


def _find_executor(dfk: Any, label: str | None) -> HighThroughputExecutor:
    candidates = [ex for ex in dfk.executors.values() if isinstance(ex, HighThroughputExecutor)]
    if label is not None:
        candidates = [ex for ex in candidates if ex.label == label]
    if len(candidates) != 1:
        names = sorted(ex.label for ex in dfk.executors.values())
        wanted = (
            f"HighThroughputExecutor {label!r}" if label else "exactly one HighThroughputExecutor"
        )
        raise ConfigError(f"malleable_app needs {wanted}; the loaded config has {names}")
    return candidates[0]


def malleable_app(
    function: Callable[..., Any] | None = None,
    *,
    checkpoint_dir: str,
    min_nodes: int = 1,
    max_nodes: int = 1024,
    backend: str = "torch",
    **options: Any,
) -> Any:
    """Turn ``function(ctx, *args, **kwargs)`` into an elastic Parsl app.

    ``ctx`` is a :class:`~parsl_malleable.elastic.rank.RankContext`; the function builds its
    model and state and returns ``ctx.run(loop, state)``. ``min_nodes``: fewest ranks that train
    (fewer wait); ``max_nodes``: most ranks; ``checkpoint_dir``: where disk checkpoints go;
    ``backend``: ``"torch"`` or ``"horovod"``. Other keyword options are the fields of
    :class:`ElasticOptions` (``executor`` label, ``check_every``, ``checkpoint_every``,
    ``collective_timeout_s``, ...). The function must be importable on the workers.
    """
    unknown = set(options) - set(ElasticOptions.__dataclass_fields__)
    if unknown:
        raise ConfigError(f"malleable_app: unknown option(s) {', '.join(sorted(unknown))}")
    settings = ElasticOptions(
        checkpoint_dir=str(checkpoint_dir),
        min_nodes=min_nodes,
        max_nodes=max_nodes,
        backend=backend,
        **options,
    )

    def wrap(fn: Callable[..., Any]) -> MalleableApp:
        return MalleableApp(fn, settings)

    return wrap(function) if function is not None else wrap


__all__ = ["ElasticJob", "ElasticJobError", "ElasticOptions", "MalleableApp", "malleable_app"]
