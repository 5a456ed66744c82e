"""A campaign's file and the code it names are trusted only when no other user could change them.

A campaign file names code that ``validate`` and ``run`` import as the user who runs them (its
``app: module:function`` entries, the ``python_path`` folders it puts first on ``sys.path``), and
a site profile whose ``worker_init`` the blocks run. On a shared login node another user who can
change any of these (their own file, a file or folder they may write, a symbolic link they can
re-point) would run their code as this user. So each is checked *before* it is read or imported,
by the rule the output folders follow (:mod:`parsl_malleable.private_files`): it must belong to
this user or root (site-packages and a root-owned checkout are fine), nobody else may write it,
a symbolic link must sit in a folder only its owner can change and lead to such a file, and no
folder above it may let another user replace it
(:func:`~parsl_malleable.private_files.parent_problem`).

The running interpreter's own installation (its standard library and site-packages, under
``sys.prefix`` and ``sys.base_prefix``) is trusted as it is: the driver already runs from it, so
whoever can change it runs code as the user anyway, and at a site it often belongs to the
software team's account, not root (a shared module of Python and torch), which this rule would
otherwise refuse.

Once a file passes, nobody else can change it (nor any folder that leads to it), so reading or
importing it by name afterwards reads what was checked.
"""

from __future__ import annotations

import functools
import importlib.machinery
import os
import stat
import sys
import sysconfig
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from parsl_malleable.campaign.app_args import resolve_app
from parsl_malleable.errors import ConfigError, UnsafePathError
from parsl_malleable.private_files import others_write_bits, parent_problem


def _who_writes(bits: int) -> str:
    return " and ".join(
        name for mask, name in ((0o020, "its group"), (0o002, "other users")) if bits & mask
    )


def _link_problem(path: Path, link: os.stat_result) -> str | None:
    """Why another user could re-point the symbolic link ``path`` (status ``link``): the
    folder holding it is theirs, or they may write it (a sticky folder protects only a link
    of this user or root), or None."""
    me = os.geteuid()
    holder = path.absolute().parent
    info = os.stat(holder)
    if info.st_uid not in (0, me):
        return (
            f"it is a symbolic link in {holder}, which belongs to uid {info.st_uid}, who can "
            "point it at their own file"
        )
    loose = others_write_bits(holder, info)
    if loose and not (info.st_mode & stat.S_ISVTX and link.st_uid in (0, me)):
        return (
            f"it is a symbolic link in {holder}, which {_who_writes(loose)} can write, so they "
            "can point it at their own file; give the file itself, in a folder only you can write"
        )
    return None


@functools.cache
def _installation_roots() -> tuple[str, ...]:
    """The folders of the running interpreter's installation (resolved, with a final ``/``)."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    roots.update(sysconfig.get_paths().values())
    return tuple(sorted({os.path.join(os.path.realpath(r), "") for r in roots if r}))


def in_installation(path: Path | str) -> bool:
    """Whether ``path`` (resolved) lies in the running interpreter's own installation."""
    real = os.path.realpath(path)
    return any(os.path.join(real, "").startswith(root) for root in _installation_roots())


def trusted_problem(
    path: Path | str, *, folder: bool = False, cache: dict[str, str | None] | None = None
) -> str | None:
    """Why ``path`` (a file, or with ``folder`` a folder) could have been changed by another
    user, or None: it (the file a symbolic link leads to) must be a regular file (a folder)
    of this user or root that nobody else may write, a link must sit where only its owner can
    re-point it, and no folder above may let another user replace it. A missing path is
    judged by the folders above it only (it would be created by this user). ``cache`` keeps
    the verdict on the folders above, by folder, for many paths checked at once."""
    path = Path(path).expanduser()
    if in_installation(path):
        return None  # the interpreter's own files: trusted as the interpreter is
    me = os.geteuid()
    try:
        entry = os.lstat(path)
    except FileNotFoundError:
        return parent_problem(path)
    linked = stat.S_ISLNK(entry.st_mode)
    if linked and (problem := _link_problem(path, entry)):
        return problem
    try:
        info = os.stat(path)  # the link followed: what will be read or imported
    except OSError as exc:
        return f"it is a symbolic link that leads nowhere ({exc.strerror})"
    through = (
        f"it is a symbolic link to {os.path.realpath(path)}, and that file " if linked else "it "
    )
    kind_ok = stat.S_ISDIR(info.st_mode) if folder else stat.S_ISREG(info.st_mode)
    if not kind_ok:
        return f"{through}is not a {'folder' if folder else 'regular file'}"
    if info.st_uid not in (0, me):
        return (
            f"{through}belongs to uid {info.st_uid}, neither this user (uid {me}) nor root, so "
            "they could have written it; use your own copy"
        )
    loose = others_write_bits(path, info)
    if loose:
        mode = stat.S_IMODE(info.st_mode)
        return (
            f"{through}has mode {mode:04o}, so {_who_writes(loose)} can change it. Fix: check "
            f"it, then `chmod g-w,o-w {os.path.realpath(path)}`"
        )
    if linked or cache is None:
        return parent_problem(path)
    # For an entry of this user or root that is no link, the verdict on the folders above is
    # the same for every entry of its folder (the entry's owner only matters in a sticky one).
    key = str(path.absolute().parent)
    if key not in cache:
        cache[key] = parent_problem(path)
    return cache[key]


def check_trusted(
    path: Path | str,
    *,
    what: str,
    folder: bool = False,
    cache: dict[str, str | None] | None = None,
) -> None:
    """:class:`UnsafePathError` ("refusing the ``what`` ``path``: why") unless ``path`` passes
    :func:`trusted_problem`."""
    problem = trusted_problem(path, folder=folder, cache=cache)
    if problem:
        raise UnsafePathError(f"refusing the {what} {path}: {problem}")


def check_campaign_file(path: Path | str) -> None:
    """Check a campaign file before it is read (:func:`check_trusted`)."""
    check_trusted(path, what="campaign file")


def check_python_path(folders: Iterable[Path | str]) -> None:
    """Check the campaign's ``python_path`` folders before they go on ``sys.path``: a module
    another user could plant there would shadow any other, the standard library's included."""
    for folder in folders:
        check_trusted(folder, what="python_path folder", folder=True)


def _find_spec(
    fullname: str, search: Iterable[str] | None, *, skip: object = None
) -> importlib.machinery.ModuleSpec | None:
    """What ``import fullname`` would load, asked of the import system's finders (but
    ``skip``) without importing anything (``importlib.util.find_spec`` imports a dotted name's
    parents)."""
    for finder in sys.meta_path:
        if finder is skip:
            continue
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        spec = find(fullname, None if search is None else list(search))
        if spec is not None:
            return spec
    return None


def _spec_paths(spec: importlib.machinery.ModuleSpec) -> list[tuple[Path, bool]]:
    """The files and folders importing ``spec`` reads: its source, the bytecode cache Python
    would load instead, and a package's folders (its submodules come from there); each with
    whether it is a folder."""
    paths: list[tuple[Path, bool]] = []
    if spec.has_location and spec.origin:
        paths.append((Path(spec.origin), False))
    if spec.cached:
        cached = Path(spec.cached)
        if cached.parent.exists():
            paths.append((cached.parent, True))
        if cached.exists():
            paths.append((cached, False))
    paths += [(Path(location), True) for location in spec.submodule_search_locations or ()]
    return paths


def check_app_module(ref: str) -> None:
    """Check the module of app ``ref`` (``module:function``) and the packages above it before
    any is imported: each file and folder an import would read (:func:`check_trusted`). Parts
    already imported are skipped (importing them again runs nothing); a module that cannot be
    found is left to the import to report."""
    module_name = ref.partition(":")[0]
    parts = module_name.split(".")
    search: Iterable[str] | None = None
    for i in range(len(parts)):
        fullname = ".".join(parts[: i + 1])
        loaded = sys.modules.get(fullname)
        if loaded is not None:
            search = getattr(loaded, "__path__", None)
        else:
            spec = _find_spec(fullname, search)
            if spec is None:
                return
            for path, is_folder in _spec_paths(spec):
                check_trusted(path, what=f"module {fullname} (app {ref}) at", folder=is_folder)
            search = spec.submodule_search_locations
        if search is None:
            return  # not a package: importing a name below it fails, with its own message


class _CheckingFinder:
    """First on ``sys.meta_path`` while an app is imported: every module the app's import
    pulls in (its own imports, theirs) is found by the other finders and checked
    (:func:`check_trusted`) before it runs; a refusal is kept, since the importing code may
    catch it."""

    def __init__(self) -> None:
        self.refused: list[UnsafePathError] = []
        self.cache: dict[str, str | None] = {}  # folders judged during this import
        self._looking: set[str] = set()  # a finder that imports while finding: no recursion

    def find_spec(
        self, fullname: str, path: Iterable[str] | None = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname in self._looking:
            return None
        self._looking.add(fullname)
        try:
            spec = _find_spec(fullname, path, skip=self)
        finally:
            self._looking.discard(fullname)
        if spec is None:
            return None
        try:
            for found, is_folder in _spec_paths(spec):
                check_trusted(
                    found, what=f"module {fullname} at", folder=is_folder, cache=self.cache
                )
        except UnsafePathError as exc:
            self.refused.append(exc)
            raise
        return spec


def import_app(ref: str) -> Callable[..., Any]:
    """The function app ``ref`` (``module:function``) names, imported only after its module,
    the packages above it and every module its import pulls in were checked
    (:func:`check_app_module`, then each as it is found); :class:`UnsafePathError` for the
    first that another user could have changed, ``ValueError`` as
    :func:`~.app_args.resolve_app` for an app that cannot be imported."""
    check_app_module(ref)
    finder = _CheckingFinder()
    sys.meta_path.insert(0, finder)
    try:
        fn = resolve_app(ref)
    except ValueError:
        if finder.refused:
            raise finder.refused[0] from None
        raise
    finally:
        sys.meta_path.remove(finder)
    if finder.refused:  # caught inside the app's module, which then imported anyway
        raise finder.refused[0]
    return fn


def check_site_profile(site: str) -> None:
    """Check the site profile file a campaign names (``site``, a name or a path) before it is
    read: its ``worker_init`` runs on the blocks as this user. An unknown name is left to the
    loader, which lists the profiles there are."""
    from parsl_malleable.harvest.site_profile import find_profile

    try:
        path = find_profile(site)
    except ConfigError:
        return
    check_trusted(path, what="site profile")


__all__ = [
    "check_app_module",
    "check_campaign_file",
    "check_python_path",
    "check_site_profile",
    "check_trusted",
    "import_app",
    "in_installation",
    "trusted_problem",
]
