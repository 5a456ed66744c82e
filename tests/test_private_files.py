"""parsl_malleable/private_files.py: what is read back is a regular file of this user that others
cannot change (nor read, for a secret), checked on the very file read; folders are made private."""

from __future__ import annotations

import grp
import os
import pwd
import stat
import threading
from pathlib import Path

import pytest

from parsl_malleable import private_files
from parsl_malleable.errors import UnsafePathError
from parsl_malleable.private_files import (
    PrivateFolder,
    check_parents,
    check_private_file,
    parent_problem,
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


# ----------------------------------------------------------- the folders above a folder


def _folder(path: Path, mode: int, uid: int = -1, gid: int = -1) -> Path:
    path.mkdir()
    os.chown(path, uid, gid)
    os.chmod(path, mode)  # after chown, which clears the set-group-id bit
    return path


def _no_such_group() -> int:
    gid = 54321
    while True:
        try:
            grp.getgrgid(gid)
        except KeyError:
            return gid
        gid += 1


@needs_root
def test_a_parent_its_group_can_write_is_refused_with_the_fix(tmp_path: Path) -> None:
    project = _folder(tmp_path / "project", 0o2770, gid=_no_such_group())
    with pytest.raises(UnsafePathError, match="above it has mode 2770, so its group can rename"):
        private_dir(project / "out", what="output folder")
    assert not (project / "out").exists()  # refused before it was made
    problem = parent_problem(project / "out")
    assert problem is not None and f"chmod g-w,o-w {project}" in problem
    os.chmod(project, 0o2750)
    assert parent_problem(project / "out") is None
    private_dir(project / "out")


@needs_root
def test_a_sticky_parent_keeps_our_child_but_not_another_users(tmp_path: Path) -> None:
    shared = _folder(tmp_path / "shared", 0o1777)
    private_dir(shared / "mine")  # made by this user: others may not rename it in /tmp
    assert parent_problem(shared / "mine" / "deeper") is None
    theirs = _folder(shared / "theirs", 0o700, uid=12345, gid=12345)
    # Their entry in a sticky folder: they may rename it and put another in its place.
    problem = parent_problem(theirs / "out")
    assert (
        problem is not None
        and f"{theirs} above it belongs to uid 12345 and sits in the sticky" in problem
    )
    with pytest.raises(UnsafePathError, match=r"sticky folder .* \(mode 1777\)"):
        private_dir(theirs / "out")
    os.chmod(shared, 0o777)  # not sticky: even our own child could be renamed
    with pytest.raises(UnsafePathError, match="mode 0777"):
        check_parents(shared / "mine")


@needs_root
def test_a_parent_owned_by_another_uid_is_refused(tmp_path: Path) -> None:
    theirs = _folder(tmp_path / "theirs", 0o755, uid=12345, gid=12345)
    with pytest.raises(UnsafePathError, match=f"the folder {theirs} above it belongs to uid 12345"):
        private_dir(theirs / "out", what="output folder")
    assert not (theirs / "out").exists()


@needs_root
def test_a_linked_path_is_judged_where_it_leads_and_where_its_links_sit(tmp_path: Path) -> None:
    safe = private_dir(tmp_path / "safe")
    project = _folder(tmp_path / "project", 0o2770, gid=_no_such_group())
    (project / "real").mkdir(mode=0o700)
    into_project = safe / "to-project"
    into_project.symlink_to(project / "real")  # our link, in our folder, into a loose one
    problem = parent_problem(into_project / "out")
    assert problem is not None and f"{project} above it has mode 2770" in problem
    into_safe = project / "to-safe"
    into_safe.symlink_to(safe)  # leads somewhere safe, but its group can repoint it
    problem = parent_problem(into_safe / "out")
    assert problem is not None and f"through the symbolic link {into_safe}" in problem
    mine = tmp_path / "mine"
    mine.symlink_to(safe)
    assert parent_problem(mine / "out") is None  # our link in our folder, to a safe place
    assert private_dir(mine / "out").is_dir()
    relative = safe / "relative"
    relative.symlink_to(Path("..") / "project" / "real")
    problem = parent_problem(relative / "out")
    assert problem is not None and f"{project} above it" in problem


def test_a_group_is_ours_only_when_no_other_user_is_in_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A group-writable parent passes when the group is this user's own (a user-private group,
    as OpenSSH's StrictModes allows), not when another user has it as their primary group,
    which the group's member list does not show."""
    me, gid = os.geteuid(), os.getegid()
    name = pwd.getpwuid(me).pw_name
    folder = tmp_path / "upg"
    folder.mkdir()
    os.chown(folder, -1, gid)
    os.chmod(folder, 0o770)
    users: list[pwd.struct_passwd] = [pwd.getpwuid(me)]
    monkeypatch.setattr(private_files.pwd, "getpwall", lambda: users)
    monkeypatch.setattr(
        private_files.grp,
        "getgrgid",
        lambda g: grp.struct_group(("mine", "x", g, [name])),
    )
    assert parent_problem(folder / "out") is None
    other = pwd.struct_passwd(("eve", "x", me + 4242, gid, "", "/", "/bin/sh"))
    users.append(other)  # eve's primary group is ours: she can write the folder too
    problem = parent_problem(folder / "out")
    assert problem is not None and "so its group can rename" in problem


# --------------------------------------------------------------- a folder held open


def test_a_private_folder_writes_atomically_through_its_descriptor(tmp_path: Path) -> None:
    with PrivateFolder(tmp_path / "blocks") as folder:
        assert stat.S_IMODE((tmp_path / "blocks").stat().st_mode) == 0o700
        written = folder.write_text("a.sh", "one", mode=0o700)
        assert written == folder.path / "a.sh" == folder.path_of("a.sh")
        assert stat.S_IMODE(written.stat().st_mode) == 0o700
        folder.write_bytes("a.sh", b"two")
        assert stat.S_IMODE(written.stat().st_mode) == 0o600
        assert folder.read_bytes("a.sh") == b"two" and folder.read_text("a.sh") == "two"
        # A link planted under a name is replaced, never written through.
        target = tmp_path / "target"
        target.write_text("untouched")
        (tmp_path / "blocks" / "b.command").symlink_to(target)
        folder.write_text("b.command", "new")
        assert target.read_text() == "untouched"
        assert not (tmp_path / "blocks" / "b.command").is_symlink()
        with pytest.raises(UnsafePathError, match="symbolic link"):
            (tmp_path / "blocks" / "c").symlink_to(target)
            folder.read_bytes("c")
        with pytest.raises(UnsafePathError, match="symbolic link"):
            folder.touch("c")
        assert target.read_text() == "untouched"
        beat = folder.touch("beat")
        first = beat.stat().st_mtime_ns
        os.utime(beat, ns=(0, 0))
        folder.touch("beat")
        assert beat.stat().st_mtime_ns >= first and beat.read_bytes() == b""
        for bad in ("", ".", "..", "../escape", "x/y"):
            with pytest.raises(ValueError, match="not a file name inside"):
                folder.write_text(bad, "x")
        assert sorted(p.name for p in (tmp_path / "blocks").iterdir()) == [
            "a.sh",
            "b.command",
            "beat",
            "c",
        ]  # no temporary file left
    assert folder.fileno() == -1
    with pytest.raises(ValueError, match="closed"):
        folder.write_text("late", "x")


def test_a_private_folder_renamed_mid_run_still_gets_the_writes(tmp_path: Path) -> None:
    """The attack: the folder renamed after its check and another put in its place. Writes go
    to the folder checked (now under its new name), never into the one swapped in; the path
    no longer naming it is said before anything is run by that path."""
    with PrivateFolder(tmp_path / "blocks") as folder:
        folder.write_text("first", "1")
        assert folder.in_place()
        (tmp_path / "blocks").rename(tmp_path / "moved")
        (tmp_path / "blocks").mkdir()
        (tmp_path / "blocks" / "later").symlink_to(tmp_path / "elsewhere")
        folder.write_text("later", "2")
        assert (tmp_path / "moved" / "later").read_text() == "2"
        assert [p.name for p in (tmp_path / "blocks").iterdir()] == ["later"]
        assert (tmp_path / "blocks" / "later").is_symlink()
        assert not (tmp_path / "elsewhere").exists()
        assert not folder.in_place()
        with pytest.raises(UnsafePathError, match="no longer the folder that was checked"):
            folder.check_in_place()


def test_a_private_folder_refuses_what_private_dir_refuses(tmp_path: Path) -> None:
    loose = tmp_path / "loose"
    loose.mkdir()
    os.chmod(loose, 0o777)
    with pytest.raises(UnsafePathError, match="mode is 0777"):
        PrivateFolder(loose, what="block script folder")
    link = tmp_path / "link"
    link.symlink_to(tmp_path)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        PrivateFolder(link)


def test_a_file_in_the_way_is_said_by_the_folder_it_blocks(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("")
    assert parent_problem(tmp_path / "afile" / "x" / "y") is None  # nobody else can act there
    with pytest.raises(UnsafePathError, match=r"cannot create the folder .*: Not a directory"):
        private_dir(tmp_path / "afile" / "x")
