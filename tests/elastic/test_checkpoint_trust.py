"""Whom a checkpoint is trusted from: bound to its job, authenticated with a per-job key,
refused when another user could have written it; adopting anything else is explicit (#26).

Every test writes real checkpoints with :class:`CheckpointStore` and real torch; a forger is
played by editing the files on disk as someone with write access to the folder (but not the key)
could.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import stat
import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from parsl_malleable.app import ElasticOptions, _function_name
from parsl_malleable.elastic.checkpoint import (
    KEY_FILE_NAME,
    CheckpointError,
    CheckpointStore,
)

LOGGER = "parsl_malleable.elastic.checkpoint"
FINGERPRINT = "f00dcafe"
FORMAT_1 = "parsl-malleable-checkpoint/1"  # the 0.1.0 development builds' plain-sha256 format
needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="giving a file to another uid needs root (CI runs as root)"
)


def _save(store: CheckpointStore, *steps: int) -> None:
    for step in steps:
        payload = {"marker": torch.tensor(step), "fields": {"best": step / 10}}
        store.save(payload, step=step, fingerprint=FINGERPRINT)


def _plain_digest(manifest: dict[str, Any], without: str) -> str:
    fields = {key: value for key, value in manifest.items() if key != without}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


def _forge_weights(pt_path: Path, marker: int) -> Path:
    """Replace the weights in ``pt_path`` and recompute its manifest's size, sha256 and own
    checksum, as anyone who can write the folder can (the plain manifest hash of format 1);
    the path of the manifest."""
    envelope = torch.load(pt_path, weights_only=True)
    envelope["payload"]["marker"] = torch.tensor(marker)
    torch.save(envelope, pt_path)
    manifest_path = pt_path.with_suffix(".json")
    manifest = json.loads(manifest_path.read_text())
    data = pt_path.read_bytes()
    manifest.update(size=len(data), sha256=hashlib.sha256(data).hexdigest())
    for field in ("manifest_sha256", "mac"):  # whichever the manifest authenticates itself with
        if field in manifest:
            manifest[field] = _plain_digest(manifest, field)
    manifest_path.write_text(json.dumps(manifest))
    return manifest_path


def test_a_checkpoint_of_another_job_is_refused_naming_it_and_taken_only_when_adopted(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "ckpt"
    _save(CheckpointStore(folder, job="lr-0.1", campaign="sweep"), 7)
    ours = CheckpointStore(folder, job="lr-0.01", campaign="sweep")
    with pytest.raises(CheckpointError) as error:
        ours.load_latest(FINGERPRINT)
    message = str(error.value)
    assert "ckpt-000000000007.pt belongs to job 'lr-0.1' of campaign 'sweep'" in message
    assert "not to this job 'lr-0.01' of campaign 'sweep'" in message
    assert f"warm_start_from={str(folder)!r}" in message
    with pytest.raises(CheckpointError, match="campaign 'sweep'"):
        CheckpointStore(folder, job="lr-0.1", campaign="other").load_latest(FINGERPRINT)

    payload, step = ours.load_latest(FINGERPRINT, adopt=True)
    assert (step, payload["marker"].item(), payload["fields"]) == (7, 7, {"best": 0.7})
    assert ours.adopted is not None and "job 'lr-0.1' of campaign 'sweep'" in ours.adopted
    assert ours.unauthenticated_loads == 0  # it authenticated, as that job's

    # Once the job has a checkpoint of its own, that one is taken, even though it is older.
    _save(ours, 3)
    payload, step = ours.load_latest(FINGERPRINT, adopt=True)
    assert (step, payload["marker"].item(), ours.adopted) == (3, 3, None)


def test_another_jobs_checkpoint_cannot_pass_for_ours_by_renaming_its_job(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "ckpt"
    _save(CheckpointStore(folder, job="a"), 5)
    manifest_path = folder / "ckpt-000000000005.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["job"] = "b"  # the job is signed, with a key derived for it
    manifest_path.write_text(json.dumps(manifest))
    ours = CheckpointStore(folder, job="b")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert ours.load_latest(FINGERPRINT) is None
    assert str(manifest_path) in caplog.text and "fails authentication" in caplog.text
    assert ours.skipped and "fails authentication" in ours.skipped[0]


def test_a_checkpoint_copied_from_another_campaigns_folder_does_not_authenticate(
    tmp_path: Path,
) -> None:
    """Same job name, another parent folder (another key): a copy is not this job's."""
    theirs = CheckpointStore(tmp_path / "campaign-a" / "checkpoints" / "train", job="train")
    ours = CheckpointStore(tmp_path / "campaign-b" / "checkpoints" / "train", job="train")
    _save(theirs, 9)
    _save(ours, 2)
    for suffix in (".pt", ".json"):
        shutil.copy2(theirs.directory / f"ckpt-000000000009{suffix}", ours.directory)
    payload, step = ours.load_latest(FINGERPRINT)
    assert (step, payload["marker"].item()) == (2, 2)
    (skipped,) = ours.skipped
    assert skipped.startswith("ckpt-000000000009.pt: its manifest")
    assert "another key" in skipped


# ------------------------------------------------------------------ authenticated manifest


def test_forged_weights_with_a_recomputed_manifest_hash_are_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = CheckpointStore(tmp_path / "ckpt")
    _save(store, 1, 2)
    manifest_path = _forge_weights(store.directory / "ckpt-000000000002.pt", marker=666)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        payload, step = store.load_latest(FINGERPRINT)
    assert (step, payload["marker"].item()) == (1, 1)  # the forgery is passed over
    assert str(manifest_path) in caplog.text and "fails authentication" in caplog.text
    assert "HMAC-SHA256" in store.skipped[0]


def test_forged_weights_in_a_format_1_manifest_are_refused(tmp_path: Path) -> None:
    """A downgrade: the forger rewrites the manifest in format 1, whose plain hash anyone can
    recompute; it is refused with a clear error, never loaded as the job's own."""
    store = CheckpointStore(tmp_path / "ckpt")
    _save(store, 1, 2)
    pt_path = store.directory / "ckpt-000000000002.pt"
    manifest_path = _forge_weights(pt_path, marker=666)
    manifest = json.loads(manifest_path.read_text())
    for field in ("mac", "campaign", "job", "key_id"):
        manifest.pop(field, None)
    manifest["format"] = FORMAT_1
    manifest["manifest_sha256"] = _plain_digest(manifest, "manifest_sha256")
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError) as error:
        store.load_latest(FINGERPRINT)
    assert f"{pt_path} has a manifest in format {FORMAT_1!r}" in str(error.value)


def test_a_format_1_checkpoint_is_refused_even_when_adopting(tmp_path: Path) -> None:
    """Format 1 (0.1.0 development builds: a plain sha256, no job) has no reader any more: its
    checkpoints are refused by name, never loaded, not even as an explicit warm start."""
    store = CheckpointStore(tmp_path / "ckpt")
    _save(store, 4)
    pt_path = store.directory / "ckpt-000000000004.pt"
    manifest_path = pt_path.with_suffix(".json")
    manifest = json.loads(manifest_path.read_text())
    for field in ("mac", "campaign", "job", "key_id"):
        manifest.pop(field, None)
    manifest["format"] = FORMAT_1
    manifest_path.write_text(json.dumps(manifest))
    for adopt in (False, True):
        with pytest.raises(CheckpointError) as error:
            store.load_latest(FINGERPRINT, adopt=adopt)
        message = str(error.value)
        assert f"{pt_path} has a manifest in format {FORMAT_1!r}" in message, message
        assert "delete it to start over" in message
    assert store.unauthenticated_loads == 0


def test_a_missing_key_is_refused_clearly_and_adopted_only_when_asked(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "ckpt")
    _save(store, 3)
    store.key_file.unlink()  # the folder moved without it, or it was deleted
    fresh = CheckpointStore(tmp_path / "ckpt")
    with pytest.raises(CheckpointError, match=f"the key file {fresh.key_file} is missing"):
        fresh.load_latest(FINGERPRINT)
    payload, step = fresh.load_latest(FINGERPRINT, adopt=True)
    assert (step, payload["marker"].item(), fresh.unauthenticated_loads) == (3, 3, 1)
    assert fresh.adopted is not None and "not authenticated" in fresh.adopted


def test_the_key_is_private_outside_the_folder_and_shared_by_its_siblings(tmp_path: Path) -> None:
    first = CheckpointStore(tmp_path / "jobs" / "a", job="a")
    _save(first, 1)
    key = tmp_path / "jobs" / KEY_FILE_NAME
    assert first.key_file == key
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    text = key.read_text()
    assert len(text.strip()) == 64 and int(text, 16) > 0
    assert KEY_FILE_NAME not in os.listdir(first.directory)
    assert not [n for n in os.listdir(key.parent) if n.startswith(".tmp-")]
    second = CheckpointStore(tmp_path / "jobs" / "b", job="b")
    _save(second, 1)
    assert key.read_text() == text  # one key per parent, each job signing with its own
    assert second.load_latest(FINGERPRINT) is not None


# ------------------------------------------------------------------ ownership and modes


@pytest.mark.parametrize("suffix", [".pt", ".json"])
def test_a_file_others_can_write_is_refused_naming_it_and_why(tmp_path: Path, suffix: str) -> None:
    store = CheckpointStore(tmp_path / "ckpt")
    _save(store, 1, 2)
    planted = store.directory / f"ckpt-000000000002{suffix}"
    os.chmod(planted, 0o666)
    with pytest.raises(CheckpointError) as error:
        store.load_latest(FINGERPRINT)
    message = str(error.value)
    assert f"refusing to read {planted}: its mode is 0666" in message
    assert "its group and other users can change it" in message


@needs_root
@pytest.mark.parametrize("suffix", [".pt", ".json"])
def test_a_file_of_another_user_is_refused_naming_it_and_why(tmp_path: Path, suffix: str) -> None:
    store = CheckpointStore(tmp_path / "ckpt")
    _save(store, 1, 2)
    planted = store.directory / f"ckpt-000000000002{suffix}"
    os.chown(planted, 12345, 12345)
    with pytest.raises(CheckpointError) as error:
        store.load_latest(FINGERPRINT)
    assert f"refusing to read {planted}: it belongs to uid 12345, not to this user" in str(
        error.value
    )


def test_a_symbolic_link_is_refused(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "ckpt")
    _save(store, 1)
    pt_path = store.directory / "ckpt-000000000001.pt"
    elsewhere = tmp_path / "elsewhere.pt"
    shutil.move(pt_path, elsewhere)
    pt_path.symlink_to(elsewhere)
    with pytest.raises(CheckpointError, match=f"refusing to read {pt_path}: it is a symbolic"):
        store.load_latest(FINGERPRINT)


def test_a_fifo_named_like_a_manifest_is_refused_without_blocking(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "ckpt")
    _save(store, 1)
    (store.directory / "ckpt-000000000002.pt").write_bytes(b"x")
    os.chmod(store.directory / "ckpt-000000000002.pt", 0o600)
    os.mkfifo(store.directory / "ckpt-000000000002.json", 0o600)
    outcome: list[BaseException | object] = []

    def load() -> None:
        try:
            outcome.append(store.load_latest(FINGERPRINT))
        except BaseException as exc:
            outcome.append(exc)

    reader = threading.Thread(target=load, daemon=True)
    reader.start()
    reader.join(timeout=30)  # an open() blocking on the FIFO never returns
    assert outcome, "load_latest blocked on a FIFO"
    assert isinstance(outcome[0], CheckpointError)
    assert "is not a regular file" in str(outcome[0])


@pytest.mark.parametrize("mode", [0o640, 0o604])
def test_a_key_others_can_read_is_refused(tmp_path: Path, mode: int) -> None:
    store = CheckpointStore(tmp_path / "ckpt")
    _save(store, 1)
    os.chmod(store.key_file, mode)
    fresh = CheckpointStore(tmp_path / "ckpt")
    with pytest.raises(CheckpointError, match=f"refusing to read {fresh.key_file}: its mode"):
        fresh.load_latest(FINGERPRINT)
    with pytest.raises(CheckpointError, match=r"\.key: its mode is 0\d+: .* can read or change it"):
        _save(CheckpointStore(tmp_path / "ckpt"), 2)


@needs_root
def test_a_key_planted_by_another_user_is_refused(tmp_path: Path) -> None:
    """Someone who could create the key first (a shared parent such as /tmp) would know it."""
    key = tmp_path / KEY_FILE_NAME
    key.write_text("ab" * 32 + "\n")
    os.chmod(key, 0o600)
    os.chown(key, 12345, 12345)
    with pytest.raises(CheckpointError, match="it belongs to uid 12345, not to this user"):
        _save(CheckpointStore(tmp_path / "ckpt"), 1)


# ------------------------------------------------------------------ options of an app


def test_an_apps_checkpoint_policy_names_its_job_campaign_and_warm_start(tmp_path: Path) -> None:
    options = ElasticOptions(
        checkpoint_dir=str(tmp_path), campaign="sweep", warm_start_from=str(tmp_path / "a")
    )
    assert options.checkpoint_policy("lr-0.1").model_dump() == {
        "job": "lr-0.1",
        "campaign": "sweep",
        "warm_start_from": str(tmp_path / "a"),
    }
    plain = ElasticOptions(checkpoint_dir=str(tmp_path)).checkpoint_policy("x")
    assert plain.model_dump() == {"job": "x", "campaign": "", "warm_start_from": None}
    # An unnamed job is bound to its function, not to the counted name it gets in logs.
    from apps.digits import train_elastic

    assert _function_name(train_elastic) == "apps.digits.train_elastic"
