"""Folders and files that only this user can change: made private, checked before they are read.

HPC users share login nodes, and their output folders often live in project directories that a
whole group can write. Anything the project reads back from such a place (the campaign state,
checkpoints, keys, logs it parses) could have been planted or swapped by another user, and
anything it writes there could be read by them. So, as ssh's StrictModes does:

* a folder the project writes into is created ``0700``; an existing one that another user can
  change (group or other write bits) or that belongs to someone else is refused, with its mode
  and the fix; one the user owns with only read bits for others is narrowed to ``0700``;
* a file is read back only through one open that never follows a symbolic link nor blocks on a
  FIFO, and only when it is a regular file owned by this user that nobody else may change (nor
  read, for a secret); the checks and the read use the same open file, so the file checked is the
  file read;
* a folder or file is trusted only when no folder above it lets another user replace it: every
  parent must belong to root or this user and be writable by nobody else, except a sticky
  folder (``/tmp``), where others may not rename what they do not own, so only a child this user
  (or root) owns is safe there; a group-writable parent is accepted only when the group is this
  user's own (no other member), as OpenSSH's ``StrictModes`` judges it;
* a file is written atomically (a fresh ``0600`` temporary file, then a rename), so a reader
  sees the old file or the new one, never half of one.
* a folder written into mid-run (the blocks' scripts) is held open once checked
  (:class:`PrivateFolder`) and its files are created relative to that descriptor (``openat``,
  ``O_EXCL | O_NOFOLLOW``, renamed within it), so a rename of the folder after its check cannot
  redirect a write; a path handed on (to bash, to the scheduler) is checked to still name it.
"""

from __future__ import annotations

import contextlib
import errno
import grp
import itertools
import logging
import os
import pwd
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from parsl_malleable.errors import UnsafePathError

logger = logging.getLogger(__name__)

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
_OTHERS_WRITE = 0o022
_OTHERS_ANY = 0o077


def _who(bits: int) -> str:
    return " and ".join(
        name for mask, name in ((0o070, "its group"), (0o007, "other users")) if bits & mask
    )


def _owner_problem(info: os.stat_result) -> str | None:
    me = os.geteuid()
    if info.st_uid == me:
        return None
    return (
        f"it belongs to uid {info.st_uid}, not to this user (uid {me}), so someone else could "
        "have written it"
    )


def _group_is_mine(gid: int) -> bool:
    """Whether group ``gid`` holds nobody but this user (a user-private group), as OpenSSH
    (Debian's ``StrictModes`` for group-writable homes) accepts it: its write bit then lets no
    one else act. Nobody else may be listed in it nor have it as their primary group (which
    ``gr_mem`` does not show: a shared ``users`` group usually lists no one)."""
    me = os.geteuid()
    if gid != os.getegid():
        return False
    try:
        name = pwd.getpwuid(me).pw_name
        members = grp.getgrgid(gid).gr_mem
    except KeyError:
        return False
    if any(member != name for member in members):
        return False
    return not any(entry.pw_gid == gid and entry.pw_uid != me for entry in pwd.getpwall())


def _has_acl(folder: Path) -> bool:
    """Whether ``folder`` carries a POSIX access ACL: its group bits are then the ACL's mask,
    which may give write to named users whatever the owning group is."""
    try:
        os.getxattr(folder, "system.posix_acl_access")
    except OSError:  # none (ENODATA), or a file system without ACLs (ENOTSUP)
        return False
    return True


def _resolve(path: Path) -> tuple[Path, list[Path]]:
    """``path`` with every symbolic link followed (a missing tail kept as written), and the
    links met on the way: each is a name someone could point elsewhere, so the folders that
    hold it are judged too. :class:`UnsafePathError` for a link loop."""
    links: list[Path] = []
    pending = list((Path.cwd() / path).parts[1:])  # '..' kept: it applies after a link
    current = Path("/")
    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            current = current.parent
            continue
        step = current / part
        try:
            info = os.lstat(step)
        except (FileNotFoundError, NotADirectoryError):
            current = step  # not made yet: created by this user, under what is judged
            continue
        if not stat.S_ISLNK(info.st_mode):
            current = step
            continue
        links.append(step)
        if len(links) > 40:
            raise UnsafePathError(f"refusing {path}: too many symbolic links (a loop?)")
        target = Path(os.readlink(step))
        if target.is_absolute():
            current = Path("/")
        pending[:0] = list(target.parts[1:] if target.is_absolute() else target.parts)
    return current, links


def _chain_problem(target: Path) -> str | None:
    """Why another user could replace ``target`` (a path without links) through a folder
    above it, or None; the rule of :func:`parent_problem`."""
    me = os.geteuid()
    chain = [target, *target.parents]
    chain.reverse()  # "/" first
    for folder, child in itertools.pairwise(chain):
        try:
            info = os.stat(folder)
        except (FileNotFoundError, NotADirectoryError):
            # The rest is created by this user, private (or cannot be: a file is in the way,
            # which creating the folder reports).
            return None
        try:
            entry: os.stat_result | None = os.lstat(child)
        except (FileNotFoundError, NotADirectoryError):
            entry = None
        if info.st_uid not in (0, me):
            return (
                f"the folder {folder} above it belongs to uid {info.st_uid}, who can rename or "
                "replace anything in it; use a path under folders only you (or root) own"
            )
        mode = stat.S_IMODE(info.st_mode)
        loose = others_write_bits(folder, info)
        if not loose:
            continue
        if mode & stat.S_ISVTX and (entry is None or entry.st_uid in (0, me)):
            # Sticky (/tmp): only an entry's owner (or the folder's, checked above) may rename
            # or remove it, so an entry of ours cannot be swapped; a missing one is made ours.
            continue
        if mode & stat.S_ISVTX:
            assert entry is not None
            return (
                f"the folder {child} above it belongs to uid {entry.st_uid} and sits in the "
                f"sticky folder {folder} (mode {mode:04o}), so they can rename it and put their "
                "own in its place; "
                "use a path under a folder you own"
            )
        return (
            f"the folder {folder} above it has mode {mode:04o}, so {_who(loose)} can rename "
            "it and put their own in its place mid-run. Fix: `chmod g-w,o-w "
            f"{folder}` (or `chmod +t` it), or use a path under a folder only you can write"
        )
    return None


def parent_problem(path: Path | str) -> str | None:
    """Why another user could replace ``path`` through a folder above it, or None.

    The path is resolved (its links followed) and each folder from ``/`` down to the one that
    holds it is judged: it must belong to root or this user, and no one else may write it,
    unless it is sticky (only an entry's owner may rename it there) and the entry below it
    belongs to root or this user. A group-writable folder passes when its group is this user's
    alone (:func:`_group_is_mine`) and no ACL widens it. Each symbolic link met on the way is
    judged the same way (the folders above it, and the link as the entry): whoever can
    replace a link can point the path elsewhere. A missing tail (a folder not made yet) is
    judged from its nearest existing ancestor, as it will be created private under it."""
    target, links = _resolve(Path(path).expanduser())
    for link in links:
        problem = _chain_problem(link)
        if problem:
            return f"through the symbolic link {link}: {problem}"
    return _chain_problem(target)


def check_parents(path: Path | str, *, what: str = "folder") -> None:
    """:class:`UnsafePathError` naming the folder above ``path`` that lets another user
    replace it (:func:`parent_problem`), for the ``what`` the user gave."""
    problem = parent_problem(path)
    if problem:
        raise UnsafePathError(f"refusing the {what} {path}: {problem}")


def _existing_dir(path: Path, *, what: str, acting: str, new_path_hint: bool) -> os.stat_result:
    """The status of the existing folder ``path``; :class:`UnsafePathError` for a symbolic
    link, a non-folder, another user's folder, or one others can write (the message says what
    this ``acting`` would do for them, and with ``new_path_hint`` that a new path is made
    private)."""
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        raise UnsafePathError(
            f"refusing the {what} {path}: it is a symbolic link, which another user could point "
            "anywhere; give the folder itself"
        )
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafePathError(f"refusing the {what} {path}: it is not a folder")
    problem = _owner_problem(info)
    if problem:
        hint = "; give a folder you own (a new path is created private)" if new_path_hint else ""
        raise UnsafePathError(f"refusing the {what} {path}: {problem}{hint}")
    mode = stat.S_IMODE(info.st_mode)
    if mode & _OTHERS_WRITE:
        hint = ", or give a new path, which is created private" if new_path_hint else ""
        raise UnsafePathError(
            f"refusing the {what} {path}: its mode is {mode:04o}, so {_who(mode & _OTHERS_WRITE)} "
            f"can add, replace or remove its files (a planted file could make this {acting} act "
            f"for them). Fix: check its contents, then `chmod 700 {path}`{hint}"
        )
    return info


def private_dir(path: Path | str, *, what: str = "folder") -> Path:
    """Create ``path`` (and its missing parents) private to this user, or check and narrow an
    existing one; the path. :class:`UnsafePathError` (naming the folder, its mode and the fix)
    for a symbolic link, a non-folder, a folder of another user, one others can write, or one
    under a parent that lets others replace it (:func:`check_parents`)."""
    path = Path(path).expanduser()
    check_parents(path, what=what)
    try:
        path.mkdir(mode=PRIVATE_DIR_MODE, parents=True)
    except FileExistsError:
        pass
    except OSError as exc:
        raise UnsafePathError(f"cannot create the {what} {path}: {exc.strerror}") from exc
    # Again: another user may have made a missing parent (in /tmp, say) after the first check.
    check_parents(path, what=what)
    info = _existing_dir(path, what=what, acting="run", new_path_hint=True)
    mode = stat.S_IMODE(info.st_mode)
    if mode & _OTHERS_ANY:
        os.chmod(path, PRIVATE_DIR_MODE)
        logger.info("%s %s narrowed from mode %04o to 0700", what, path, mode)
    return path


@contextlib.contextmanager
def _opened_regular(
    path: Path, *, dir_fd: int | None = None, shown: Path | None = None
) -> Iterator[tuple[BinaryIO, os.stat_result]]:
    """``path`` (relative to the folder ``dir_fd`` when given; ``shown`` in messages) open
    for reading, with its status: one open that follows no symbolic link and never blocks on a
    FIFO; :class:`UnsafePathError` for a link or anything but a regular file. Checks made on
    the status are checks of the file then read."""
    shown = path if shown is None else shown
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePathError(
                f"refusing to read {shown}: it is a symbolic link, which could point anywhere"
            ) from exc
        raise
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise UnsafePathError(f"refusing to read {shown}: it is not a regular file")
        yield file, info


def read_regular_file(path: Path | str) -> tuple[bytes, os.stat_result]:
    """The bytes of ``path`` and the status of the file read, whoever owns it (the caller
    judges the owner and mode); :class:`UnsafePathError` for a link or anything but a regular
    file. ``FileNotFoundError`` passes through."""
    with _opened_regular(Path(path)) as (file, info):
        return file.read(), info


def _file_problem(info: os.stat_result, *, secret: bool) -> str | None:
    """Why a file with status ``info`` cannot be trusted (not a regular file, another user's,
    changeable by others, or readable by them for a ``secret``), or None."""
    if not stat.S_ISREG(info.st_mode):
        return "it is not a regular file"
    problem = _owner_problem(info)
    if problem:
        return f"{problem}; delete it if it is not yours"
    mode = stat.S_IMODE(info.st_mode)
    loose = mode & (_OTHERS_ANY if secret else _OTHERS_WRITE)
    if not loose:
        return None
    if secret:
        return f"its mode is {mode:04o}: {_who(loose)} can read or change it; chmod 600 it"
    return (
        f"its mode is {mode:04o}: {_who(loose)} can change it, so it may have been replaced; "
        "chmod 600 it if you trust its contents, or delete it"
    )


def read_private_bytes(path: Path | str, *, secret: bool = False) -> bytes:
    """The bytes of ``path``, read through one open that follows no link and never blocks;
    :class:`UnsafePathError` unless it is a regular file of this user that nobody else may
    change (nor read, with ``secret``). ``FileNotFoundError`` passes through: a missing file is
    the caller's case."""
    path = Path(path)
    with _opened_regular(path) as (file, info):
        problem = _file_problem(info, secret=secret)
        if problem:
            raise UnsafePathError(f"refusing to read {path}: {problem}")
        return file.read()


def check_private_file(path: Path | str, *, secret: bool = False) -> bool:
    """Whether ``path`` exists, checked as :func:`read_private_bytes` would read it, for files a
    library opens by name (SQLite): :class:`UnsafePathError` when it is a link, not a regular
    file, another user's, or changeable by others."""
    path = Path(path)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(info.st_mode):
        raise UnsafePathError(
            f"refusing to open {path}: it is a symbolic link, which could point anywhere"
        )
    problem = _file_problem(info, secret=secret)
    if problem:
        raise UnsafePathError(f"refusing to open {path}: {problem}")
    return True


def write_private_bytes(path: Path | str, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically, mode 0600: a new temporary file beside it (never
    through a link; an old one of the same name is replaced), flushed to disk, then renamed."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, PRIVATE_FILE_MODE)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


class PrivateFolder:
    """A private folder held open: the files written into it and read from it are those of the
    folder that was checked, whatever its path names later.

    Checking a path and then writing by that path leaves a gap: a folder renamed after the
    check, and another put in its place, would receive every later write (a block's command,
    then swapped before bash ran it). So the folder is checked (:func:`private_dir`, its
    parents included), opened once with ``O_DIRECTORY | O_NOFOLLOW`` and judged again through
    the descriptor; every file is then created relative to that descriptor (``openat`` with
    ``O_EXCL | O_NOFOLLOW``) and renamed into place within it, so a rename of the folder or of
    any folder above it cannot redirect a write. What is later run or read by its path (a
    script the scheduler starts) is only as safe as that path still naming this folder:
    :meth:`check_in_place` says so before the path is handed on.

    Use it as a context manager, or :meth:`close` it.
    """

    def __init__(self, path: Path | str, *, what: str = "folder") -> None:
        checked = private_dir(path, what=what)
        self.what = what
        # The names handed to others (scripts, the scheduler) are of the folder checked.
        self.path = Path(os.path.realpath(checked))
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(checked, flags)
        except OSError as exc:
            raise UnsafePathError(
                f"cannot open the {what} {checked}: {exc.strerror} (it changed since its check)"
            ) from exc
        try:
            info = os.fstat(fd)
            # The folder held, judged itself: one swapped in between the check and the open
            # is refused here.
            problem = _owner_problem(info)
            if problem is None and stat.S_IMODE(info.st_mode) & _OTHERS_WRITE:
                problem = f"its mode is {stat.S_IMODE(info.st_mode):04o}, which others can write"
            if problem:
                raise UnsafePathError(f"refusing the {what} {checked}: {problem}")
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._identity = (info.st_dev, info.st_ino)

    def __enter__(self) -> PrivateFolder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PrivateFolder({str(self.path)!r}, fd={self._fd})"

    def fileno(self) -> int:
        """The folder's descriptor (-1 once closed)."""
        return self._fd

    def close(self) -> None:
        """Let the folder go (again: nothing)."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def _name(self, name: str) -> str:
        # One name in this folder: a slash or ".." would lead out of the folder held.
        if name in ("", ".", "..") or "/" in name or "\0" in name:
            raise ValueError(f"{name!r} is not a file name inside the {self.what} {self.path}")
        if self._fd < 0:
            raise ValueError(f"the {self.what} {self.path} is closed")
        return name

    def path_of(self, name: str) -> Path:
        """The path of file ``name`` in this folder, for whoever must open it by name."""
        return self.path / self._name(name)

    def write_bytes(self, name: str, data: bytes, *, mode: int = PRIVATE_FILE_MODE) -> Path:
        """Write ``data`` to file ``name`` in this folder atomically with ``mode`` (a fresh
        temporary file made with ``O_EXCL | O_NOFOLLOW`` relative to the folder's descriptor,
        flushed, then renamed over ``name`` within the same folder: a link planted under
        ``name`` is replaced, never followed); its path."""
        name = self._name(name)
        tmp = f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp, flags, PRIVATE_FILE_MODE, dir_fd=self._fd)
        try:
            with os.fdopen(fd, "wb") as file:
                os.fchmod(file.fileno(), mode)  # exactly ``mode``, whatever the umask
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            os.replace(tmp, name, src_dir_fd=self._fd, dst_dir_fd=self._fd)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=self._fd)
            raise
        return self.path / name

    def write_text(self, name: str, text: str, *, mode: int = PRIVATE_FILE_MODE) -> Path:
        """:meth:`write_bytes` of ``text`` in UTF-8; its path."""
        return self.write_bytes(name, text.encode(), mode=mode)

    def read_bytes(self, name: str, *, secret: bool = False) -> bytes:
        """The bytes of file ``name`` in this folder, read as :func:`read_private_bytes` reads
        (no link followed, no FIFO waited on, a regular file of this user others cannot
        change), through the folder's descriptor. ``FileNotFoundError`` passes through."""
        shown = self.path / self._name(name)
        with _opened_regular(Path(name), dir_fd=self._fd, shown=shown) as (file, info):
            problem = _file_problem(info, secret=secret)
            if problem:
                raise UnsafePathError(f"refusing to read {shown}: {problem}")
            return file.read()

    def read_text(self, name: str, *, secret: bool = False) -> str:
        """:meth:`read_bytes` decoded from UTF-8."""
        return self.read_bytes(name, secret=secret).decode()

    def touch(self, name: str) -> Path:
        """Give file ``name`` in this folder the current time, creating it empty (0600) if
        missing, through the folder's descriptor and without following a link; its path.
        :class:`UnsafePathError` when ``name`` is a link or not a regular file of this user."""
        name = self._name(name)
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(name, flags, PRIVATE_FILE_MODE, dir_fd=self._fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UnsafePathError(
                    f"refusing to touch {self.path / name}: it is a symbolic link"
                ) from exc
            raise
        try:
            problem = _file_problem(os.fstat(fd), secret=False)
            if problem:
                raise UnsafePathError(f"refusing to touch {self.path / name}: {problem}")
            os.utime(fd)
        finally:
            os.close(fd)
        return self.path / name

    def in_place(self) -> bool:
        """Whether :attr:`path` still names the folder held (not renamed, removed or
        replaced since it was opened)."""
        try:
            info = os.stat(self.path)
        except OSError:
            return False
        return (info.st_dev, info.st_ino) == self._identity

    def check_in_place(self) -> None:
        """:class:`UnsafePathError` unless :attr:`path` still names the folder held: files
        written through the descriptor are not where that path leads, so nothing may be run
        or read by it."""
        if not self.in_place():
            raise UnsafePathError(
                f"the {self.what} {self.path} is no longer the folder that was checked and "
                "opened: it was renamed, removed or replaced mid-run (by another user, if a "
                "folder above it let them), so nothing is run from that path. Check who can "
                "write the folders above it and start again"
            )


# Check-only helpers for commands that read a folder or trust a file without writing there.


def others_write_bits(path: Path | str, info: os.stat_result) -> int:
    """The write bits of ``info`` (the status of ``path``) that let a user other than this one
    change it: group and other write, less the group bit of a group that is this user's alone
    (:func:`_group_is_mine`) where no POSIX ACL widens it, as the folders above are judged."""
    loose = stat.S_IMODE(info.st_mode) & _OTHERS_WRITE
    if loose == 0o020 and _group_is_mine(info.st_gid) and not _has_acl(Path(path)):
        return 0
    return loose


def check_private_dir(path: Path | str, *, what: str = "folder") -> Path:
    """The checks :func:`private_dir` makes of an existing folder, changing nothing (no folder
    is made, no mode narrowed), for commands that only read it (``status``); the path.
    :class:`UnsafePathError` for a symbolic link, a non-folder, another user's folder, one
    others can write, or one under a parent that lets others replace it;
    ``FileNotFoundError`` when it does not exist."""
    path = Path(path).expanduser()
    check_parents(path, what=what)
    _existing_dir(path, what=what, acting="command", new_path_hint=False)
    return path


__all__ = [
    "PRIVATE_DIR_MODE",
    "PRIVATE_FILE_MODE",
    "PrivateFolder",
    "check_parents",
    "check_private_dir",
    "check_private_file",
    "others_write_bits",
    "parent_problem",
    "private_dir",
    "read_private_bytes",
    "read_regular_file",
    "write_private_bytes",
]
