"""Finding the sockets a library opened and shutting down exactly those (gloo's abort)."""

from __future__ import annotations

import os
import socket

from parsl_malleable.elastic.own_sockets import shut_down, socket_inodes, tcp_connections_since


def inode(sock: socket.socket) -> str:
    return os.readlink(f"/proc/self/fd/{sock.fileno()}")


def test_only_connections_opened_since_and_not_to_the_coordinator_are_shut_down() -> None:
    peers = socket.create_server(("127.0.0.1", 0))
    coordinator = socket.create_server(("127.0.0.1", 0))
    kept = socket.create_connection(peers.getsockname()[:2])  # before: not the library's
    kept_peer, _ = peers.accept()
    before = socket_inodes()
    mesh = socket.create_connection(peers.getsockname()[:2])  # the library's pair, both ends
    mesh_peer, _ = peers.accept()
    # opened meanwhile by this process's own client (never accepted here: its other end is
    # the coordinator's, in another process at a site)
    client = socket.create_connection(coordinator.getsockname()[:2])
    opened = [peers, coordinator, kept, kept_peer, mesh, mesh_peer, client]
    try:
        found = tcp_connections_since(before, exclude_peer=coordinator.getsockname()[:2])
        assert found == {inode(mesh), inode(mesh_peer)}
        assert shut_down(found) == 2
        mesh_peer.settimeout(5)
        assert mesh_peer.recv(1) == b""  # a shut-down socket reads the end at once
        kept.sendall(b"x")
        kept_peer.settimeout(5)
        assert kept_peer.recv(1) == b"x"  # one from before is untouched
        client.sendall(b"y")  # and so is the client's
        assert shut_down(frozenset({"socket:[0]"})) == 0  # a name not open: nothing
    finally:
        for sock in opened:
            sock.close()
