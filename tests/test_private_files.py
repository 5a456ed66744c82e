"""parsl_malleable/private_files.py: what is read back is a regular file of this user that others
cannot change (nor read, for a secret), checked on the very file read; folders are made private."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from parsl_malleable.errors import UnsafePathError
from parsl_malleable.private_files import (
    check_private_file,
    private_dir,
    read_private_bytes,
    read_regular_file,
    write_private_bytes,
)

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


def test_a_written_file_is_0600_and_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    write_private_bytes(path, b"one")
    write_private_bytes(path, b"two")  # replaces it whole
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_private_bytes(path, secret=True) == b"two"
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]  # no temporary file left


@pytest.mark.parametrize(
    ("mode", "secret", "refused"),
    [(0o644, False, None), (0o664, False, "its group can change it"),
     (0o646, False, "other users can change it"), (0o640, True, "its group can read or change"),
     (0o600, True, None)],
)  # fmt: skip
def test_loose_modes_are_refused_by_who_can_act(
    tmp_path: Path, mode: int, secret: bool, refused: str | None
) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x")
    os.chmod(path, mode)
    if refused is None:
        assert read_private_bytes(path, secret=secret) == b"x"
        assert check_private_file(path, secret=secret)
        return
    with pytest.raises(UnsafePathError, match=f"refusing to read {path}: its mode is .*{refused}"):
        read_private_bytes(path, secret=secret)
    with pytest.raises(UnsafePathError, match=f"refusing to open {path}: its mode"):
        check_private_file(path, secret=secret)


def test_a_link_is_refused_and_a_fifo_does_not_block(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_bytes(b"secret")
    os.chmod(target, 0o600)
    link = tmp_path / "link"
    link.symlink_to(target)
    for read in (read_private_bytes, read_regular_file):
        with pytest.raises(UnsafePathError, match="symbolic link"):
            read(link)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        check_private_file(link)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    outcome: list[BaseException] = []

    def read_fifo() -> None:
        try:
            read_private_bytes(fifo)
        except BaseException as exc:  # handed to the test's thread
            outcome.append(exc)

    reader = threading.Thread(target=read_fifo, daemon=True)
    reader.start()
    reader.join(timeout=30)  # a blocking open would hang here until a writer came
    assert not reader.is_alive(), "reading a FIFO blocked"
    assert isinstance(outcome[0], UnsafePathError) and "not a regular file" in str(outcome[0])


def test_a_missing_file_is_the_callers_case(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_private_bytes(tmp_path / "absent")
    assert check_private_file(tmp_path / "absent") is False


@needs_root
def test_another_users_file_is_read_only_without_trust(tmp_path: Path) -> None:
    path = tmp_path / "planted"
    path.write_bytes(b"payload")
    os.chmod(path, 0o600)
    os.chown(path, 12345, 12345)
    with pytest.raises(UnsafePathError, match="belongs to uid 12345, not to this user"):
        read_private_bytes(path)
    data, info = read_regular_file(path)  # the raw read leaves the verdict to its caller
    assert data == b"payload" and info.st_uid == 12345


def test_folders_are_created_private_narrowed_or_refused(tmp_path: Path) -> None:
    made = private_dir(tmp_path / "a" / "b")
    assert stat.S_IMODE(made.stat().st_mode) == 0o700
    readable = tmp_path / "readable"
    readable.mkdir(mode=0o755)
    os.chmod(readable, 0o755)
    private_dir(readable)
    assert stat.S_IMODE(readable.stat().st_mode) == 0o700  # narrowed: others could only read
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.raises(UnsafePathError, match=r"mode is 0777, so its group and other users can"):
        private_dir(shared, what="output folder")
    assert stat.S_IMODE(shared.stat().st_mode) == 0o777  # refused, not changed behind the user
    link = tmp_path / "link"
    link.symlink_to(made)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        private_dir(link)
