"""A driver whose ``TMPDIR`` is too long for the worker pools' sockets, refused at the start.

On the emulated site the blocks' worker pools run on this host with the driver's ``TMPDIR``
(in a private folder ``pm-XXXXXXXX`` the site makes there and removes when it closes, when that
still fits), and Python's multiprocessing names its AF_UNIX sockets
``$TMPDIR/pymp-XXXXXXXX/listener-XXXXXXXX``.
Linux allows 107 bytes for such a path: with a longer ``TMPDIR`` every pool fails at its start
("AF_UNIX path too long"), and the run would learn it only from its blocks failing one after
another. Live sites' nodes have their own ``TMPDIR``, which the driver cannot see.
"""

from __future__ import annotations

import os
import tempfile

from parsl_malleable.errors import ConfigError
from parsl_malleable.harvest.site_profile import SiteProfile

SUN_PATH_MAX = 107  # bytes of an AF_UNIX socket path (Linux's sun_path, less its NUL)
POOL_SOCKET_NAME = len("/pymp-XXXXXXXX/listener-XXXXXXXX")  # multiprocessing's, under TMPDIR


def check_tmpdir_fits(profile: SiteProfile, *, source: str = "<campaign>") -> None:
    """:class:`ConfigError` when ``profile`` is the emulated site and the temporary folder
    leaves no room for a worker pool's socket path."""
    if profile.emulated is None:
        return
    folder = tempfile.gettempdir()
    length = len(os.fsencode(folder))
    if length + POOL_SOCKET_NAME > SUN_PATH_MAX:
        raise ConfigError(
            f"{source}: the temporary folder {folder} ({length} bytes; TMPDIR) is too long for "
            f"the worker pools' sockets on the emulated site ({length + POOL_SOCKET_NAME} of "
            f"at most {SUN_PATH_MAX} bytes): set TMPDIR to a folder of at most "
            f"{SUN_PATH_MAX - POOL_SOCKET_NAME} bytes, such as /tmp"
        )


__all__ = ["SUN_PATH_MAX", "check_tmpdir_fits"]
