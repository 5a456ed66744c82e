"""``@malleable_app``: a training function becomes a Parsl app that survives resizes.

Calling the decorated function returns an :class:`~parsl.dataflow.futures.AppFuture` whose result
is the training function's return value on rank 0 of the group that finished training, however
many times the job grew, shrank or stopped on the way. Behind it:

* each call registers a job with the executor's :class:`~parsl_malleable.controller.Controller`
  (one per executor, in the calling process), which decides with the allocator which nodes the
  job gets, and enforces it through agents on the workers;
* the job's membership :class:`~parsl_malleable.elastic.coordinator.Coordinator` and the
  backend's rendezvous service live in the calling process too, so neither lives on a block that
  can vanish;
* ranks join at the next commit, leave at a commit when their node goes to another job or their
  block ends, and roll back to the last commit when a peer is lost; with no rank left the job
  waits, and the next ranks resume from the last disk checkpoint (the last rank saves its commit
  first; if that fails, after retries, :attr:`ElasticJob.warnings` says so and which step the
  next group resumes from).

Disk checkpoints are bound to their job: the ``name`` given to :meth:`MalleableApp.submit` (else
the training function's module and name) and the ``campaign`` option. A checkpoint of another
job found in ``checkpoint_dir`` is refused, naming that job; starting from one is explicit, with
``warm_start_from`` (see :class:`~parsl_malleable.elastic.checkpoint.CheckpointStore` for the
authentication of checkpoints and its threat model).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Annotated, Any

import parsl
from parsl.app.app import python_app
from parsl.dataflow.futures import AppFuture
from parsl.executors import HighThroughputExecutor, ThreadPoolExecutor
from pydantic import Field, StrictStr

from parsl_malleable.allocate.curve import ScalingCurve
from parsl_malleable.controller.functions import function_reference
from parsl_malleable.controller.live import Controller, controller_for
from parsl_malleable.controller.model import JOB_MAX_NODES, JOB_MIN_NODES, JOB_PRIORITY, JobSpec
from parsl_malleable.controller.node_agent import JobPayload
from parsl_malleable.elastic.backend_registry import BACKENDS, get_rendezvous_host
from parsl_malleable.elastic.coordinator import Coordinator
from parsl_malleable.elastic.messages import CheckpointPolicy
from parsl_malleable.elastic.metric_book import MetricChanges
from parsl_malleable.elastic.rank import RankSettings
from parsl_malleable.elastic.settings import MEMBERSHIP_DEFAULTS, RANK_DEFAULTS, BatchMeaning
from parsl_malleable.errors import ConfigError, MalleableError
from parsl_malleable.inputs import Number, WholeCount, boundary

logger = logging.getLogger(__name__)

CONTROLLER_EXECUTOR = "_malleable_controller"
# Each unfinished job's AppFuture waits on one thread of this executor (a blocked thread
# costs little); the cap only bounds how many jobs can be in flight at once.
CONTROLLER_THREADS = 1024
_job_numbers = itertools.count(1)


class ElasticJobError(MalleableError):
    """Training failed on a rank (user code raised) or the job could not run.

    ``traceback``: where a training function raised, its formatted traceback as the rank saw
    it (the user's file and line; the last
    :data:`~parsl_malleable.elastic.settings.TRACEBACK_CHARS` characters), else "".
    """

    def __init__(self, message: str, traceback: str = "") -> None:
        super().__init__(message)
        self.traceback = traceback


@boundary(ConfigError)
class ElasticOptions:
    """Settings of one malleable app (see :func:`malleable_app` for their meaning), checked
    when the app is made.

    ``campaign``: the campaign the job belongs to, recorded in its checkpoints and part of the
    identity they are bound to (with the job's name).

    ``warm_start_from``: a checkpoint folder to start from while this job has no checkpoint of
    its own: another job's ``checkpoint_dir``, or this job's own when it holds another job's
    checkpoint. Its newest checkpoint for this model is loaded whole (weights,
    optimizer, sampler position, step and user fields), whichever job wrote it, and the warm
    start is listed in :attr:`ElasticJob.warnings`. It is still checked: the model fingerprint,
    the payload's sha256, the files' owner and modes, and the manifest's HMAC wherever the
    folder's key is there (one whose key is missing is loaded unauthenticated, and the
    warning says so). A folder without any such checkpoint fails the
    job. Once the job has saved checkpoints of its own, it resumes from those.

    ``batch``: what a sampler's ``batch_size`` means where the training function does not say
    (``ElasticSampler``/``ElasticDistributedSampler`` made without ``batch=``). ``"global"``
    (the default): the batch of one optimizer step, split over the ranks, whatever their number,
    with no learning-rate scaling: a config's result does not depend on how many nodes it got.
    ``"per_rank"``: each rank's batch, so the global batch grows with the world size and the
    learning rate is scaled with it (:func:`~parsl_malleable.elastic.state.linear_lr_scaling`,
    the default resize hook then): the behaviour before issue #35.
    """

    checkpoint_dir: Annotated[StrictStr, Field(min_length=1)]
    min_nodes: Annotated[WholeCount, Field(ge=1)] = JOB_MIN_NODES
    max_nodes: WholeCount = JOB_MAX_NODES
    backend: StrictStr = RANK_DEFAULTS.backend
    executor: StrictStr | None = None
    controller_host: StrictStr | None = None
    check_every: Annotated[WholeCount, Field(ge=1)] = RANK_DEFAULTS.check_every
    checkpoint_every: Annotated[WholeCount, Field(ge=0)] = RANK_DEFAULTS.checkpoint_every
    keep_checkpoints: Annotated[WholeCount, Field(ge=1)] = RANK_DEFAULTS.keep_checkpoints
    collective_timeout_s: Annotated[Number, Field(gt=0)] = RANK_DEFAULTS.collective_timeout_s
    heartbeat_interval_s: Annotated[Number, Field(gt=0)] = RANK_DEFAULTS.heartbeat_interval_s
    heartbeat_timeout_s: Annotated[Number, Field(gt=0)] = MEMBERSHIP_DEFAULTS.heartbeat_timeout_s
    settle_s: Annotated[Number, Field(ge=0)] = MEMBERSHIP_DEFAULTS.settle_s
    reform_timeout_s: Annotated[Number, Field(gt=0)] = MEMBERSHIP_DEFAULTS.reform_timeout_s
    torch_threads: Annotated[WholeCount, Field(ge=1)] | None = RANK_DEFAULTS.torch_threads
    priority: Annotated[Number, Field(gt=0)] = JOB_PRIORITY
    curve: ScalingCurve | None = None
    campaign: StrictStr | None = None
    warm_start_from: Annotated[StrictStr, Field(min_length=1)] | None = None
    batch: BatchMeaning = RANK_DEFAULTS.batch

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ConfigError(f"backend must be one of {', '.join(BACKENDS)}; got {self.backend!r}")
        if self.min_nodes > self.max_nodes:
            raise ConfigError(
                f"need 1 <= min_nodes <= max_nodes; got min_nodes={self.min_nodes}, "
                f"max_nodes={self.max_nodes}"
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
            batch=self.batch,
        )

    def checkpoint_policy(self, job: str) -> CheckpointPolicy:
        """What the ranks of ``job`` are told about its checkpoints at registration: the
        identity they are bound to and the folder a warm start may come from."""
        return CheckpointPolicy(
            job=job, campaign=self.campaign or "", warm_start_from=self.warm_start_from
        )


def _await_job(job: ElasticJob) -> Any:
    return job.wait()


class ElasticJob:
    """One call of a malleable app: its future, its coordinator, and controls.

    ``future`` resolves with rank 0's return value; ``coordinator`` is the job's membership
    authority; :meth:`drain_blocks` makes ranks on those blocks leave at their next commit
    (nothing new goes there); :meth:`cancel` stops training. ``checkpoint_job`` names the job
    in its checkpoints (default: ``name``).
    """

    def __init__(
        self,
        name: str,
        payload: JobPayload,
        options: ElasticOptions,
        controller: Controller,
        *,
        checkpoint_job: str | None = None,
    ) -> None:
        self.name = name
        self.options = options
        self.payload = payload
        self.controller = controller
        per_node = controller.ranks_per_node
        host = options.controller_host or controller.host
        self.coordinator = Coordinator(
            get_rendezvous_host(options.backend, host=host),
            min_nodes=options.min_nodes * per_node,
            max_nodes=options.max_nodes * per_node,
            host=host,
            settle_s=options.settle_s,
            reform_timeout_s=options.reform_timeout_s,
            heartbeat_timeout_s=options.heartbeat_timeout_s,
            token=controller.job_token(name),
            checkpoint_policy=options.checkpoint_policy(checkpoint_job or name),
        )
        self.future: AppFuture | None = None
        self._done = threading.Event()
        self._value: Any = None
        self._error: str | None = None
        self._traceback = ""
        self._dfk = parsl.dfk()

    @property
    def warnings(self) -> list[str]:
        """What the job's ranks reported that did not stop it, oldest first. Also logged by the
        driver. Among them: newer disk checkpoints skipped (damaged, or failing
        authentication) when it resumed; a warm start, and from which job and step; a final
        save that failed when the last rank left (after retries), and a resume from disk that is
        behind a step the job had committed, with both steps; a final checkpoint not written
        after training."""
        return self.coordinator.warnings()

    def metrics(self, as_frame: bool = False) -> Any:
        """What the job's lead rank reported with ``ctx.report``: one dict per step, by step
        (``step``, ``time``, then the metrics), or with ``as_frame`` a pandas DataFrame of the
        same rows. After a rollback or a resume, each step holds the report of the timeline
        that was committed (:mod:`~parsl_malleable.elastic.metric_book`); the newest 5,000 steps
        are kept here (a campaign's state keeps all)."""
        rows = [record.as_dict() for record in self.coordinator.metric_records()]
        if not as_frame:
            return rows
        import pandas as pd

        return pd.DataFrame(rows, columns=None if rows else ["step", "time"])

    def take_metrics(self) -> MetricChanges:
        """The reports changed since the last call and the step above which stored ones were
        dropped (a rollback's or resume's start): for the one consumer that persists them."""
        return self.coordinator.take_metrics()

    def metric_counts(self) -> dict[str, int]:
        """Reports accepted, stale, dropped by a rollback or resume, evicted, non-finite values
        (counted, never a best), kept."""
        return self.coordinator.metric_counts()

    # ------------------------------------------------------------ controls

    def drain_blocks(self, block_ids: Iterable[str]) -> list[str]:
        """Ranks on these Parsl blocks leave at their next commit; nothing new goes there.

        Blocks are shared by every job of the executor, so this drains them for all jobs.
        """
        blocks = [str(b) for b in block_ids]
        self.controller.drain_blocks(blocks, reason="drained by the user")
        return self.coordinator.drain(block_ids=blocks)

    def cancel(self, reason: str = "cancelled by the user") -> None:
        """Stop training: ranks exit at their next membership check; the future raises."""
        self.coordinator.abort(reason)

    @property
    def ended(self) -> bool:
        """Whether the job finished or failed."""
        return self._done.is_set()

    # ------------------------------------------------------ called by the controller

    def complete(self, value: Any) -> None:
        """Rank 0 finished with ``value``."""
        if not self._done.is_set():
            self._value = value
            self._done.set()

    def fail(self, message: str, traceback: str = "") -> None:
        """The job cannot finish: its future raises :class:`ElasticJobError` with ``message``
        (and ``traceback``, the failing rank's, where a training function raised)."""
        if not self._done.is_set():
            self._error = message
            self._traceback = traceback
            self.coordinator.abort(message)
            self._done.set()

    def wait(self) -> Any:
        """Block until the job ends; its value, or :class:`ElasticJobError`."""
        while not self._done.wait(0.25):
            if getattr(self._dfk, "cleanup_called", False):
                # The DFK waits for its thread executor's tasks: end instead of blocking it.
                self.fail("the Parsl DataFlowKernel is shutting down")
        if self._error is not None:
            raise ElasticJobError(self._error, traceback=self._traceback)
        return self._value


class MalleableApp:
    """A training function wrapped by :func:`malleable_app`."""

    def __init__(self, fn: Callable[..., Any], options: ElasticOptions) -> None:
        self.fn = fn
        self.options = options
        functools.update_wrapper(self, fn)

    is_malleable_app = True

    def submit(self, *args: Any, name: str | None = None, **kwargs: Any) -> ElasticJob:
        """Start a job and return its :class:`ElasticJob` (``job.future`` is the AppFuture).

        ``name`` names the job in the controller's decisions and logs (default: the function's
        name and a number) and is the job its disk checkpoints are bound to; without it they are
        bound to the training function (module and name), so a rerun of the same call resumes
        and another function's checkpoints in the same folder are refused.
        """
        dfk = parsl.dfk()
        executor = _find_executor(dfk, self.options.executor)
        if CONTROLLER_EXECUTOR not in dfk.executors:
            dfk.add_executors(
                [ThreadPoolExecutor(label=CONTROLLER_EXECUTOR, max_threads=CONTROLLER_THREADS)]
            )
        controller = controller_for(executor)
        # Not the counted default name: the same call submitted again (a notebook cell run
        # twice) is the same job for its checkpoints.
        checkpoint_job = name or _function_name(self.fn)
        name = name or f"{self.fn.__name__}-{next(_job_numbers)}"
        payload = JobPayload(
            function_reference(self.fn), args, kwargs, self.options.rank_settings()
        )
        job = ElasticJob(name, payload, self.options, controller, checkpoint_job=checkpoint_job)
        spec = JobSpec(
            name,
            min_nodes=self.options.min_nodes,
            max_nodes=self.options.max_nodes,
            priority=self.options.priority,
            curve=self.options.curve,
        )
        controller.register(job, spec)
        job.future = python_app(_await_job, executors=[CONTROLLER_EXECUTOR])(job)
        return job

    def __call__(self, *args: Any, **kwargs: Any) -> AppFuture:
        """Start a job; the AppFuture resolves with rank 0's return value."""
        future = self.submit(*args, **kwargs).future
        assert future is not None
        return future


def _function_name(fn: Callable[..., Any]) -> str:
    """``module.qualname`` of ``fn``: what an unnamed job's checkpoints are bound to."""
    module = getattr(fn, "__module__", None) or "?"
    return f"{module}.{getattr(fn, '__qualname__', getattr(fn, '__name__', '?'))}"


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
    min_nodes: int = JOB_MIN_NODES,
    max_nodes: int = JOB_MAX_NODES,
    backend: str = RANK_DEFAULTS.backend,
    **options: Any,
) -> Any:
    """Turn ``function(ctx, *args, **kwargs)`` into an elastic Parsl app.

    ``ctx`` is a :class:`~parsl_malleable.elastic.rank.RankContext`; the function builds its
    model and state and returns ``ctx.run(loop, state)``. ``min_nodes``: fewest ranks that train
    (fewer wait); ``max_nodes``: most ranks; ``checkpoint_dir``: where disk checkpoints go;
    ``backend``: ``"torch"`` or ``"horovod"``. Other keyword options are the fields of
    :class:`ElasticOptions` (``executor`` label, ``check_every``, ``checkpoint_every``,
    ``collective_timeout_s``, ``campaign``, ``warm_start_from`` to start from another job's
    checkpoints, ``batch="per_rank"`` for a global batch and learning rate that grow with the
    world size instead of the default fixed global batch, ...). The function must be importable
    on the workers.
    """
    unknown = set(options) - {f.name for f in dataclasses.fields(ElasticOptions)}
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
