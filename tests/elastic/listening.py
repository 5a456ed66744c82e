"""Which addresses a process listens on, and an address of this host to bind to (#13 tests)."""

from __future__ import annotations

import socket

import psutil


def chosen_address() -> str:
    """A non-loopback IPv4 address of this host if it has one (so 'bound to the chosen
    interface' differs from both loopback and every interface), else loopback."""
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family == socket.AF_INET and not address.address.startswith("127."):
                return address.address
    return "127.0.0.1"


def listening(pid: int) -> set[tuple[str, int]]:
    """The ``(address, port)`` of every TCP socket ``pid`` listens on."""
    return {
        (c.laddr.ip, c.laddr.port)
        for c in psutil.Process(pid).net_connections("tcp")
        if c.status == psutil.CONN_LISTEN
    }
