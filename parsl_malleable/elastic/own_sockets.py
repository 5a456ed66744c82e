"""This process's own TCP sockets, found through ``/proc/self/fd`` and shut down by identity.

A collective library (gloo) blocked in a ``recv`` from a frozen peer has no call that wakes it;
shutting down its sockets from another thread does: the pending call, and the peers' calls on
the other ends, fail at once with "connection closed". Sockets are named by inode (the
``socket:[N]`` link of their descriptor), recorded when the library opened them, so that no other
socket of the process is touched. ``shutdown`` only: the library still owns and later closes the
descriptors. Where ``/proc/self/fd`` is missing (not Linux) nothing is found and nothing is shut
down; the library's own timeout then applies.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator

_FD_DIR = "/proc/self/fd"


def _socket_links() -> Iterator[tuple[int, str]]:
    try:
        names = os.listdir(_FD_DIR)
    except OSError:
        return
    for name in names:
        try:
            link = os.readlink(f"{_FD_DIR}/{name}")
        except OSError:
            continue  # closed meanwhile
        if link.startswith("socket:"):
            yield int(name), link


def socket_inodes() -> frozenset[str]:
    """The ``socket:[N]`` names of every socket this process has open now."""
    return frozenset(link for _, link in _socket_links())


def tcp_connections_since(before: frozenset[str], exclude_peer: tuple[str, int]) -> frozenset[str]:
    """Connected TCP sockets opened since ``before`` (from :func:`socket_inodes`) whose peer is
    not ``exclude_peer`` (the coordinator, reached by this process's own clients)."""
    found = set()
    for fd, link in _socket_links():
        if link in before:
            continue
        with _borrowed(fd) as sock:
            if sock is None or sock.type != socket.SOCK_STREAM:
                continue
            if sock.family not in (socket.AF_INET, socket.AF_INET6):
                continue
            try:
                peer = sock.getpeername()
            except OSError:
                continue  # a listener, or not connected
            if (peer[0], peer[1]) != exclude_peer:
                found.add(link)
    return frozenset(found)


def shut_down(inodes: frozenset[str]) -> int:
    """``shutdown(SHUT_RDWR)`` each open socket named in ``inodes``; how many were."""
    done = 0
    for fd, link in _socket_links():
        if link not in inodes:
            continue
        with _borrowed(fd) as sock:
            if sock is None:
                continue
            with contextlib.suppress(OSError):  # already shut, or gone
                sock.shutdown(socket.SHUT_RDWR)
                done += 1
    return done


@contextlib.contextmanager
def _borrowed(fd: int) -> Iterator[socket.socket | None]:
    """A socket object over ``fd`` that does not close it (None if ``fd`` is not a socket)."""
    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        yield None
        return
    try:
        yield sock
    finally:
        sock.detach()


__all__ = ["shut_down", "socket_inodes", "tcp_connections_since"]
