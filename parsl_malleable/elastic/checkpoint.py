"""Disk checkpoints of training state: atomic, authenticated, bound to their job, private,
bounded, safe to load.

A checkpoint is two files in one private directory:

* ``ckpt-<step>.pt``: the payload, written with :func:`torch.save` inside a small envelope that
  repeats the step, model fingerprint and job, so the file describes itself;
* ``ckpt-<step>.json``: the manifest: step, fingerprint, size and sha256 of the ``.pt`` file,
  the ``campaign`` and ``job`` it belongs to, the ``key_id`` of the key that signed it, and
  ``mac``, an HMAC-SHA256 of all of that. It is written *after* the payload, so a manifest marks
  a checkpoint as complete.

Commit protocol: the manifest is the commit point, and the payload is verified against it. Both
files are written whole to temporary files in the same directory and fsynced; then the payload is
renamed to its final name, the manifest after it (:func:`os.replace`), and the directory is
fsynced. A crash at any moment leaves the old checkpoints as they were plus, at worst, temporary
files or a payload without its manifest: an *orphan*, never loaded, never counted. Every save
holds an exclusive lock (``flock`` on :data:`LOCK_FILE_NAME` in the directory), so an orphan is
told from a save in progress without guessing from ages: whoever holds the lock removes the
orphans and the temporary files of cut saves (when a writable store opens and before each save;
counted in :attr:`CheckpointStore.orphans_removed` and logged). A save of a step that is already
committed and intact keeps that checkpoint instead of replacing it, so no moment exists in which
a committed step is unreadable. A write that fails (a full disk, a quota) raises
:class:`CheckpointError` and leaves every checkpoint already there as it was.

Where a job resumes: :func:`resume_step` (and :meth:`CheckpointStore.resume_point`) tell the
step :meth:`CheckpointStore.load_latest` would load, by the same checks, falling back past the
damaged ones, and name those; the rank's messages and the driver's come from it, so they agree.

Threat model (what decides trust, the keys, the MACs and the owner and mode checks, is
:mod:`~parsl_malleable.elastic.checkpoint_trust`; this module stores). The manifest's ``mac`` is
keyed with a per-job key: HMAC-SHA256 (via :func:`~parsl_malleable.transport.wire.derive_secret`)
of the folder's *master key* and the job's identity (campaign, job). The master key is 32
random bytes in ``.parsl-malleable-checkpoint.key`` in the checkpoint directory's **parent** (mode
``0600``, created once, atomically, by the first save), so that

* whoever can write the checkpoint directory but cannot read the key (another user, a process
  with write access to that folder only) cannot make forged weights load by recomputing the
  manifest: a plain checksum would be recomputed as easily as the forgery was made;
* the key is not inside the folder it vouches for: replacing the key along with the checkpoints
  needs write access to the parent too, and on file systems where ownership says nothing (NFS
  with ``all_squash``, FUSE mounts that show every file as the mounter's) the folder alone
  still cannot be turned against its reader; a folder copied elsewhere (``cp -r``) does not carry
  its key, so its checkpoints do not pass there for that folder's own;
* one key file serves every checkpoint folder beside it (the jobs of a campaign), and each job
  signs with its own derived key: a checkpoint of job A is *authenticated as A's*, so it is
  refused in job B's folder with a message naming A, whatever its manifest claims.

Loading refuses (:class:`CheckpointError`, naming the file and why) a file not owned by this
user, writable by group or others, not a regular file or a symbolic link, and a key file that
group or others can read at all; it refuses a checkpoint of another job, of another model, and
one in any manifest format but :data:`FORMAT` (no reader is kept for format 1, whose plain
sha256 anyone could recompute). It
skips, with a warning naming the file, a checkpoint whose manifest fails authentication or whose
size or sha256 disagree with it (damage, forgery), and tries the next older one. Starting from a
checkpoint this store cannot vouch for as the job's own is explicit: ``load_latest(adopt=True)``
(``warm_start_from`` of a malleable app) takes another job's, or one whose key is
missing, and says so (:attr:`CheckpointStore.adopted`, logged, and counted in
:attr:`CheckpointStore.unauthenticated_loads` when nothing authenticated it). Whatever is loaded
is unpickled with ``torch.load(weights_only=True)``, which refuses anything but tensors and plain
Python values: a checkpoint file cannot run code, whoever wrote it. Someone running as the same
user can do anything this user can, the key included; that is out of scope.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import hmac
import io
import json
import logging
import os
import pickle
import re
import shutil
import socket
import stat
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import torch

from parsl_malleable.elastic.checkpoint_trust import (
    KEY_FILE_NAME,
    TMP_PREFIX,
    CheckpointTrust,
    Unvouched,
    describe_job,
    fsync_dir,
    read_owned,
    read_regular,
)
from parsl_malleable.elastic.safe_state import check_loadable
from parsl_malleable.elastic.settings import RANK_DEFAULTS
from parsl_malleable.errors import CheckpointError

__all__ = [
    "FORMAT",
    "KEY_FILE_NAME",
    "LOCK_FILE_NAME",
    "CheckpointError",
    "CheckpointInfo",
    "CheckpointStore",
    "ResumePoint",
    "describe_job",
    "model_fingerprint",
    "resume_step",
]

log = logging.getLogger(__name__)

FORMAT = "parsl-malleable-checkpoint/2"
_NAME = re.compile(r"^ckpt-(\d{12})\.(pt|json)$")
LOCK_FILE_NAME = ".parsl-malleable-checkpoint.lock"
# How long a save, or a resume's reading, waits for a save in progress (a dying rank finishing
# its last checkpoint within its grace) before giving up.
LOCK_WAIT_S = 60.0
# A temporary file of a writer on another host is removed only this old: its pid cannot be
# checked from here, and a file system without working locks must not lose a save in progress.
FOREIGN_TEMP_AGE_S = 3600.0
_Paths = list[Path]
_Names = list[str]  # (the class's own ``list`` method hides the builtin in its annotations)


def model_fingerprint(model: torch.nn.Module) -> str:
    """Hash of the names, shapes and dtypes of ``model``'s state (parameters and buffers).

    Two models with the same fingerprint can load each other's ``state_dict``. Values are not
    hashed, so the fingerprint stays the same while the model trains. A wrapper exposing the real
    model as ``.module`` (``DistributedDataParallel``, ``DataParallel``) is unwrapped first.
    """
    if isinstance(
        model, torch.nn.parallel.DistributedDataParallel | torch.nn.parallel.DataParallel
    ):
        model = model.module
    digest = hashlib.sha256()
    for name, value in model.state_dict().items():
        shape = "x".join(str(d) for d in value.shape) if isinstance(value, torch.Tensor) else "-"
        dtype = str(value.dtype) if isinstance(value, torch.Tensor) else type(value).__name__
        digest.update(f"{name}:{shape}:{dtype};".encode())
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class CheckpointInfo:
    """What the directory says about one checkpoint, without reading its payload.

    The fields come from the manifest *as written*, not yet authenticated (loading does that).
    ``fingerprint``, ``sha256`` and ``size`` are ``None`` when the manifest is missing or
    unreadable (a save that crashed before committing, or damage); ``format`` is
    :data:`FORMAT` (another format is listed, and refused when loaded) or ``None``;
    ``campaign`` and ``job`` name the job the manifest says it belongs to.
    """

    path: Path
    step: int
    fingerprint: str | None
    sha256: str | None
    size: int | None
    created: float | None
    format: str | None = None
    campaign: str | None = None
    job: str | None = None
    has_manifest: bool = True

    @property
    def committed(self) -> bool:
        """True when a readable manifest records the checksum of this checkpoint."""
        return self.sha256 is not None

    @property
    def orphan(self) -> bool:
        """A payload without a manifest: a save cut before its commit, never a checkpoint."""
        return not self.has_manifest


@dataclass(frozen=True)
class ResumePoint:
    """Where a job resumes: ``step`` (None: from scratch), in ``directory``, and the newer
    checkpoints passed over (``skipped``: ``"name: why"``, newest first) as damaged or failing
    authentication. ``adopted`` says why a checkpoint that is not the job's own was taken (a
    warm start). :meth:`describe` is the one wording every message about it uses."""

    directory: Path
    step: int | None
    skipped: tuple[str, ...] = ()
    adopted: str | None = None

    @property
    def damaged(self) -> int:
        """How many newer checkpoints were passed over."""
        return len(self.skipped)

    def describe(self) -> str:
        """``step N`` or ``scratch``, and the damaged checkpoints skipped, with why."""
        start = "scratch" if self.step is None else f"step {self.step}"
        if not self.skipped:
            return start
        return (
            f"{start}: skipped {self.damaged} damaged checkpoint(s) in {self.directory}: "
            + "; ".join(self.skipped)
        )


class _Skip(Exception):
    """This checkpoint is damaged or unauthenticated: pass over it to the next older one."""


class _HashingWriter:
    """File-like object that hashes and counts the bytes ``torch.save`` writes through it, and
    keeps the error of a write that failed: torch reports it only as "unexpected pos"."""

    def __init__(self, file: BinaryIO) -> None:
        self._file = file
        self.digest = hashlib.sha256()
        self.size = 0
        self.error: OSError | None = None

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        self.size += len(data)
        try:
            return self._file.write(data)
        except OSError as exc:
            self.error = exc
            raise

    def flush(self) -> None:
        self._file.flush()


class CheckpointStore:
    """Checkpoints of one training job in one directory, newest ``keep`` retained.

    ``job`` and ``campaign`` are the identity the checkpoints are bound to (recorded in each
    manifest and part of its key): a checkpoint of another identity is refused by
    :meth:`load_latest` unless it is adopted explicitly. ``key_file`` is the master key (default
    :data:`KEY_FILE_NAME` in the directory's parent; see the module's threat model). With
    ``create=False`` the directory must exist and is left as it is (a folder only read from, such
    as a warm start's source); otherwise it is created with mode ``0o700`` (an existing one is
    narrowed to it). Every file is ``0o600``: checkpoints hold a model and whatever user fields
    the job saved. One writer at a time is assumed (the elastic runtime saves from rank 0); any
    number of readers is safe.
    """

    def __init__(
        self,
        directory: str | Path,
        keep: int = RANK_DEFAULTS.keep_checkpoints,
        *,
        job: str = "",
        campaign: str = "",
        key_file: str | Path | None = None,
        create: bool = True,
    ) -> None:
        if not isinstance(keep, int) or isinstance(keep, bool) or keep < 1:
            raise ValueError(f"CheckpointStore keep must be an integer >= 1, got {keep!r}")
        if not isinstance(job, str) or not isinstance(campaign, str):
            raise ValueError(f"job and campaign must be strings, got {job!r} and {campaign!r}")
        self.directory = Path(directory).expanduser().resolve()
        self.keep = keep
        self.job = job
        self.campaign = campaign
        self.key_file = (
            Path(key_file).expanduser().resolve()
            if key_file is not None
            else self.directory.parent / KEY_FILE_NAME
        )
        self.skipped: list[str] = []  # what the last load_latest passed over, and why
        # Why the last load_latest took a checkpoint that is not this job's own (None: it was).
        self.adopted: str | None = None
        self.unauthenticated_loads = 0  # adopted checkpoints that nothing authenticated
        self.orphans_removed: list[str] = []  # files of cut saves this store removed
        # Where the last load_latest / resume_point found the job resumes (None: not asked).
        self.last_resume: ResumePoint | None = None
        self.trust = CheckpointTrust(self.directory, self.key_file, campaign, job)
        self._open_directory(create)
        if create:
            self.remove_orphans()

    def _open_directory(self, create: bool) -> None:
        try:
            if create:
                self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            info = self.directory.stat()
        except FileNotFoundError as exc:
            raise CheckpointError(f"checkpoint directory {self.directory} does not exist") from exc
        except OSError as exc:
            raise CheckpointError(
                f"cannot create checkpoint directory {self.directory}: {exc}"
            ) from exc
        if not stat.S_ISDIR(info.st_mode):
            raise CheckpointError(f"checkpoint directory {self.directory} is not a directory")
        if info.st_uid != os.geteuid():
            # Its owner could read the checkpoints or swap them for others; narrowing its
            # permissions is not ours to do (and fails with EPERM for anyone but root).
            raise CheckpointError(
                f"checkpoint directory {self.directory} belongs to uid {info.st_uid}, not to "
                f"this user (uid {os.geteuid()}): its owner could read or replace the "
                f"checkpoints. Give a directory you own as checkpoint_dir."
            )
        if not create:
            return
        try:
            os.chmod(self.directory, 0o700)
        except OSError as exc:
            raise CheckpointError(
                f"cannot make checkpoint directory {self.directory} private: {exc}"
            ) from exc

    # ------------------------------------------------------------------ writing

    def save(
        self,
        payload: dict[str, Any],
        *,
        step: int,
        fingerprint: str,
        lock_wait_s: float = LOCK_WAIT_S,
    ) -> Path:
        """Write ``payload`` as the checkpoint of ``step`` and return the path of its ``.pt`` file.

        ``payload`` may hold nested dicts, lists, tuples and sets of tensors and plain values
        (``state_dict()`` of models, optimizers and schedulers qualify). Anything else raises
        :class:`CheckpointError` naming where it sits, because it could not be loaded back with
        ``weights_only=True``. Saving a step that already exists replaces it. After the write,
        all but the newest ``keep`` committed checkpoints are deleted. A write that fails
        (``ENOSPC``, a quota, an I/O error, a key file that cannot be made) raises
        :class:`CheckpointError` saying so, and every checkpoint already there, this step's
        included, stays loadable. The manifest is signed with this job's key. ``lock_wait_s``:
        how long to wait for another save in progress before raising (a periodic save, which
        the next one replaces, waits less than a rank's last copy of the state).
        """
        if not isinstance(payload, dict):
            raise CheckpointError(
                f"checkpoint payload must be a dict, got {type(payload).__name__}"
            )
        if not isinstance(step, int) or isinstance(step, bool) or not 0 <= step < 10**12:
            raise CheckpointError(f"checkpoint step must be an integer in [0, 1e12), got {step!r}")
        if not isinstance(fingerprint, str) or not fingerprint:
            raise CheckpointError(
                f"checkpoint fingerprint must be a non-empty string: {fingerprint!r}"
            )
        check_loadable(payload, "payload", CheckpointError)
        master = self.trust.master_key(create=True)
        assert master is not None
        with self._lock(exclusive=True, wait_s=lock_wait_s) as lock:
            if lock == "busy":
                raise CheckpointError(
                    f"could not write the checkpoint of step {step} to {self.directory}: "
                    f"another save held its lock {self.directory / LOCK_FILE_NAME} for more "
                    f"than {lock_wait_s:g} s"
                )
            if lock == "held":
                self._sweep()
            else:  # no working locks here: only what is provably stale goes
                self._remove_stale_temp_files()
            pt_path = self._commit(payload, step, fingerprint, master)
            self._prune()
        return pt_path

    def _commit(self, payload: dict[str, Any], step: int, fingerprint: str, master: str) -> Path:
        """Write and commit checkpoint ``step`` (the lock is held); its payload's path."""
        pt_path, manifest_path = self._paths(step)
        if self._intact(step, fingerprint):
            # The same step of the same job is the same commit: replacing it would open a
            # moment in which this step is unreadable, for nothing.
            log.debug("checkpoint %s is committed and intact; kept", pt_path)
            return pt_path
        envelope = {
            "format": FORMAT,
            "step": step,
            "fingerprint": fingerprint,
            "campaign": self.campaign,
            "job": self.job,
            "payload": payload,
        }
        staged: list[Path] = []
        writer: _HashingWriter | None = None
        try:
            with self._staged(staged) as file:
                writer = _HashingWriter(file)
                # torch.save only calls write/flush on it; its stubs ask for a full IO[bytes]
                torch.save(envelope, writer)  # type: ignore[arg-type]
            manifest: dict[str, Any] = {
                "format": FORMAT,
                "step": step,
                "fingerprint": fingerprint,
                "file": pt_path.name,
                "size": writer.size,
                "sha256": writer.digest.hexdigest(),
                "created": time.time(),
                "campaign": self.campaign,
                "job": self.job,
            }
            self.trust.sign(manifest, master)
            with self._staged(staged) as file:
                file.write(json.dumps(manifest, indent=1).encode())
            # Both files are durable: commit. A manifest already there for this step (damaged,
            # or another job's) would vouch for the wrong payload between the renames; it goes
            # first, and the manifest's rename is the commit point.
            with contextlib.suppress(FileNotFoundError):
                manifest_path.unlink()
            os.replace(staged[0], pt_path)
            os.replace(staged[1], manifest_path)
        except (OSError, RuntimeError) as exc:
            for tmp in staged:
                with contextlib.suppress(OSError):
                    tmp.unlink()
            # torch's zip writer turns a failed write into RuntimeError("... unexpected pos").
            cause = writer.error if writer is not None and writer.error is not None else exc
            raise self._write_failed(step, cause) from exc
        fsync_dir(self.directory)
        return pt_path

    def _intact(self, step: int, fingerprint: str) -> bool:
        """Whether checkpoint ``step`` is this job's own and passes every check of a load."""
        pt_path, manifest_path = self._paths(step)
        if not (pt_path.exists() and manifest_path.exists()):
            return False
        try:
            self._verify(CheckpointInfo(pt_path, step, None, None, None, None), fingerprint, "cpu")
        except (_Skip, CheckpointError):
            return False
        return True

    def _write_failed(self, step: int, exc: BaseException) -> CheckpointError:
        try:
            free = f"{shutil.disk_usage(self.directory).free:,} bytes free"
        except OSError:
            free = "free space unknown"
        committed = [info.step for info in self.list() if info.committed]
        kept = f"the newest checkpoint kept is step {committed[-1]}" if committed else "none kept"
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return CheckpointError(
            f"could not write the checkpoint of step {step} to {self.directory} ({free}): "
            f"{reason}; {kept}"
        )

    # ------------------------------------------------------------------ reading

    def list(self) -> list[CheckpointInfo]:
        """All checkpoints in the directory, oldest step first (manifests read, not
        authenticated; payloads not read)."""
        infos = []
        for step in sorted(self._steps()):
            pt_path, manifest_path = self._paths(step)
            if not pt_path.exists():
                continue
            if not os.path.lexists(manifest_path):
                infos.append(
                    CheckpointInfo(pt_path, step, None, None, None, None, has_manifest=False)
                )
                continue
            infos.append(_info(pt_path, step, _read_manifest(manifest_path)))
        return infos

    def newest_step(self) -> int | None:
        """Step of the newest checkpoint with a manifest (not authenticated), None if none."""
        steps = [info.step for info in self.list() if info.committed]
        return steps[-1] if steps else None

    def load_latest(
        self,
        fingerprint: str,
        *,
        map_location: str | torch.device = "cpu",
        adopt: bool = False,
    ) -> tuple[dict[str, Any], int] | None:
        """Return ``(payload, step)`` of the newest intact checkpoint, or ``None`` if there is none.

        Checkpoints whose manifest is damaged or fails authentication, whose size or sha256
        disagree with it, or that fail to unpickle, are skipped with a warning naming the file,
        and the next older one is tried; :attr:`skipped` says which and why, for the caller to
        report, and :attr:`last_resume` sums it up. A payload without a manifest is an orphan
        of a cut save, not a checkpoint: passed over silently (and removed by the next writer).
        A save in progress is waited for (up to :data:`LOCK_WAIT_S`). Raises
        :class:`CheckpointError`, naming the file, for a checkpoint of a different
        model (both fingerprints: resuming another model's weights, or silently starting over,
        would both be wrong), of another job, in another manifest format, whose key file is
        missing, for a file not owned by this user or writable by group or others, and for one
        that ``weights_only=True`` refuses although it authenticates.

        ``adopt=True`` is the explicit warm start: this job's own checkpoints still come first,
        but when it has none, the newest of another job, or one whose key file is missing, is
        taken instead of refused (a manifest that fails authentication with
        the key that *is* there is still skipped). :attr:`adopted` then says what was taken;
        one that nothing authenticated counts in :attr:`unauthenticated_loads`.
        """
        return self._find(fingerprint, map_location, adopt)

    def resume_point(self, fingerprint: str | None = None, *, adopt: bool = False) -> ResumePoint:
        """Where :meth:`load_latest` resumes: the same walk and the same checks (each candidate's
        manifest authenticated, its payload read, hashed and unpickled, then dropped), so the
        answer is the step a rank will load. ``fingerprint`` None skips only the model check
        (a driver does not know the model); a checkpoint of another model, job or format
        raises :class:`CheckpointError` here as it would in the rank."""
        self._find(fingerprint, "cpu", adopt)
        assert self.last_resume is not None
        return self.last_resume

    def _find(
        self, fingerprint: str | None, map_location: str | torch.device, adopt: bool
    ) -> tuple[dict[str, Any], int] | None:
        self.skipped = []
        self.adopted = None
        self.last_resume = None
        with self._lock(exclusive=False, wait_s=LOCK_WAIT_S) as lock:
            if lock == "busy":
                log.warning(
                    "a save in %s did not end within %.0f s; reading its checkpoints anyway",
                    self.directory,
                    LOCK_WAIT_S,
                )
            # An orphan was never committed: not a checkpoint, so not a damaged one either.
            infos = [info for info in reversed(self.list()) if not info.orphan]
            if adopt:
                # Own checkpoints first: a warm start stands in only until the job has its own.
                infos.sort(key=lambda info: not self._claims_own(info))
            for info in infos:
                loaded = self._load_verified(info, fingerprint, map_location, adopt)
                if loaded is not None:
                    payload, note = loaded
                    if note is not None:
                        self.adopted = f"{info.path.name}: {note}"
                        log.warning("starting from checkpoint %s: %s", info.path, note)
                    self.last_resume = ResumePoint(
                        self.directory, info.step, tuple(self.skipped), self.adopted
                    )
                    return payload, info.step
        self.last_resume = ResumePoint(self.directory, None, tuple(self.skipped))
        return None

    def _claims_own(self, info: CheckpointInfo) -> bool:
        return info.format == FORMAT and (info.campaign, info.job) == (self.campaign, self.job)

    def _load_verified(
        self,
        info: CheckpointInfo,
        fingerprint: str | None,
        map_location: str | torch.device,
        adopt: bool,
    ) -> tuple[dict[str, Any], str | None] | None:
        """The payload of ``info`` and why it was adopted (None: this job's own), or None
        (skipped, with a warning)."""
        try:
            payload, note, authenticated = self._verify(info, fingerprint, map_location, adopt)
        except _Skip as skip:
            self._skip(info.path, str(skip))
            return None
        if not authenticated:
            self.unauthenticated_loads += 1
        return payload, note

    def _verify(
        self,
        info: CheckpointInfo,
        fingerprint: str | None,
        map_location: str | torch.device,
        adopt: bool = False,
    ) -> tuple[dict[str, Any], str | None, bool]:
        """Every check of a load: ``(payload, why adopted, authenticated)``; raises
        :class:`_Skip` (damaged) or :class:`CheckpointError` (refused)."""
        path = info.path
        # Read again, checked: what list() saw is a hint, and may have changed since.
        manifest = self._read_verified_manifest(path.with_suffix(".json"))
        if manifest["step"] != info.step:
            raise _Skip(f"its manifest is for step {manifest['step']}")
        if manifest["format"] != FORMAT:
            # Format 1 (0.1.0 development builds) had a plain sha256 anyone could recompute; no
            # reader is kept for it or for any other format, so none is ever loaded.
            raise CheckpointError(
                f"checkpoint {path} has a manifest in format {manifest['format']!r}, which this "
                f"version does not read (it reads {FORMAT}): written by another version, or "
                f"rewritten by someone who can write {self.directory}. Refusing to resume from "
                f"it; delete it to start over."
            )
        try:
            note, authenticated = self.trust.vouch(path, manifest, adopt)
        except Unvouched as exc:
            raise _Skip(str(exc)) from exc
        if fingerprint is not None and manifest["fingerprint"] != fingerprint:
            raise CheckpointError(
                f"checkpoint {path} is for a different model: its fingerprint is "
                f"{manifest['fingerprint']}, the model being trained has {fingerprint}. Use "
                f"another checkpoint_dir, or delete {self.directory} to start over."
            )
        return self._read_payload(path, manifest, map_location), note, authenticated

    def _read_verified_manifest(self, manifest_path: Path) -> dict[str, Any]:
        try:
            raw = read_owned(manifest_path)
        except FileNotFoundError as exc:  # never committed, or pruned by a writer since list()
            raise _Skip("no readable manifest with its checksum") from exc
        except OSError as exc:
            raise _Skip(f"cannot read its manifest: {exc}") from exc
        manifest = _parse_manifest(raw)
        if manifest is None:
            raise _Skip(f"its manifest {manifest_path} is damaged or lacks its checksum")
        return manifest

    def _read_payload(
        self, path: Path, manifest: dict[str, Any], map_location: str | torch.device
    ) -> dict[str, Any]:
        # Read once: the bytes that are hashed are the bytes that are unpickled, even if a
        # writer replaces the file meanwhile.
        try:
            data = read_owned(path)
        except OSError as exc:  # pruned by a writer since list(), or unreadable
            raise _Skip(f"cannot read: {exc}") from exc
        if len(data) != manifest["size"]:
            raise _Skip(f"{len(data)} bytes on disk, manifest says {manifest['size']} (truncated?)")
        if not hmac.compare_digest(
            hashlib.sha256(data).hexdigest().encode(), manifest["sha256"].encode()
        ):
            raise _Skip("sha256 does not match its manifest")
        try:
            envelope = torch.load(io.BytesIO(data), map_location=map_location, weights_only=True)
        except pickle.UnpicklingError as exc:
            if "Weights only load failed" in str(exc):
                raise CheckpointError(
                    f"checkpoint {path} holds objects that torch.load(weights_only=True) refuses "
                    f"to unpickle; it was not written by CheckpointStore.save. Refusing to load "
                    f"it: {str(exc).splitlines()[0]}"
                ) from exc
            raise _Skip(f"cannot unpickle: {exc}") from exc
        except (RuntimeError, EOFError, OSError, ValueError) as exc:
            raise _Skip(f"cannot read: {exc}") from exc
        if not _envelope_matches(envelope, manifest, path):
            raise _Skip("contents disagree with its manifest")
        return envelope["payload"]

    def _skip(self, path: Path, why: str) -> None:
        self.skipped.append(f"{path.name}: {why}")
        log.warning("skipping checkpoint %s: %s", path, why)

    # ------------------------------------------------------------------ helpers

    def _paths(self, step: int) -> tuple[Path, Path]:
        stem = f"ckpt-{step:012d}"
        return self.directory / f"{stem}.pt", self.directory / f"{stem}.json"

    def _steps(self) -> set[int]:
        steps = set()
        for entry in os.scandir(self.directory):
            match = _NAME.match(entry.name)
            if match:
                steps.add(int(match.group(1)))
        return steps

    @contextlib.contextmanager
    def _staged(self, staged: _Paths) -> Iterator[BinaryIO]:
        """Yield a private temporary file (its path appended to ``staged``), flushed and
        fsynced when the block completes, removed when it fails."""
        fd, tmp_name = tempfile.mkstemp(
            dir=self.directory, prefix=f"{TMP_PREFIX}{socket.gethostname()}-{os.getpid()}-"
        )
        tmp = Path(tmp_name)
        staged.append(tmp)
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "wb") as file:
                yield file
                file.flush()
                os.fsync(file.fileno())
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise

    @contextlib.contextmanager
    def _lock(self, *, exclusive: bool, wait_s: float) -> Iterator[str]:
        """Hold the directory's lock (exclusive: to write; shared: to read) for the block.

        Yields ``"held"``, ``"busy"`` (another process held it for all of ``wait_s``) or
        ``"none"`` (no lock file can be made here, or the file system has no locks).
        """
        path = self.directory / LOCK_FILE_NAME
        flags = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        fd: int | None = None
        for mode in (os.O_RDWR | os.O_CREAT, os.O_RDONLY):
            try:
                fd = os.open(path, mode | flags, 0o600)
                break
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise CheckpointError(
                        f"refusing the checkpoint lock {path}: it is a symbolic link"
                    ) from exc
        if fd is None:
            yield "none"
            return
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise CheckpointError(f"refusing the checkpoint lock {path}: not a regular file")
            yield _flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH, wait_s)
        finally:
            os.close(fd)  # releases the lock

    def remove_orphans(self, wait_s: float = 0.0) -> _Names:
        """Remove the leftovers of cut saves (payloads without a manifest, manifests without
        a payload, temporary files) once no save is in progress (waiting up to ``wait_s`` for
        one to end; nothing is removed while one runs); their names (also added to
        :attr:`orphans_removed`, and logged)."""
        with self._lock(exclusive=True, wait_s=wait_s) as lock:
            return self._sweep() if lock == "held" else []

    def _sweep(self) -> _Names:
        """:meth:`remove_orphans` with the exclusive lock held: no save is in progress, so
        whatever a save leaves only until its commit is a leftover."""
        removed = []
        here = f"{TMP_PREFIX}{socket.gethostname()}-"
        entries = {entry.name: entry for entry in os.scandir(self.directory)}
        for name, entry in sorted(entries.items()):
            if entry.is_dir(follow_symlinks=False):
                continue
            match = _NAME.match(name)
            if match:
                sibling = f"ckpt-{match.group(1)}." + ("json" if match.group(2) == "pt" else "pt")
                orphan = sibling not in entries
            elif name.startswith(here):
                pid_text = name[len(here) :].split("-", 1)[0]
                orphan = not pid_text.isdigit() or not _pid_alive(int(pid_text))
            elif name.startswith(TMP_PREFIX):
                orphan = _age(entry) > FOREIGN_TEMP_AGE_S  # another host's: its pid is not ours
            else:
                orphan = False
            if orphan:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)
                    removed.append(name)
        if removed:
            fsync_dir(self.directory)
            self.orphans_removed += removed
            log.warning(
                "removed %d leftover file(s) of cut checkpoint saves from %s: %s",
                len(removed),
                self.directory,
                ", ".join(removed),
            )
        return removed

    def _prune(self) -> None:
        # Only committed checkpoints count and go: a .pt without a manifest may be a file the
        # store did not write, and counting it let a stray high-numbered file evict every new
        # checkpoint as soon as it was written.
        committed = [info.step for info in self.list() if info.committed]
        for step in committed[: max(0, len(committed) - self.keep)]:
            pt_path, manifest_path = self._paths(step)
            # Payload first: a crash in between leaves a manifest whose file is gone, which
            # list() ignores; the other order would leave a .pt nobody may delete.
            for path in (pt_path, manifest_path):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
        fsync_dir(self.directory)

    def _remove_stale_temp_files(self) -> None:
        """Delete temporary files left by writers on this host that no longer run."""
        prefix = f"{TMP_PREFIX}{socket.gethostname()}-"
        for entry in os.scandir(self.directory):
            if not entry.name.startswith(prefix):
                continue
            pid_text = entry.name[len(prefix) :].split("-", 1)[0]
            if pid_text.isdigit() and not _pid_alive(int(pid_text)):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)


def resume_step(
    directory: str | Path,
    *,
    job: str = "",
    campaign: str = "",
    fingerprint: str | None = None,
) -> ResumePoint:
    """The step a rank of ``job`` will resume from in ``directory``: what
    :meth:`CheckpointStore.load_latest` would load there, by the same checks, falling back past
    damaged checkpoints (named in :attr:`ResumePoint.skipped`); ``step`` None is from scratch.

    For the driver, which does not know the model: ``fingerprint`` None skips only that check.
    Leftovers of cut saves are removed first (unless a save is in progress, which is waited
    for). A directory that does not exist resumes from scratch. Raises
    :class:`CheckpointError` where the rank's load would (another job's checkpoint, one in
    another manifest format, a missing key, a file others could have written).
    """
    path = Path(directory).expanduser().resolve()
    if not path.is_dir():
        return ResumePoint(path, None)
    store = CheckpointStore(path, job=job, campaign=campaign, create=False)
    store.remove_orphans(wait_s=LOCK_WAIT_S)
    return store.resume_point(fingerprint)


# ---------------------------------------------------------------------- manifests


def _info(pt_path: Path, step: int, manifest: dict[str, Any] | None) -> CheckpointInfo:
    if manifest is None:
        return CheckpointInfo(pt_path, step, None, None, None, None)
    return CheckpointInfo(
        path=pt_path,
        step=step,
        fingerprint=manifest["fingerprint"],
        sha256=manifest["sha256"],
        size=manifest["size"],
        created=manifest.get("created"),
        format=manifest["format"],
        campaign=manifest.get("campaign"),
        job=manifest.get("job"),
    )


def _read_manifest(path: Path) -> dict[str, Any] | None:
    """The manifest at ``path`` for :meth:`CheckpointStore.list` (None: missing or damaged);
    its owner and mode are checked when a checkpoint is loaded, not here."""
    try:
        raw, _ = read_regular(path)
    except FileNotFoundError:
        return None
    except (OSError, CheckpointError) as exc:
        log.warning("checkpoint manifest %s is unreadable: %s", path, exc)
        return None
    manifest = _parse_manifest(raw)
    if manifest is None:
        log.warning("checkpoint manifest %s is damaged or incomplete", path)
    return manifest


def _parse_manifest(raw: bytes) -> dict[str, Any] | None:
    """The manifest in ``raw`` when its fields have the right types (those of :data:`FORMAT` when
    it claims that format: another one is kept, to be refused by name); None otherwise. Not
    authenticated."""
    try:
        manifest = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(manifest, dict):
        return None
    required: dict[str, type | tuple[type, ...]] = {
        "format": str,
        "step": int,
        "fingerprint": str,
        "size": int,
        "sha256": str,
    }
    if manifest.get("format") == FORMAT:
        required.update(campaign=str, job=str, mac=str)
    if any(not isinstance(manifest.get(key), kind) for key, kind in required.items()):
        return None
    return manifest


def _envelope_matches(envelope: Any, manifest: dict[str, Any], path: Path) -> bool:
    if not isinstance(envelope, dict) or not isinstance(envelope.get("payload"), dict):
        return False
    fields = ["format", "step", "fingerprint", "campaign", "job"]
    return (
        all(envelope.get(key) == manifest[key] for key in fields)
        and manifest.get("file", path.name) == path.name
    )


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _age(entry: os.DirEntry[str]) -> float:
    """Seconds since ``entry`` was last written (0 when it is gone)."""
    try:
        return time.time() - entry.stat(follow_symlinks=False).st_mtime
    except OSError:
        return 0.0


def _flock(fd: int, operation: int, wait_s: float) -> str:
    """Take ``flock(fd, operation)``, polling for up to ``wait_s``: ``"held"``, ``"busy"`` or
    ``"none"`` (the file system does not lock)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, operation | fcntl.LOCK_NB)
            return "held"
        except BlockingIOError:
            pass
        except OSError as exc:
            if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL):
                return "none"
            raise
        if time.monotonic() >= deadline:
            return "busy"
        time.sleep(0.05)
