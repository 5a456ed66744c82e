"""Horovod's controller side: one gloo rendezvous server per membership epoch, without horovodrun.

:class:`HorovodRendezvousHost` runs in the controller process. For every membership epoch it
starts Horovod's own gloo HTTP rendezvous server (``horovod.runner.http.http_server``), loaded
with the epoch's slot plan, on a fresh port, and adds what the rank side
(:mod:`~parsl_malleable.elastic.horovod_backend`, which never imports this module) relies on:

* a pre-barrier: ``GET /parsl_malleable/status`` says which ranks of the epoch have checked in
  (and whether a newer epoch superseded it), so ranks start ``hvd.init()`` only once all are
  alive;
* ``GET /parsl_malleable/mesh``: the endpoints of every gloo pair address Horovod published in
  the epoch, kept after Horovod deletes them, so a rank can tell gloo's sockets from others.

Each epoch's server answers only requests whose path starts with the epoch's random
*capability* (``secrets.token_hex(16)``, handed to ranks in the :class:`RendezvousInfo` over the
coordinator's authenticated connection); anything else gets 403. Horovod's C++ store builds its
URLs as ``http://<ADDR>:<PORT>/<scope>/<key>``, so ranks set ``HOROVOD_GLOO_RENDEZVOUS_ADDR`` to
``<host>:<port>/<capability>`` and its requests arrive as ``/<capability>:<port>/<scope>/<key>``.
The capability is plain HTTP, so someone who reads the network can use it while that epoch's
server lives (it is worth nothing on the next one, and reveals nothing of the job's token).

Ranks are laid out one per node (the runtime runs one rank per node): each rank is its own
Horovod "host" (``local_size`` 1), so ranks may also share a machine, as in tests. Importing
this module needs neither Horovod nor torch; Horovod's server code is loaded at ``start()``.
"""

from __future__ import annotations

import logging
import secrets
import socket
import struct
import threading
from typing import Any

from parsl_malleable.elastic.backend_interface import RendezvousInfo
from parsl_malleable.elastic.horovod_common import (
    BUILD_HINT,
    MESH,
    SCOPE,
    BarrierStatus,
    slot_hostname,
)

__all__ = ["HorovodRendezvousHost"]

log = logging.getLogger(__name__)

# gloo's tcp::Address as Horovod publishes it in the store: struct sockaddr_storage (128 bytes)
# then an ssize_t sequence number; a rank's value under key "<rank>" is one per peer pair.
_GLOO_ADDRESS_BYTES = 128 + 8


def _make_server_class() -> tuple[type, type]:
    """Subclass Horovod's rendezvous server to add our pre-barrier (imported lazily)."""
    try:
        from horovod.runner.http.http_server import RendezvousHandler, RendezvousHTTPServer
    except ImportError as exc:
        raise ImportError(f"{BUILD_HINT} ({exc})") from exc

    class PreBarrierHandler(RendezvousHandler):
        """Horovod's handler, plus ``GET /parsl_malleable/status`` reporting who has arrived."""

        path: str  # BaseHTTPRequestHandler's request path (Horovod's class is untyped)

        def _admit(self) -> bool:
            """Strip the epoch's capability off the path; 403 (and ``False``) without it."""
            first, _, rest = self.path.removeprefix("/").partition("/")
            offered = first.partition(":")[0]  # Horovod's C++ store appends ":<port>"
            if rest and secrets.compare_digest(offered, self.server.capability):
                self.path = f"/{rest}"
                return True
            self.send_status_code(403)
            self.close_connection = True
            return False

        def do_PUT(self) -> None:
            if self._admit():
                super().do_PUT()

        def do_DELETE(self) -> None:
            if self._admit():
                super().do_DELETE()

        def do_GET(self) -> None:
            if not self._admit():
                return
            if self.path == f"/{SCOPE}/status":
                arrived = _arrived_ranks(self.server)
                body = (
                    BarrierStatus(
                        epoch=self.server.epoch,
                        world_size=self.server.world_size,
                        arrived=arrived,
                        superseded=self.server.superseded,
                    )
                    .model_dump_json()
                    .encode()
                )
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            if self.path == f"/{SCOPE}/mesh":
                with self.server.cache_lock:
                    endpoints = sorted(self.server.mesh)
                body = MESH.dump_json(endpoints)
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            super().do_GET()

        def _put_value(self, scope: str, key: str, value: bytes) -> None:
            # gloo's pair addresses are deleted from the store once the mesh is formed; keep
            # their endpoints so ranks can later tell gloo's sockets from all others.
            if scope != SCOPE and key.isdigit():
                endpoints = _gloo_endpoints(value)
                with self.server.cache_lock:
                    self.server.mesh.update(endpoints)
            super()._put_value(scope, key, value)

    class EpochServer(RendezvousHTTPServer):
        daemon_threads = True  # a request stuck on a dead rank must not block close()

        def __init__(
            self, addr: tuple[str, int], epoch: int, world_size: int, capability: str
        ) -> None:
            super().__init__(addr, PreBarrierHandler, 0)
            self.capability = capability
            self.epoch = epoch
            self.world_size = world_size
            self.superseded = False
            self.mesh: set[tuple[str, int]] = set()  # every gloo pair listener of the epoch

    return EpochServer, PreBarrierHandler


def _gloo_endpoints(value: bytes) -> set[tuple[str, int]]:
    """The (ip, port) of each gloo pair address in a value Horovod stored (other kinds skipped)."""
    endpoints = set()
    for start in range(0, len(value) - _GLOO_ADDRESS_BYTES + 1, _GLOO_ADDRESS_BYTES):
        family = struct.unpack_from("=H", value, start)[0]
        port = struct.unpack_from("!H", value, start + 2)[0]
        if family == socket.AF_INET:
            ip = socket.inet_ntop(socket.AF_INET, value[start + 4 : start + 8])
        elif family == socket.AF_INET6:
            ip = socket.inet_ntop(socket.AF_INET6, value[start + 8 : start + 24])
        else:
            continue
        endpoints.add((ip, port))
    return endpoints


def _arrived_ranks(server: Any) -> list[int]:
    """Ranks of the epoch that have checked in (keys that are not such a rank are ignored)."""
    with server.cache_lock:
        keys = list(server.cache.get(SCOPE, {}))
    ranks = {int(key) for key in keys if key.isdigit()}
    return sorted(rank for rank in ranks if rank < server.world_size)


class HorovodRendezvousHost:
    """Controller-side service: one Horovod gloo rendezvous server per membership epoch.

    A fresh server (and port) per epoch keeps keys of an abandoned epoch from confusing the next
    one. Preparing epoch ``e`` marks older epochs superseded (ranks still waiting in their
    pre-barrier give up at once) and stops servers older than ``e - 1``: a server must outlive
    the few hundred milliseconds in which its ranks finish forming the gloo mesh, because
    Horovod aborts the process if the server vanishes then.

    The server speaks plain unauthenticated HTTP, like Horovod's own; bind it to an address only
    the job's nodes can reach (``bind`` defaults to ``host``).
    """

    def __init__(self, host: str = "127.0.0.1", bind: str | None = None) -> None:
        self.host = host
        self.bind = host if bind is None else bind
        self._servers: dict[int, Any] = {}
        self._threads: dict[int, threading.Thread] = {}
        self._lock = threading.Lock()
        self._server_class: type | None = None

    def start(self) -> None:
        """Load Horovod's server code (idempotent); servers start per epoch."""
        self._loaded_server_class()

    def _loaded_server_class(self) -> type:
        if self._server_class is None:
            self._server_class, _ = _make_server_class()
        return self._server_class

    def prepare_epoch(self, epoch: int, world_size: int) -> RendezvousInfo:
        """Start the rendezvous server of ``epoch`` for ``world_size`` ranks."""
        if not isinstance(world_size, int) or world_size < 1:
            raise ValueError(f"world_size must be a positive integer, got {world_size!r}")
        server_class = self._loaded_server_class()
        from horovod.runner.common.util.hosts import SlotInfo

        with self._lock:
            if epoch in self._servers or any(old > epoch for old in self._servers):
                raise ValueError(
                    f"epoch {epoch} is not newer than epochs already prepared "
                    f"({sorted(self._servers)}); epochs must increase"
                )
            capability = secrets.token_hex(16)
            server = server_class((self.bind, 0), epoch, world_size, capability)
            # Horovod clears a scope once all its members have finished forming the group, so it
            # must know each scope's size: one host per rank, hence local size 1.
            server.init(
                [
                    SlotInfo(
                        hostname=slot_hostname(rank),
                        rank=rank,
                        local_rank=0,
                        cross_rank=rank,
                        size=world_size,
                        local_size=1,
                        cross_size=world_size,
                    )
                    for rank in range(world_size)
                ]
            )
            thread = threading.Thread(
                target=server.serve_forever,
                kwargs={"poll_interval": 0.05},
                name=f"horovod-rendezvous-epoch-{epoch}",
                daemon=True,
            )
            thread.start()
            for old_epoch, old in list(self._servers.items()):
                old.superseded = True
                if old_epoch < epoch - 1:
                    self._stop(old_epoch)
            self._servers[epoch] = server
            self._threads[epoch] = thread
            port = server.server_address[1]
        log.debug("horovod rendezvous for epoch %d (%d ranks) on port %d", epoch, world_size, port)
        return RendezvousInfo(
            backend="horovod",
            host=self.host,
            port=port,
            epoch=epoch,
            world_size=world_size,
            extra=(("capability", capability),),
        )

    def arrived(self, epoch: int) -> list[int]:
        """Ranks that have reached the pre-barrier of ``epoch`` (for diagnostics and tests)."""
        with self._lock:
            server = self._servers.get(epoch)
        if server is None:
            return []
        return _arrived_ranks(server)

    def close(self) -> None:
        """Stop every server and free their ports."""
        with self._lock:
            for epoch in list(self._servers):
                self._stop(epoch)

    def _stop(self, epoch: int) -> None:
        server = self._servers.pop(epoch)
        thread = self._threads.pop(epoch)
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    def __enter__(self) -> HorovodRendezvousHost:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
