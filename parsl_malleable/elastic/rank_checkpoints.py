"""A rank's checkpoints on disk: where a group with no state in memory resumes from, and the
saves of the commits that must outlive the rank (periodic, on leaving, at the end, with the
driver gone). A failed save is counted and reported; training goes on from the commit in memory.

The rank's other jobs (the user API, the epoch loop, signals and notices) are
:class:`~parsl_malleable.elastic.rank.RankContext`'s; this part holds the checkpoint store and
what the rank learned about it, and reaches the driver only through the ``warn`` it is given.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from parsl_malleable.elastic.checkpoint import LOCK_WAIT_S, CheckpointStore, describe_job
from parsl_malleable.elastic.messages import CheckpointPolicy
from parsl_malleable.elastic.state import ElasticState
from parsl_malleable.errors import CheckpointError

logger = logging.getLogger(__name__)

# A save that is the only copy of the job's state (its last rank leaves, training is done, the
# driver is gone) is tried again after a pause: a network file system's hiccup passes, and
# giving up costs every step since the last periodic checkpoint. Bounded, since a rank that
# leaves is often on borrowed time (a preemption's grace period).
SAVE_ATTEMPTS = 3
SAVE_RETRY_S = 0.5
# How long a periodic save waits for another save holding the checkpoint folder's lock.
PERIODIC_LOCK_WAIT_S = 2.0


class RankCheckpoints:
    """The checkpoints of one rank's job in ``directory`` (none when it is None), kept ``keep``
    deep, under the job's ``policy`` (its name, campaign and warm start); ``warn(text)`` logs a
    line here and on the driver."""

    def __init__(
        self,
        directory: str | None,
        keep: int,
        policy: CheckpointPolicy,
        warn: Callable[[str], None],
    ) -> None:
        self.job, self.campaign = policy.job, policy.campaign
        self.warm_start_from = policy.warm_start_from or None
        self.store = (
            CheckpointStore(directory, keep=keep, job=self.job, campaign=self.campaign)
            if directory
            else None
        )
        self.failed = 0  # saves that could not be written
        self.last_error: str | None = None  # why the last save was not written
        self._warn = warn

    @property
    def where(self) -> str:
        """The folder saves go to, for a log line."""
        return str(self.store.directory) if self.store is not None else "nowhere"

    # ------------------------------------------------------------------ resume

    def initial_snapshot(self, state: ElasticState, known_step: int) -> dict[str, Any]:
        """What a group formed with no state in memory starts from: the newest usable disk
        checkpoint (this job's own, else its warm start's), or the state as built. Logged; and
        when that is behind ``known_step``, a step the job had committed (its last rank's save
        failed, or every rank was lost), the driver is warned with both steps."""
        found = self._load_from_disk(state.fingerprint) if self.store is not None else None
        if found is None:
            payload, step, where = state.snapshot(), 0, "scratch"
            if self.store is not None:
                where += f" (no usable checkpoint in {self.store.directory})"
        else:
            payload, step, directory = found
            where = f"the disk checkpoint of step {step} in {directory}"
        # A warning: the one line, in the worker's stderr (the block's output file), that says
        # where this job's state came from after all its ranks were gone (a rerun, a crash).
        logger.warning("resuming from %s", where)
        if step < known_step:
            self._warn(
                f"resuming from {where}, behind step {known_step} that this job had "
                f"committed: steps {step + 1}-{known_step} are trained again"
            )
        return payload

    def newer_than_disk(self, state: ElasticState) -> bool:
        """Whether ``state``'s commit is newer than every checkpoint with a manifest."""
        if self.store is None:
            return False
        newest = self.store.newest_step()
        return newest is None or newest < state.step

    def _load_from_disk(self, fingerprint: str) -> tuple[dict[str, Any], int, str] | None:
        """``(payload, step, folder)`` of the checkpoint to resume from, None for scratch."""
        assert self.store is not None
        own = self.store
        warm_dir = self.warm_start_from
        if warm_dir and Path(warm_dir).expanduser().resolve() == own.directory:
            return self._load_from(own, fingerprint, adopt=True, otherwise="scratch")
        otherwise = f"the warm start in {warm_dir}" if warm_dir else "scratch"
        found = self._load_from(own, fingerprint, adopt=False, otherwise=otherwise)
        if found is not None or not warm_dir:
            return found
        # Opened only now: once the job has checkpoints of its own, the source may be gone.
        warm = CheckpointStore(warm_dir, job=self.job, campaign=self.campaign, create=False)
        found = self._load_from(warm, fingerprint, adopt=True, otherwise="nothing")
        if found is None:
            raise CheckpointError(
                f"warm_start_from={self.warm_start_from!r}: {warm.directory} holds no usable "
                f"checkpoint of this model to start from"
                + (": " + "; ".join(warm.skipped) if warm.skipped else "")
            )
        return found

    def _load_from(
        self, store: CheckpointStore, fingerprint: str, *, adopt: bool, otherwise: str
    ) -> tuple[dict[str, Any], int, str] | None:
        loaded = store.load_latest(fingerprint, adopt=adopt)
        point = store.last_resume
        if point is not None and point.skipped:
            # The wording of resume_step's, which the driver logs: the two must agree.
            described = point.describe()
            if loaded is None and otherwise != "scratch":
                described = otherwise + described.removeprefix("scratch")
            self._warn(f"resuming from {described}")
        if loaded is None:
            return None
        payload, step = loaded
        if store.adopted is not None:
            self._warn(
                f"warm start: this {describe_job(self.campaign, self.job)} starts from step "
                f"{step} in {store.directory} ({store.adopted}); its weights, optimizer, sampler "
                f"position, step and user fields come from there"
            )
        return payload, step, str(store.directory)

    # ------------------------------------------------------------------- saves

    def save(
        self,
        state: ElasticState,
        then: str = "training goes on from memory",
        lock_wait_s: float = LOCK_WAIT_S,
    ) -> int | None:
        """Write the last commit to disk; a failed write (full disk, quota, another save
        holding the folder's lock for ``lock_wait_s``) is logged (with what happens ``then``),
        counted and kept in :attr:`last_error`, and training goes on from the commit in
        memory. The step written, or None."""
        snap = state.committed()
        if self.store is None:
            self.last_error = "the job has no checkpoint_dir"
            return None
        if snap is None:
            return None
        try:
            self.store.save(
                snap,
                step=int(snap["step"]),
                fingerprint=state.fingerprint,
                lock_wait_s=lock_wait_s,
            )
        except CheckpointError as exc:
            self.failed += 1
            self.last_error = str(exc)
            logger.warning("checkpoint not written, %s: %s", then, exc)
            return None
        return int(snap["step"])

    def save_periodic(self, state: ElasticState) -> None:
        """A save inside a step: brief, since rank 0 saves while its peers wait in the next
        collective, and a save still holding the lock (a frozen former rank 0) must not stall
        the group past ``collective_timeout_s``. A skipped one is counted; the next replaces
        it."""
        self.save(
            state,
            then="skipped; the next periodic save replaces it",
            lock_wait_s=PERIODIC_LOCK_WAIT_S,
        )

    def save_retrying(self, state: ElasticState) -> int | None:
        """:meth:`save`, tried up to :data:`SAVE_ATTEMPTS` times: for a save that is the only
        copy of the job's state. None when every attempt failed (:attr:`last_error`)."""
        for attempt in range(1, SAVE_ATTEMPTS + 1):
            last = attempt == SAVE_ATTEMPTS
            then = "giving up" if last else f"attempt {attempt} of {SAVE_ATTEMPTS}, retrying"
            saved = self.save(state, then=then)
            if saved is not None or self.store is None:
                return saved
            if not last:
                time.sleep(SAVE_RETRY_S * attempt)
        self.last_error = f"{SAVE_ATTEMPTS} attempts failed, the last: {self.last_error}"
        return None

    def save_on_leaving(self, state: ElasticState) -> dict[str, Any]:
        """Save the commit a rank leaves with, the only copy of the job's state: retried, and a
        failure returned for the coordinator (``save_error``), not left for the next group to
        find as an older step. The fields of the rank's ``Left`` message."""
        saved = self.save_retrying(state)
        if saved is not None:
            return {"saved_step": saved}
        resumes = self._disk_resume(state)
        error = (
            f"the job's newest commit, step {state.step}, was not saved when its last rank left "
            f"({self.last_error}); the next group resumes from {resumes}"
        )
        self._warn(error)
        # save_error makes the failure part of the "left" event where the coordinator's
        # protocol declares it; the warning above reaches the driver either way.
        return {"saved_step": None, "save_error": error, "committed_step": state.step}

    def save_final(self, state: ElasticState) -> None:
        """Save the finished job's last commit; a failure is reported, the result stands."""
        if not state.has_commit or self.save_retrying(state) is not None or self.store is None:
            return
        newest = self.store.newest_step()
        ends = "holds no checkpoint" if newest is None else f"ends at step {newest}"
        self._warn(
            f"the final checkpoint, step {state.step}, was not written ({self.last_error}); "
            f"the result stands, but {self.store.directory} {ends}"
        )

    def _disk_resume(self, state: ElasticState) -> str:
        """Where a group with no state in memory would resume from disk, in resume_step's
        words (the same checks as the load)."""
        if self.store is None:
            return "scratch"
        try:
            point = self.store.resume_point(state.fingerprint)
        except CheckpointError as exc:
            return f"nothing: its checkpoints are refused ({exc})"
        if point.step is not None and not point.skipped:
            return f"step {point.step}, the newest checkpoint on disk"
        return point.describe()


__all__ = ["PERIODIC_LOCK_WAIT_S", "SAVE_ATTEMPTS", "SAVE_RETRY_S", "RankCheckpoints"]
