"""Disk checkpoints of training state: atomic, checksummed, private, bounded, safe to load.

A checkpoint is two files in one private directory:

* ``ckpt-<step>.pt``: the payload, written with :func:`torch.save` inside a small envelope that
  repeats the step and model fingerprint, so the file describes itself;
* ``ckpt-<step>.json``: the manifest (step, fingerprint, size, sha256 of the ``.pt`` file). It is
  written *after* the payload, so a manifest marks a checkpoint as complete.

Both are written to a temporary file in the same directory, fsynced, renamed over the final name
with :func:`os.replace`, and the directory is fsynced, so a crash at any moment leaves either the
old checkpoint or the new one, never a torn file under a final name. A write that fails (a full
disk, a quota) raises :class:`CheckpointError` and leaves every checkpoint already there as it
was. Retention counts and deletes committed checkpoints only: a ``.pt`` without a manifest
(a file the store did not write, or a save that crashed before its manifest) is never deleted
and never loaded. Loading checks the size and
sha256 before unpickling and always unpickles with ``torch.load(weights_only=True)``, which refuses
anything but tensors and plain Python values: a checkpoint file cannot run code.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import logging
import os
import pickle
import re
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import torch

from parsl_malleable.elastic.safe_state import check_loadable
from parsl_malleable.errors import CheckpointError

__all__ = ["CheckpointError", "CheckpointInfo", "CheckpointStore", "model_fingerprint"]

log = logging.getLogger(__name__)

FORMAT = "parsl-malleable-checkpoint/1"
_NAME = re.compile(r"^ckpt-(\d{12})\.(pt|json)$")
_TMP_PREFIX = ".tmp-"


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

    ``fingerprint``, ``sha256`` and ``size`` come from the manifest and are ``None`` when the
    manifest is missing or unreadable (a save that crashed before committing, or damage).
    """

    path: Path
    step: int
    fingerprint: str | None
    sha256: str | None
    size: int | None
    created: float | None

    @property
    def committed(self) -> bool:
        """True when a readable manifest records the checksum of this checkpoint."""
        return self.sha256 is not None


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

    The directory is created with mode ``0o700`` (and an existing one is narrowed to it) and every
    file is ``0o600``: checkpoints hold a model and whatever user fields the job saved. One writer
    at a time is assumed (the elastic runtime saves from rank 0); any number of readers is safe.
    """

    def __init__(self, directory: str | Path, keep: int = 3) -> None:
        if not isinstance(keep, int) or isinstance(keep, bool) or keep < 1:
            raise ValueError(f"CheckpointStore keep must be an integer >= 1, got {keep!r}")
        self.directory = Path(directory).expanduser().resolve()
        self.keep = keep
        self.skipped: list[str] = []  # what the last load_latest passed over, and why
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            owner = self.directory.stat().st_uid
        except OSError as exc:
            raise CheckpointError(
                f"cannot create checkpoint directory {self.directory}: {exc}"
            ) from exc
        if owner != os.geteuid():
            # Its owner could read the checkpoints or swap them for others; narrowing its
            # permissions is not ours to do (and fails with EPERM for anyone but root).
            raise CheckpointError(
                f"checkpoint directory {self.directory} belongs to uid {owner}, not to this "
                f"user (uid {os.geteuid()}): its owner could read or replace the checkpoints. "
                f"Give a directory you own as checkpoint_dir."
            )
        try:
            os.chmod(self.directory, 0o700)
        except OSError as exc:
            raise CheckpointError(
                f"cannot make checkpoint directory {self.directory} private: {exc}"
            ) from exc

    # ------------------------------------------------------------------ writing

    def save(self, payload: dict[str, Any], *, step: int, fingerprint: str) -> Path:
        """Write ``payload`` as the checkpoint of ``step`` and return the path of its ``.pt`` file.

        ``payload`` may hold nested dicts, lists, tuples and sets of tensors and plain values
        (``state_dict()`` of models, optimizers and schedulers qualify). Anything else raises
        :class:`CheckpointError` naming where it sits, because it could not be loaded back with
        ``weights_only=True``. Saving a step that already exists replaces it. After the write,
        all but the newest ``keep`` committed checkpoints are deleted. A write that fails
        (``ENOSPC``, a quota, an I/O error) raises :class:`CheckpointError` saying so, and every
        checkpoint already there, this step's included, stays loadable.
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
        self._remove_stale_temp_files()

        pt_path, manifest_path = self._paths(step)
        envelope = {"format": FORMAT, "step": step, "fingerprint": fingerprint, "payload": payload}

        def unvouch() -> None:
            # An existing manifest for this step would vouch for the new payload's old checksum
            # if we crashed between the two renames; drop it, but only once the new payload is
            # safely on disk, so a failed write leaves the old checkpoint committed.
            with contextlib.suppress(FileNotFoundError):
                manifest_path.unlink()

        writer: _HashingWriter | None = None
        try:
            with self._atomic_file(pt_path, before_replace=unvouch) as file:
                writer = _HashingWriter(file)
                # torch.save only calls write/flush on it; its stubs ask for a full IO[bytes]
                torch.save(envelope, writer)  # type: ignore[arg-type]
        except (OSError, RuntimeError) as exc:
            # torch's zip writer turns a failed write into RuntimeError("... unexpected pos").
            cause = writer.error if writer is not None and writer.error is not None else exc
            raise self._write_failed(step, cause) from exc
        manifest = {
            "format": FORMAT,
            "step": step,
            "fingerprint": fingerprint,
            "file": pt_path.name,
            "size": writer.size,
            "sha256": writer.digest.hexdigest(),
            "created": time.time(),
        }
        manifest["manifest_sha256"] = _manifest_digest(manifest)
        try:
            with self._atomic_file(manifest_path) as file:
                file.write(json.dumps(manifest, indent=1).encode())
        except OSError as exc:
            with contextlib.suppress(OSError):
                pt_path.unlink()  # uncommitted: never loaded, and it takes space
            raise self._write_failed(step, exc) from exc
        self._prune()
        return pt_path

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
        """All checkpoints in the directory, oldest step first (manifests read, payloads not)."""
        infos = []
        for step in sorted(self._steps()):
            pt_path, manifest_path = self._paths(step)
            if not pt_path.exists():
                continue
            manifest = _read_manifest(manifest_path)
            infos.append(
                CheckpointInfo(
                    path=pt_path,
                    step=step,
                    fingerprint=manifest.get("fingerprint") if manifest else None,
                    sha256=manifest.get("sha256") if manifest else None,
                    size=manifest.get("size") if manifest else None,
                    created=manifest.get("created") if manifest else None,
                )
            )
        return infos

    def load_latest(
        self, fingerprint: str, *, map_location: str | torch.device = "cpu"
    ) -> tuple[dict[str, Any], int] | None:
        """Return ``(payload, step)`` of the newest intact checkpoint, or ``None`` if there is none.

        Checkpoints without a manifest, or whose size or sha256 disagree with it, or that fail to
        unpickle, are skipped with a warning naming the file, and the next older one is tried.
        A checkpoint written for a different model (``fingerprint`` differs) raises
        :class:`CheckpointError` naming both fingerprints: resuming another model's weights, or
        silently starting over, would both be wrong. So does a file that ``weights_only=True``
        refuses although its checksum matches (it was written by something other than
        :meth:`save`). :attr:`skipped` says which newer checkpoints the last call passed over
        and why, for the caller to report.
        """
        self.skipped = []
        for info in reversed(self.list()):
            payload = self._load_verified(info, fingerprint, map_location)
            if payload is not None:
                return payload, info.step
        return None

    def _load_verified(
        self, info: CheckpointInfo, fingerprint: str, map_location: str | torch.device
    ) -> dict[str, Any] | None:
        path = info.path
        if not info.committed:
            self._skip(path, "no readable manifest with its checksum")
            return None
        if info.fingerprint != fingerprint:
            raise CheckpointError(
                f"checkpoint {path} is for a different model: its fingerprint is "
                f"{info.fingerprint}, the model being trained has {fingerprint}. Use another "
                f"checkpoint_dir, or delete {self.directory} to start over."
            )
        # Read once: the bytes that are hashed are the bytes that are unpickled, even if a
        # writer replaces the file meanwhile.
        try:
            data = path.read_bytes()
        except OSError as exc:  # pruned by a writer since list(), or unreadable
            self._skip(path, f"cannot read: {exc}")
            return None
        if len(data) != info.size:
            self._skip(path, f"{len(data)} bytes on disk, manifest says {info.size} (truncated?)")
            return None
        if hashlib.sha256(data).hexdigest() != info.sha256:
            self._skip(path, "sha256 does not match its manifest")
            return None
        try:
            envelope = torch.load(io.BytesIO(data), map_location=map_location, weights_only=True)
        except pickle.UnpicklingError as exc:
            if "Weights only load failed" in str(exc):
                raise CheckpointError(
                    f"checkpoint {path} holds objects that torch.load(weights_only=True) refuses "
                    f"to unpickle; it was not written by CheckpointStore.save. Refusing to load "
                    f"it: {str(exc).splitlines()[0]}"
                ) from exc
            self._skip(path, f"cannot unpickle: {exc}")
            return None
        except (RuntimeError, EOFError, OSError, ValueError) as exc:
            self._skip(path, f"cannot read: {exc}")
            return None
        if (
            not isinstance(envelope, dict)
            or envelope.get("format") != FORMAT
            or envelope.get("fingerprint") != fingerprint
            or envelope.get("step") != info.step
            or not isinstance(envelope.get("payload"), dict)
        ):
            self._skip(path, "contents disagree with its manifest")
            return None
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
    def _atomic_file(
        self, final: Path, before_replace: Callable[[], None] | None = None
    ) -> Iterator[BinaryIO]:
        """Yield a private temporary file that replaces ``final`` only if the block completes
        (``before_replace`` runs once it is on disk, just before the rename)."""
        fd, tmp_name = tempfile.mkstemp(
            dir=self.directory, prefix=f"{_TMP_PREFIX}{socket.gethostname()}-{os.getpid()}-"
        )
        tmp = Path(tmp_name)
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "wb") as file:
                yield file
                file.flush()
                os.fsync(file.fileno())
            if before_replace is not None:
                before_replace()
            os.replace(tmp, final)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        _fsync_dir(self.directory)

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
        _fsync_dir(self.directory)

    def _remove_stale_temp_files(self) -> None:
        """Delete temporary files left by writers on this host that no longer run."""
        prefix = f"{_TMP_PREFIX}{socket.gethostname()}-"
        for entry in os.scandir(self.directory):
            if not entry.name.startswith(prefix):
                continue
            pid_text = entry.name[len(prefix) :].split("-", 1)[0]
            if pid_text.isdigit() and not _pid_alive(int(pid_text)):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)


def _read_manifest(path: Path) -> dict[str, Any] | None:
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("checkpoint manifest %s is unreadable: %s", path, exc)
        return None
    if (
        not isinstance(manifest, dict)
        or manifest.get("format") != FORMAT
        or not isinstance(manifest.get("sha256"), str)
        or not isinstance(manifest.get("size"), int)
        or not isinstance(manifest.get("fingerprint"), str)
    ):
        log.warning("checkpoint manifest %s lacks format, size, sha256 or fingerprint", path)
        return None
    if manifest.get("manifest_sha256") != _manifest_digest(manifest):
        log.warning("checkpoint manifest %s is damaged: its own checksum does not match", path)
        return None
    return manifest


def _manifest_digest(manifest: dict[str, Any]) -> str:
    """Checksum of a manifest's own fields: a damaged manifest must not pass for another model's."""
    fields = {key: value for key, value in manifest.items() if key != "manifest_sha256"}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


def _fsync_dir(directory: Path) -> None:
    """Make renames in ``directory`` durable (where the file system supports it)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as exc:
        # Some network file systems refuse fsync on a directory; the rename is still atomic.
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
