"""The controller's book of jobs: those running, those ended, and how each one ends.

A job is registered by ``@malleable_app`` and stays in the book's running jobs until it has
ended (completed or failed) and no agent runs a rank of it any more; it then moves to the
ended jobs. How it ends: rank 0's agent task brings the result through Parsl
(:meth:`JobBook.agent_exited`); the coordinator says the training was aborted; or the training
finished but rank 0's task did not bring the result (:meth:`JobBook.settle` then uses the copy
rank 0 sent its coordinator, or fails saying why).

The book holds no lock: :class:`~parsl_malleable.controller.live.Controller` calls it under its
own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from parsl_malleable.controller.node_agent import AgentExit, JobPayload
from parsl_malleable.elastic.coordinator import Coordinator

logger = logging.getLogger(__name__)


class _JobOptions(Protocol):
    @property
    def checkpoint_dir(self) -> str: ...


class ControlledJob(Protocol):
    """What the controller needs of a job it runs.

    :class:`parsl_malleable.app.ElasticJob` is the implementation; naming only these members
    here keeps the controller below ``app.py``, which imports it (docs/architecture.md).
    """

    @property
    def coordinator(self) -> Coordinator: ...

    @property
    def payload(self) -> JobPayload: ...

    @property
    def options(self) -> _JobOptions: ...

    @property
    def ended(self) -> bool: ...

    def complete(self, value: Any) -> None:
        """Rank 0 finished with ``value``."""

    def fail(self, message: str, traceback: str = "") -> None:
        """The job cannot finish; ``message`` says why (``traceback``: the failing rank's)."""


class JobBook:
    """The controller's jobs by name, running and ended, and what went wrong with their ranks."""

    def __init__(self) -> None:
        self.running: dict[str, ControlledJob] = {}
        self.ended: dict[str, ControlledJob] = {}
        self._agent_errors: dict[str, str] = {}  # job -> how the last agent that ran it failed
        self._rank_errors: dict[str, str] = {}  # job -> what its training function last raised
        self._rank_tracebacks: dict[str, str] = {}  # job -> the traceback of that

    def add(self, name: str, job: ControlledJob) -> None:
        self.running[name] = job

    def get(self, name: str) -> ControlledJob | None:
        """The running job ``name``, if there is one."""
        return self.running.get(name)

    def items(self) -> Iterator[tuple[str, ControlledJob]]:
        """The running jobs (a copy: the caller may end some meanwhile)."""
        return iter(list(self.running.items()))

    def catalogue(self) -> dict[str, JobPayload]:
        """What an agent sent now carries: the payload of each job not yet ended."""
        return {name: job.payload for name, job in self.running.items() if not job.ended}

    def fail_all(self, message: str) -> None:
        """Fail every running job with ``message``."""
        for job in list(self.running.values()):
            job.fail(message)

    def rank_failed(self, name: str, reason: str, traceback: str = "") -> None:
        """The training function of a rank of ``name`` raised (``reason``, ``traceback``):
        the job is aborted unless it already ended or finished training (then
        :meth:`settle` says what the function raised after training)."""
        self._rank_errors[name] = reason
        self._rank_tracebacks[name] = traceback
        job = self.running.get(name)
        if job is not None:
            # A rank that failed before it reached its coordinator (its function does not
            # import on the worker) told nobody: without this the job would wait forever.
            job.coordinator.abort(f"a rank failed: {reason}", traceback=traceback)

    def agent_failed(self, name: str, error: BaseException) -> None:
        """The task of an agent that ran ranks of ``name`` failed with ``error``."""
        self._agent_errors[name] = f"{type(error).__name__}: {error}"

    def agent_exited(self, ended: AgentExit) -> None:
        """An agent task returned: if its rank 0 finished a job, complete the job."""
        if ended.reason == "finished" and ended.outcome is not None and ended.job:
            job = self.running.get(ended.job)
            if job is not None:
                job.complete(ended.outcome.value)
        elif ended.reason == "lost":
            logger.info("agent %s lost the controller: %s", ended.agent_id, ended.message)

    def settle(self, name: str, job: ControlledJob, rank0_pending: Callable[[str], bool]) -> bool:
        """End ``job`` if its coordinator says it is over; whether it has ended.

        ``rank0_pending(name)``: whether an agent that ran ranks of it may still bring rank 0's
        result (then a finished training waits for it).
        """
        outcome = job.coordinator.outcome
        if outcome == "aborted" and not job.ended:
            job.fail(
                job.coordinator.abort_message or "training aborted",
                traceback=job.coordinator.abort_traceback,
            )
        if outcome == "done" and not job.ended and not rank0_pending(name):
            self._finish_without_rank0(name, job)
        return job.ended

    def retire(self, name: str) -> ControlledJob:
        """Move the ended job ``name`` (no rank of it runs any more) to the ended jobs, its
        coordinator closed."""
        job = self.running[name]
        job.coordinator.close()
        self.ended[name] = self.running.pop(name)
        return job

    def _finish_without_rank0(self, name: str, job: ControlledJob) -> None:
        """Training finished, yet no agent brought rank 0's value: fail if the training function
        raised after training; else (its worker was lost, e.g. the block ended between
        ``finish`` and the task's return) use the copy rank 0 sent the coordinator with
        ``finish``, or fail saying where the final checkpoint is."""
        raised = self._rank_errors.get(name)
        if raised is not None:
            # Code after ``ctx.run`` failed: the copy is the loop's value, not the function's.
            job.fail(
                f"training finished, but the training function then raised: {raised}; the "
                f"final checkpoint is in {job.options.checkpoint_dir}",
                traceback=self._rank_tracebacks.get(name, ""),
            )
            return
        why = self._agent_errors.get(name, "its worker was lost")
        copy = job.coordinator.result
        if copy is not None:
            job.coordinator.warn(
                f"the task of rank 0 failed after training finished ({why}); the result is "
                "the copy rank 0 sent its coordinator (as JSON: tuples became lists)"
            )
            job.complete(copy[0])
            return
        job.fail(
            "training finished but the task of rank 0 failed before returning its "
            f"result ({why}); the result does not travel as JSON, so only Parsl could bring "
            f"it; the final checkpoint is in {job.options.checkpoint_dir}"
        )


__all__ = ["ControlledJob", "JobBook"]
