"""CheckpointStore: round trip, privacy, retention, corruption, wrong model, atomicity, safety."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import socket
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from parsl_malleable.elastic import checkpoint, checkpoint_trust
from parsl_malleable.elastic.checkpoint import (
    CheckpointError,
    CheckpointStore,
    model_fingerprint,
)

LOGGER = "parsl_malleable.elastic.checkpoint"


class SmallCNN(torch.nn.Module):
    """A digits-sized CNN with a BatchNorm, so buffers are part of the state too."""

    def __init__(self, channels: int = 4) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, channels, 3, padding=1)
        self.norm = torch.nn.BatchNorm2d(channels)
        self.head = torch.nn.Linear(channels * 8 * 8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.norm(self.conv(x)))
        return self.head(x.flatten(1))


def _trained(
    seed: int = 0, steps: int = 3
) -> tuple[SmallCNN, torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    torch.manual_seed(seed)
    model = SmallCNN()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    for _ in range(steps):
        _train_step(model, optimizer)
        scheduler.step()
    return model, optimizer, scheduler


def _train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> float:
    x = torch.randn(16, 1, 8, 8)
    y = torch.randint(0, 10, (16,))
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.item()


def _payload(model, optimizer, scheduler, **user) -> dict:
    return {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "rng": torch.get_rng_state(),
        "user": user,
    }


def _store_with_steps(
    tmp_path: Path, steps: list[int], keep: int = 5
) -> tuple[CheckpointStore, str]:
    store = CheckpointStore(tmp_path / "ckpt", keep=keep)
    model = SmallCNN()
    fingerprint = model_fingerprint(model)
    for step in steps:
        store.save({"marker": torch.tensor(step), "step": step}, step=step, fingerprint=fingerprint)
    return store, fingerprint


def test_round_trip_restores_model_optimizer_scheduler_and_user_fields(tmp_path: Path) -> None:
    model, optimizer, scheduler = _trained(seed=1)
    store = CheckpointStore(tmp_path / "ckpt")
    fingerprint = model_fingerprint(model)
    payload = _payload(
        model, optimizer, scheduler, epoch=2, seen=[1, 5, 9], name="digits", lr=0.01, done=False
    )
    path = store.save(payload, step=42, fingerprint=fingerprint)
    assert path.exists() and path.suffix == ".pt"

    loaded, step = store.load_latest(fingerprint)
    assert step == 42
    assert loaded["user"] == {
        "epoch": 2,
        "seen": [1, 5, 9],
        "name": "digits",
        "lr": 0.01,
        "done": False,
    }

    torch.manual_seed(99)  # the fresh copy starts from different weights
    model2 = SmallCNN()
    optimizer2 = torch.optim.Adam(model2.parameters(), lr=0.01)
    scheduler2 = torch.optim.lr_scheduler.StepLR(optimizer2, step_size=2, gamma=0.5)
    model2.load_state_dict(loaded["model"])
    optimizer2.load_state_dict(loaded["optimizer"])
    scheduler2.load_state_dict(loaded["scheduler"])
    for key, value in model.state_dict().items():
        assert torch.equal(value, model2.state_dict()[key]), key
    assert scheduler2.get_last_lr() == scheduler.get_last_lr()

    # Training on from the restored state is bit-identical to training on from the original.
    torch.set_rng_state(loaded["rng"])
    loss_restored = _train_step(model2, optimizer2)
    torch.set_rng_state(payload["rng"])
    loss_original = _train_step(model, optimizer)
    assert loss_restored == loss_original
    for key, value in model.state_dict().items():
        assert torch.equal(value, model2.state_dict()[key]), key


def test_files_are_private_and_existing_directory_is_narrowed(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    directory.mkdir(mode=0o755)
    os.chmod(directory, 0o755)
    store, _ = _store_with_steps(tmp_path, [1, 2])
    assert store.directory == directory.resolve()
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    files = list(directory.iterdir())
    # two payloads, two manifests, the writers' lock, no temporaries
    assert sorted(f.name for f in files if f.name.startswith("ckpt-")) == [
        "ckpt-000000000001.json",
        "ckpt-000000000001.pt",
        "ckpt-000000000002.json",
        "ckpt-000000000002.pt",
    ]
    assert len(files) == 5 and (directory / checkpoint.LOCK_FILE_NAME).is_file()
    for file in files:
        assert stat.S_IMODE(file.stat().st_mode) == 0o600, file


def test_new_directory_is_created_private(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "a" / "b")
    assert stat.S_IMODE(store.directory.stat().st_mode) == 0o700


def test_retention_keeps_newest(tmp_path: Path) -> None:
    store, fingerprint = _store_with_steps(tmp_path, [5, 1, 7, 3, 9], keep=2)
    assert [info.step for info in store.list()] == [7, 9]
    assert sorted(p.name for p in store.directory.glob("ckpt-*")) == [
        "ckpt-000000000007.json",
        "ckpt-000000000007.pt",
        "ckpt-000000000009.json",
        "ckpt-000000000009.pt",
    ]
    payload, step = store.load_latest(fingerprint)
    assert step == 9 and payload["marker"].item() == 9


def test_saving_a_committed_step_again_keeps_it_and_a_damaged_one_is_replaced(
    tmp_path: Path,
) -> None:
    # A job's last save often repeats its last periodic one: the same commit. Rewriting it
    # would leave a moment (between the two renames) in which that step is unreadable.
    store, fingerprint = _store_with_steps(tmp_path, [4])
    before = store.list()[0].path.stat().st_ino
    store.save({"marker": torch.tensor(-4)}, step=4, fingerprint=fingerprint)
    payload, step = store.load_latest(fingerprint)
    assert (step, payload["marker"].item()) == (4, 4)
    assert store.list()[0].path.stat().st_ino == before
    # A damaged one is no commit worth keeping: it is replaced.
    store.list()[0].path.write_bytes(b"garbage")
    store.save({"marker": torch.tensor(-4)}, step=4, fingerprint=fingerprint)
    payload, step = store.load_latest(fingerprint)
    assert (step, payload["marker"].item()) == (4, -4)
    assert len(store.list()) == 1


def test_empty_directory_loads_nothing(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "ckpt")
    assert store.load_latest("0123456789abcdef") is None
    assert store.list() == []


def test_truncated_checkpoint_is_skipped_for_previous(tmp_path: Path, caplog) -> None:
    store, fingerprint = _store_with_steps(tmp_path, [1, 2, 3])
    newest = store.list()[-1].path
    size = newest.stat().st_size
    with open(newest, "r+b") as file:
        file.truncate(size // 2)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        payload, step = store.load_latest(fingerprint)
    assert (step, payload["marker"].item()) == (2, 2)
    assert str(newest) in caplog.text and "truncated" in caplog.text


def test_flipped_byte_is_detected_by_checksum(tmp_path: Path, caplog) -> None:
    store, fingerprint = _store_with_steps(tmp_path, [1, 2, 3])
    newest = store.list()[-1].path
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0x01
    newest.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        payload, step = store.load_latest(fingerprint)
    assert (step, payload["marker"].item()) == (2, 2)
    assert str(newest) in caplog.text and "sha256" in caplog.text


def test_a_payload_without_manifest_is_an_orphan_passed_over_then_removed(
    tmp_path: Path, caplog
) -> None:
    store, fingerprint = _store_with_steps(tmp_path, [1, 2, 3])
    newest = store.list()[-1]
    newest.path.with_suffix(".json").unlink()  # a save cut between its two renames
    info = next(info for info in store.list() if info.step == 3)
    assert info.orphan and not info.committed
    payload, step = store.load_latest(fingerprint)
    # Never committed, so not a damaged checkpoint: not counted among the skipped ones.
    assert (step, payload["marker"].item()) == (2, 2) and store.skipped == []
    assert store.last_resume == checkpoint.ResumePoint(store.directory, 2)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        reopened = CheckpointStore(store.directory, keep=5)
    assert reopened.orphans_removed == [newest.path.name]
    assert not newest.path.exists()
    assert "removed 1 leftover file(s) of cut checkpoint saves" in caplog.text
    assert newest.path.name in caplog.text


def test_damaged_manifest_is_skipped_not_taken_for_another_model(tmp_path: Path, caplog) -> None:
    store, fingerprint = _store_with_steps(tmp_path, [1, 2])
    manifest_path = store.list()[-1].path.with_suffix(".json")
    manifest = json.loads(manifest_path.read_text())
    manifest["fingerprint"] = "f" * 16  # as if a byte flipped inside the manifest
    manifest_path.write_text(json.dumps(manifest))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        _, step = store.load_latest(fingerprint)
    assert step == 1
    assert str(manifest_path) in caplog.text


def test_checkpoint_pruned_while_loading_is_skipped(tmp_path: Path, caplog) -> None:
    store, fingerprint = _store_with_steps(tmp_path, [1, 2])
    listed = store.list()
    listed[-1].path.unlink()  # a writer pruned it after this reader listed the directory
    store.list = lambda: listed  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        payload, step = store.load_latest(fingerprint)
    assert (step, payload["marker"].item()) == (1, 1)
    assert str(listed[-1].path) in caplog.text


def test_all_checkpoints_corrupt_loads_nothing(tmp_path: Path) -> None:
    store, fingerprint = _store_with_steps(tmp_path, [1, 2])
    for info in store.list():
        info.path.write_bytes(b"garbage")
    assert store.load_latest(fingerprint) is None


def test_checkpoint_of_another_model_is_refused(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "ckpt")
    model, optimizer, scheduler = _trained()
    theirs = model_fingerprint(model)
    store.save(_payload(model, optimizer, scheduler), step=10, fingerprint=theirs)
    ours = model_fingerprint(SmallCNN(channels=6))
    assert ours != theirs
    with pytest.raises(CheckpointError) as error:
        store.load_latest(ours)
    message = str(error.value)
    assert theirs in message and ours in message and "different model" in message


def test_fingerprint_depends_on_architecture_not_values() -> None:
    torch.manual_seed(0)
    a = SmallCNN()
    torch.manual_seed(1)
    b = SmallCNN()
    assert model_fingerprint(a) == model_fingerprint(b)
    model, _, _ = _trained()
    assert model_fingerprint(model) == model_fingerprint(a)  # training does not change it
    assert model_fingerprint(SmallCNN(channels=5)) != model_fingerprint(a)
    assert model_fingerprint(SmallCNN().double()) != model_fingerprint(a)


def test_leftover_temp_file_and_uncommitted_payload_leave_previous_loadable(
    tmp_path: Path,
) -> None:
    store, fingerprint = _store_with_steps(tmp_path, [1, 2])
    good = store.list()[-1].path.read_bytes()
    # A writer that died mid-write leaves a partial temporary file (here from a pid that cannot
    # be alive); one that died between the two renames leaves a payload without a manifest.
    dead_pid = 2**22 + 12345
    stale = store.directory / f".tmp-{socket.gethostname()}-{dead_pid}-abc"
    stale.write_bytes(good[: len(good) // 3])
    (store.directory / "ckpt-000000000003.pt").write_bytes(good)
    payload, step = store.load_latest(fingerprint)
    assert (step, payload["marker"].item()) == (2, 2)
    # The next save removes the dead writer's leftover and commits normally.
    store.save({"marker": torch.tensor(4)}, step=4, fingerprint=fingerprint)
    assert not stale.exists()
    payload, step = store.load_latest(fingerprint)
    assert (step, payload["marker"].item()) == (4, 4)


# Saves steps 1, 2, 3; during step 3 it stops at the named phase, says so, and waits to be killed.
_WRITER = textwrap.dedent(
    """
    import json, sys, time, torch
    from parsl_malleable.elastic import checkpoint
    directory, phase = sys.argv[1], sys.argv[2]
    step_now = 0

    def pause(where):
        if step_now == 3 and where == phase:
            print("paused", flush=True)
            time.sleep(60)

    write = checkpoint._HashingWriter.write
    def write_then_pause(self, data):
        written = write(self, data)
        if self.size > 1_000_000:
            pause("payload")
        return written
    checkpoint._HashingWriter.write = write_then_pause
    dumps = json.dumps
    def dumps_after_pause(*args, **kwargs):
        pause("manifest")
        return dumps(*args, **kwargs)
    checkpoint.json.dumps = dumps_after_pause
    replace = checkpoint.os.replace
    def replace_then_pause(src, dst):
        replace(src, dst)
        if str(dst).endswith(".pt"):
            pause("commit")
    checkpoint.os.replace = replace_then_pause

    store = checkpoint.CheckpointStore(directory, keep=5)
    for step_now in (1, 2, 3):
        payload = {"data": torch.full((500_000,), float(step_now)), "step": step_now}
        store.save(payload, step=step_now, fingerprint="f00d")
    print("finished", flush=True)
    """
)


@pytest.mark.parametrize("phase", ["payload", "manifest", "commit"])
def test_writer_killed_during_save_leaves_previous_checkpoint(tmp_path: Path, phase: str) -> None:
    """SIGKILL while the payload is half written, before the manifest is written, or between
    the payload's rename and the manifest's (the commit point); the leftovers are removed when
    the store next opens, and counted."""
    directory = tmp_path / "ckpt"
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(directory), phase], stdout=subprocess.PIPE, text=True
    )
    try:
        assert writer.stdout.readline().strip() == "paused"
        writer.send_signal(signal.SIGKILL)
    finally:
        writer.kill()
        writer.wait()
    names = sorted(p.name for p in directory.iterdir())
    leftovers = [name for name in names if name.startswith(".tmp-")]
    if phase == "commit":  # the payload is in place, its manifest still a temporary file
        assert "ckpt-000000000003.pt" in names and "ckpt-000000000003.json" not in names
        leftovers.append("ckpt-000000000003.pt")
    else:  # a torn temporary file, never a torn final file
        assert leftovers and "ckpt-000000000003.pt" not in names, names
    store = CheckpointStore(directory, keep=5)
    assert sorted(store.orphans_removed) == sorted(leftovers)
    assert not [p for p in directory.iterdir() if p.name in leftovers]
    payload, step = store.load_latest("f00d")
    assert (step, payload["step"]) == (2, 2) and store.skipped == []
    assert bool((payload["data"] == 2.0).all())


def test_save_refuses_objects_weights_only_cannot_load(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "ckpt")

    class Opaque:
        pass

    with pytest.raises(CheckpointError, match=r"payload\['user'\]\['thing'\] is a .*Opaque"):
        store.save({"user": {"thing": Opaque()}}, step=1, fingerprint="f00d")
    with pytest.raises(CheckpointError, match="numpy"):
        store.save({"arr": np.zeros(3)}, step=1, fingerprint="f00d")
    assert store.list() == []


def _touch(path: str) -> None:
    Path(path).touch()


class _Trojan:
    """Unpickling this with full pickle would call ``_touch`` (code execution)."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (_touch, (self.marker,))


def _sign(store: CheckpointStore, manifest: dict) -> None:
    """Sign ``manifest`` as the store would: what only a holder of the key can do."""
    master = store.trust.master_key(create=False)
    assert master is not None
    key = checkpoint_trust.job_key(master, manifest["campaign"], manifest["job"])
    manifest["mac"] = checkpoint_trust.manifest_mac(manifest, key)


def test_load_refuses_pickled_arbitrary_object_even_with_valid_checksum(tmp_path: Path) -> None:
    """Defence in depth: even a checkpoint its key vouches for (written by someone holding the
    key) cannot run code when loaded."""
    store, fingerprint = _store_with_steps(tmp_path, [1])
    marker = tmp_path / "code-ran"
    # Forge a checkpoint: a valid envelope and manifest, but a payload holding a pickled object.
    forged = store.save({"marker": torch.tensor(2)}, step=2, fingerprint=fingerprint)
    envelope = torch.load(forged, weights_only=True)
    envelope["payload"]["evil"] = _Trojan(marker)
    torch.save(envelope, forged)
    manifest_path = forged.with_suffix(".json")
    manifest = json.loads(manifest_path.read_text())
    data = forged.read_bytes()
    manifest.update(size=len(data), sha256=hashlib.sha256(data).hexdigest())
    _sign(store, manifest)
    manifest_path.write_text(json.dumps(manifest))

    with pytest.raises(CheckpointError, match="weights_only"):
        store.load_latest(fingerprint)
    assert not marker.exists()


def test_bad_arguments_are_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="keep"):
        CheckpointStore(tmp_path / "x", keep=0)
    store = CheckpointStore(tmp_path / "x")
    with pytest.raises(CheckpointError, match="step"):
        store.save({}, step=-1, fingerprint="f00d")
    with pytest.raises(CheckpointError, match="dict"):
        store.save([1, 2], step=1, fingerprint="f00d")  # type: ignore[arg-type]
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(CheckpointError, match=str(blocker)):
        CheckpointStore(blocker / "sub")


def test_a_stray_payload_without_manifest_is_removed_not_counted(tmp_path: Path) -> None:
    # A higher-numbered .pt without a manifest: with keep=1 it used to count as the newest, so
    # each new checkpoint was deleted right after it was written. It is an orphan: never a
    # checkpoint; the next save removes it.
    store, fingerprint = _store_with_steps(tmp_path, [10], keep=1)
    stray = store.directory / "ckpt-000000009999.pt"
    stray.write_bytes(b"not ours")
    for step in (20, 30):
        store.save({"marker": torch.tensor(step)}, step=step, fingerprint=fingerprint)
    payload, step = store.load_latest(fingerprint)
    assert (step, payload["marker"].item()) == (30, 30)
    assert [info.step for info in store.list()] == [30]
    assert not stray.exists() and store.orphans_removed == [stray.name]


def test_a_save_in_progress_is_waited_for_and_never_swept(tmp_path: Path) -> None:
    store, _ = _store_with_steps(tmp_path, [1])
    # Another process in the middle of a save: it holds the lock, its payload is in place
    # and its manifest not yet.
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_LOCK, str(store.directory)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        in_flight = store.directory / "ckpt-000000000002.pt"
        in_flight.write_bytes(b"being committed")
        assert CheckpointStore(store.directory).orphans_removed == []  # not swept meanwhile
        assert in_flight.exists()
        holder.send_signal(signal.SIGUSR1)  # it lets go after a moment; the reader waits
        point = checkpoint.resume_step(store.directory)
        assert point.step == 1 and point.skipped == ()
    finally:
        holder.kill()
        holder.wait()
    assert not in_flight.exists()  # its writer died without committing: swept by resume_step


_HOLD_LOCK = textwrap.dedent(
    """
    import fcntl, os, signal, sys, time
    fd = os.open(os.path.join(sys.argv[1], ".parsl-malleable-checkpoint.lock"), os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    signal.signal(signal.SIGUSR1, lambda *_: (time.sleep(0.5), os._exit(0)))
    print("locked", flush=True)
    time.sleep(60)
    """
)


def test_a_directory_of_another_user_is_explained_not_chmodded(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("giving a directory to another user needs root (CI runs as root)")
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, 65534, 65534)
    with pytest.raises(CheckpointError, match="belongs to uid 65534, not to this user"):
        CheckpointStore(theirs)
    assert stat.S_IMODE(theirs.stat().st_mode) == 0o755  # left as its owner set it


# Saves ``first`` steps, then limits the process's file size (RLIMIT_FSIZE: writes past it fail
# with EFBIG, as they do with ENOSPC on a full disk) and saves a large payload at ``step``.
_FULL_DISK = textwrap.dedent(
    """
    import resource, signal, sys, torch
    from parsl_malleable.elastic.checkpoint import CheckpointError, CheckpointStore
    directory, step = sys.argv[1], int(sys.argv[2])
    store = CheckpointStore(directory, keep=3)
    for first in (1, 2):
        store.save({"data": torch.full((1000,), float(first))}, step=first, fingerprint="f00d")
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, resource.RLIM_INFINITY))
    try:
        store.save({"data": torch.zeros(1_000_000)}, step=step, fingerprint="f00d")
    except CheckpointError as exc:
        print(exc)
    """
)


@pytest.mark.parametrize("step", [3, 2])
def test_a_full_disk_fails_the_save_clearly_and_keeps_every_checkpoint(
    tmp_path: Path, step: int
) -> None:
    """A new step, and a step saved again (a job's last save repeats its last periodic one)."""
    directory = tmp_path / "ckpt"
    done = subprocess.run(
        [sys.executable, "-c", _FULL_DISK, str(directory), str(step)],
        capture_output=True,
        text=True,
        check=True,
    )
    message = done.stdout.strip()
    if step == 2:  # committed and intact already: kept, nothing is written
        assert message == ""
    else:
        assert message.startswith(f"could not write the checkpoint of step {step} to {directory}")
        assert "File too large" in message and "the newest checkpoint kept is step 2" in message
    store = CheckpointStore(directory, keep=3)
    payload, loaded = store.load_latest("f00d")
    assert loaded == 2 and bool((payload["data"] == 2.0).all())
    assert [info.step for info in store.list() if info.committed] == [1, 2]
    assert not [p.name for p in directory.iterdir() if p.name.startswith(".tmp-")]


# A rank's save on a disk that fills up between two commits (its checkpoints part on a real
# store; the rest of the rank is not needed to save).
_RANK_SAVE = textwrap.dedent(
    """
    import logging, resource, signal, sys, torch
    from parsl_malleable.elastic.messages import CheckpointPolicy
    from parsl_malleable.elastic.rank_checkpoints import RankCheckpoints
    from parsl_malleable.elastic.state import ElasticState
    logging.basicConfig(stream=sys.stdout, format="%(levelname)s %(message)s")
    state = ElasticState(torch.nn.Linear(500, 500))
    rank = RankCheckpoints(sys.argv[1], 3, CheckpointPolicy(), warn=print)
    state.commit()
    print("saved", rank.save(state), flush=True)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, resource.RLIM_INFINITY))
    state.commit()
    print("saved", rank.save(state), "failed", rank.failed, flush=True)
    state.commit()
    print("in memory", state.committed()["step"], flush=True)
    """
)


def test_a_rank_whose_checkpoint_fails_warns_and_trains_on(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    done = subprocess.run(
        [sys.executable, "-c", _RANK_SAVE, str(directory)],
        capture_output=True,
        text=True,
        check=True,
    )
    lines = done.stdout.splitlines()
    assert lines[0] == "saved 1"
    assert lines[1].startswith("WARNING checkpoint not written, training goes on from memory: ")
    assert "step 2" in lines[1] and "File too large" in lines[1]
    assert "the newest checkpoint kept is step 1" in lines[1]
    assert lines[2:] == ["saved None failed 1", "in memory 3"]
    loaded = CheckpointStore(directory).load_latest(model_fingerprint(torch.nn.Linear(500, 500)))
    assert loaded is not None and loaded[1] == 1
