"""Horovod's rank side: the elastic backend interface on Horovod (gloo, CPU), without horovodrun.

:class:`HorovodBackend` sets the ``HOROVOD_*`` variables that ``horovodrun --gloo`` would set,
calls ``hvd.init()``, runs collectives, and calls ``hvd.shutdown()`` at the end of the epoch; the
same process then re-initialises Horovod for the next epoch (Horovod 0.28.1 supports this: it is
what its own elastic mode does). The ranks of an epoch meet at the controller's rendezvous server
for that epoch (:mod:`~parsl_malleable.elastic.horovod_rendezvous`, which a rank never imports:
the two sides share only :mod:`~parsl_malleable.elastic.horovod_common`), reached at
``http://<host>:<port>/<capability>`` from the :class:`RendezvousInfo` of the assignment.

Two Horovod behaviours shape this module (measured, see ``docs/horovod.md``):

* A gloo failure *while the group forms* (a peer that never arrives, or dies during
  ``hvd.init()``) is thrown in Horovod's background thread outside any ``try``, so the C++
  runtime calls ``std::terminate`` and the whole process aborts. Ranks therefore meet in a Python
  pre-barrier on the controller first: ``hvd.init()`` only starts once every rank of the epoch is
  known to be alive, and a missing peer raises :class:`HorovodRendezvousError` instead.
* A peer that dies mid-collective wakes only the survivors connected to it; with 3 or more
  ranks another survivor stays blocked in gloo on a live but failed peer until gloo's timeout.
  A rank whose collective fails therefore shuts down its gloo sockets
  (:meth:`HorovodBackend.sever_mesh`), which wakes them all at once. A peer that hangs is caught
  by gloo's timeout; but a peer that is alive and simply never submits the tensor leaves
  survivors waiting forever (Horovod's stall shutdown did not fire in our tests). Every
  collective here is therefore asynchronous with a watchdog deadline of ``timeout_s``.

Horovod's C++ store builds its URLs as ``http://<ADDR>:<PORT>/<scope>/<key>``, so ranks set
``HOROVOD_GLOO_RENDEZVOUS_ADDR`` to ``<host>:<port>/<capability>``: the epoch's capability leads
every path, as its server requires. Each rank is its own Horovod "host" (``local_size`` 1).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import torch
from pydantic import ValidationError

from parsl_malleable.elastic.backend_interface import RendezvousInfo
from parsl_malleable.elastic.horovod_common import (
    BUILD_HINT,
    MESH,
    SCOPE,
    BarrierStatus,
    slot_hostname,
)
from parsl_malleable.elastic.safe_state import decode_state, encode_state
from parsl_malleable.errors import MalleableError

__all__ = [
    "HorovodBackend",
    "HorovodBackendError",
    "HorovodCollectiveError",
    "HorovodRendezvousError",
]

log = logging.getLogger(__name__)

_POLL_MAX_S = 0.002  # longest sleep between polls of an async collective
# dtypes Horovod's torch binding reduces (bfloat16, bool and complex it refuses).
_HOROVOD_DTYPES = frozenset(
    {torch.uint8, torch.int8, torch.int32, torch.int64, torch.float16, torch.float32, torch.float64}
)


class HorovodBackendError(MalleableError, RuntimeError):
    """A Horovod group could not be formed or a collective failed; form a new epoch."""


class HorovodRendezvousError(HorovodBackendError):
    """The ranks of an epoch did not all arrive in time, or the epoch was superseded."""


class HorovodCollectiveError(HorovodBackendError):
    """A collective failed: a peer died, hung, or stopped taking part within the timeout."""


def _import_horovod_torch() -> Any:
    try:
        import horovod.torch as hvd
    except ImportError as exc:
        raise ImportError(f"{BUILD_HINT} ({exc})") from exc
    return hvd


class HorovodBackend:
    """Rank side: one Horovod (gloo) group per membership epoch, re-initialised in-process.

    ``iface`` names the network interface gloo uses; by default it is the interface through
    which this node reaches the controller (``lo`` when the controller is on the same machine).
    ``cycle_time_ms`` sets ``HOROVOD_CYCLE_TIME``, the period of Horovod's background
    negotiation loop: longer cycles cost less CPU while idle but add latency to each collective
    (see ``docs/horovod.md``); ``None`` keeps Horovod's default. ``gloo_timeout_s`` bounds
    each gloo transfer inside Horovod (never more than the ``timeout_s`` given to ``init``): it
    is how long survivors wait on a frozen peer (a killed one wakes them at once, see
    :meth:`sever_mesh`), and where ``/proc`` is missing, on a killed one too. Horovod's
    background loop keeps exchanging messages every cycle while ranks compute, so a slow training
    step does not trip it.
    """

    name = "horovod"

    def __init__(
        self,
        iface: str | None = None,
        cycle_time_ms: float | None = None,
        gloo_timeout_s: float = 5.0,
    ) -> None:
        if cycle_time_ms is not None and not cycle_time_ms > 0:
            raise ValueError(f"cycle_time_ms must be positive, got {cycle_time_ms!r}")
        if not gloo_timeout_s > 0:
            raise ValueError(f"gloo_timeout_s must be positive, got {gloo_timeout_s!r}")
        self._gloo_timeout_s = float(gloo_timeout_s)
        self._hvd = _import_horovod_torch()
        self._iface = iface
        self._cycle_time_ms = cycle_time_ms
        self._formed = False
        self._broken: str | None = None
        self._rank = 0
        self._world_size = 1
        self._epoch: int | None = None
        self._timeout_s = 60.0
        self._saved_env: dict[str, str | None] = {}
        self._mesh: frozenset[tuple[str, int]] = frozenset()

    @property
    def rank(self) -> int:
        """This process's rank in the current epoch."""
        return self._rank

    @property
    def world_size(self) -> int:
        """Number of ranks in the current epoch."""
        return self._world_size

    def init(self, rank: int, info: RendezvousInfo, timeout_s: float) -> None:
        """Join epoch ``info.epoch`` as ``rank``; raise within ``timeout_s`` if a peer is missing.

        Raises :class:`HorovodRendezvousError` if not every rank reaches the controller's
        pre-barrier in time, the epoch was superseded, or the controller cannot be reached.
        """
        if info.backend != "horovod":
            raise ValueError(f"RendezvousInfo is for backend {info.backend!r}, not 'horovod'")
        if not 0 <= rank < info.world_size:
            raise ValueError(f"rank {rank} is outside world size {info.world_size}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        self.shutdown()
        self._timeout_s = float(timeout_s)
        self._pre_barrier(rank, info, time.monotonic() + timeout_s)
        self._set_env(rank, info, timeout_s)
        try:
            self._hvd.init()
        except BaseException:
            self._restore_env()
            raise
        self._formed = True
        self._broken = None
        self._rank, self._world_size, self._epoch = rank, info.world_size, info.epoch
        self._mesh = self._fetch_mesh(info)
        if (self._hvd.rank(), self._hvd.size()) != (rank, info.world_size):
            got = (self._hvd.rank(), self._hvd.size())
            self.shutdown()
            raise HorovodRendezvousError(
                f"Horovod formed rank/size {got}, expected {(rank, info.world_size)}"
            )

    def shutdown(self) -> None:
        """Leave the current group (peers still in a collective get an error); idempotent.

        Also shuts down a group some earlier backend object in this process left formed (a rank
        task that died without cleaning up): ``hvd.init()`` would otherwise silently keep it.
        """
        try:
            self._hvd.shutdown()  # a no-op when Horovod is not running
        finally:
            self._formed = False
            self._mesh = frozenset()  # its ports may be reused by unrelated sockets from now on
            self._restore_env()

    def allreduce_mean_(self, tensors: list[Any]) -> None:
        """Average ``tensors`` in place across the group, as one flat buffer.

        Every rank must pass the same number of tensors with the same shapes and dtypes. The
        tensors are packed into one buffer and submitted in one call: Horovod 0.28.1 deadlocks
        when a second tensor is submitted while its background loop is finalizing after a
        failure and still holds the first (the loop holds its process-set lock and waits for
        the GIL to free the first tensor; the submitting thread holds the GIL and waits for
        that lock). One submission per collective never overlaps a queued tensor of ours.
        """
        self._check_usable()
        if not tensors:
            return
        flat = _packed(tensors)
        self._run(
            "allreduce",
            lambda: [self._hvd.allreduce_async_(flat, op=self._hvd.Average, name="pm.allreduce")],
        )
        offset = 0
        for tensor in tensors:
            count = tensor.numel()
            tensor.copy_(flat[offset : offset + count].view(tensor.shape))
            offset += count

    def broadcast_object(self, obj: Any, src: int) -> Any:
        """Return ``obj`` from rank ``src`` on every rank (encoded with
        :func:`~parsl_malleable.elastic.safe_state.encode_state`, read with ``weights_only``)."""
        self._check_usable()
        if not 0 <= src < self._world_size:
            raise ValueError(f"src {src} is outside world size {self._world_size}")
        if self._rank == src:
            data = encode_state(obj)
            length = torch.tensor([data.numel()], dtype=torch.int64)
        else:
            length = torch.zeros(1, dtype=torch.int64)
        self._run(
            "broadcast",
            lambda: [self._hvd.broadcast_async_(length, root_rank=src, name="pm.bcast.length")],
        )
        if self._rank != src:
            data = torch.empty(int(length.item()), dtype=torch.uint8)
        self._run(
            "broadcast",
            lambda: [self._hvd.broadcast_async_(data, root_rank=src, name="pm.bcast.data")],
        )
        if self._rank == src:
            return obj
        return decode_state(data)

    def barrier(self) -> None:
        """Wait for every rank of the group (an allreduce of one number, with the watchdog)."""
        self._check_usable()
        token = torch.zeros(1)
        self._run(
            "barrier",
            lambda: [self._hvd.allreduce_async_(token, op=self._hvd.Sum, name="pm.barrier")],
        )

    # ------------------------------------------------------------------ helpers

    def _check_usable(self) -> None:
        if not self._formed:
            raise HorovodCollectiveError(
                f"no Horovod group is formed{f' ({self._broken})' if self._broken else ''}; "
                "call init() for a new epoch"
            )

    def _run(self, what: str, submit: Callable[[], list[int]]) -> None:
        """Submit collectives, wait for them until the watchdog deadline; on failure, leave."""
        deadline = time.monotonic() + self._timeout_s
        pause = 0.0001
        try:
            for handle in submit():
                while not self._hvd.poll(handle):
                    if time.monotonic() > deadline:
                        raise HorovodCollectiveError(
                            f"{what} in epoch {self._epoch} did not complete within "
                            f"{self._timeout_s:g} s: a peer stopped taking part"
                        )
                    time.sleep(pause)
                    pause = min(pause * 2, _POLL_MAX_S)
                self._hvd.synchronize(handle)
        except HorovodCollectiveError as exc:
            self._fail(str(exc))
            raise
        except RuntimeError as exc:  # HorovodInternalError: a peer died or gloo timed out
            message = f"{what} in epoch {self._epoch} failed: {str(exc).splitlines()[0]}"
            self._fail(message)
            raise HorovodCollectiveError(message) from exc

    def _fail(self, reason: str) -> None:
        # A failed collective does not end Horovod's background loop: its next negotiation
        # waits in a gloo recv from a survivor that itself waits on us, until gloo's timeout,
        # and hvd.shutdown() joins that loop. Shutting down our gloo sockets first makes every
        # pending gloo call here and on the peers fail at once ("connection closed").
        self._broken = reason
        with contextlib.suppress(Exception):
            self.sever_mesh()
        with contextlib.suppress(Exception):
            self.shutdown()

    def sever_mesh(self) -> int:
        """Shut down (not close) this process's gloo sockets of the current epoch.

        Gloo's own pending calls, and its peers' calls on the other ends, fail at once;
        Horovod still owns and later closes the descriptors. A socket counts as gloo's only
        if one of its endpoints is a pair address Horovod published for this epoch (recorded by
        the rendezvous server), so no other socket of the process is touched. Returns how many
        sockets were shut down (0 where ``/proc/self/fd`` is unavailable).
        """
        if not self._mesh:
            return 0
        try:
            fds = os.listdir("/proc/self/fd")
        except OSError:
            return 0
        severed = 0
        for name in fds:
            fd = int(name)
            try:
                if not os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                    continue
                sock = socket.socket(fileno=fd)
            except OSError:
                continue  # closed meanwhile, or not a socket
            try:
                if sock.family not in (socket.AF_INET, socket.AF_INET6):
                    continue
                if sock.type != socket.SOCK_STREAM:
                    continue
                local = _endpoint(sock.getsockname())
                remote = _endpoint(sock.getpeername())
                if local in self._mesh or remote in self._mesh:
                    sock.shutdown(socket.SHUT_RDWR)
                    severed += 1
            except OSError:
                pass  # not connected (a listener) or already gone
            finally:
                sock.detach()  # the descriptor stays Horovod's to close
        log.debug("severed %d gloo sockets of epoch %s", severed, self._epoch)
        return severed

    def _fetch_mesh(self, info: RendezvousInfo) -> frozenset[tuple[str, int]]:
        url = f"{_base_url(info)}/{SCOPE}/mesh"
        try:
            endpoints = MESH.validate_json(_http(url, time.monotonic() + self._timeout_s))
        except (HorovodRendezvousError, ValidationError) as exc:
            # Only the speed of a later failure depends on it: gloo's timeout still applies.
            log.warning("epoch %s: no gloo addresses from the rendezvous (%s)", info.epoch, exc)
            return frozenset()
        return frozenset(_endpoint((ip, port)) for ip, port in endpoints)

    def _pre_barrier(self, rank: int, info: RendezvousInfo, deadline: float) -> None:
        base = f"{_base_url(info)}/{SCOPE}"
        _http(f"{base}/{rank}", deadline, method="PUT", body=str(info.epoch).encode())
        pause = 0.005
        while True:
            try:
                status = BarrierStatus.model_validate_json(_http(f"{base}/status", deadline))
            except ValidationError as exc:
                raise HorovodRendezvousError(
                    f"rendezvous at {info.host}:{info.port} sent a malformed status: {exc}"
                ) from exc
            if status.epoch != info.epoch:
                raise HorovodRendezvousError(
                    f"rendezvous at {info.host}:{info.port} serves epoch {status.epoch}, "
                    f"not {info.epoch}"
                )
            # Arrivals only grow, so once one rank sees everyone every rank will: all of them
            # go on to hvd.init() together. Refusing after that point (say, because a newer
            # epoch was prepared meanwhile) would leave peers in hvd.init(), which aborts.
            if len(status.arrived) >= info.world_size:
                return
            if status.superseded:
                raise HorovodRendezvousError(
                    f"epoch {info.epoch} was superseded by a newer membership before it formed"
                )
            if time.monotonic() > deadline:
                missing = sorted(set(range(info.world_size)) - set(status.arrived))
                raise HorovodRendezvousError(
                    f"epoch {info.epoch}: ranks {missing} of {info.world_size} did not arrive "
                    f"at {info.host}:{info.port} in time"
                )
            time.sleep(pause)
            pause = min(pause * 2, 0.02)

    def _set_env(self, rank: int, info: RendezvousInfo, timeout_s: float) -> None:
        iface = self._iface or _iface_towards(info.host, info.port)
        env = {
            # Horovod appends ":<port>/<scope>/<key>": the capability leads every path.
            "HOROVOD_GLOO_RENDEZVOUS_ADDR": f"{info.host}:{info.port}/{capability(info)}",
            "HOROVOD_GLOO_RENDEZVOUS_PORT": str(info.port),
            "HOROVOD_CONTROLLER": "gloo",
            "HOROVOD_CPU_OPERATIONS": "gloo",
            "HOROVOD_RANK": str(rank),
            "HOROVOD_SIZE": str(info.world_size),
            "HOROVOD_LOCAL_RANK": "0",
            "HOROVOD_LOCAL_SIZE": "1",
            "HOROVOD_CROSS_RANK": str(rank),
            "HOROVOD_CROSS_SIZE": str(info.world_size),
            "HOROVOD_HOSTNAME": slot_hostname(rank),
            # Bounds gloo's waits: forming the mesh and any single transfer to a hung peer.
            # Shorter than the collective watchdog: a frozen peer keeps its sockets open, so
            # only this timeout frees survivors (a killed one is handled by sever_mesh()).
            "HOROVOD_GLOO_TIMEOUT_SECONDS": str(
                max(1, math.ceil(min(timeout_s, self._gloo_timeout_s)))
            ),
        }
        if iface:
            env["HOROVOD_GLOO_IFACE"] = iface
        if self._cycle_time_ms is not None:
            env["HOROVOD_CYCLE_TIME"] = f"{self._cycle_time_ms:g}"
        for key, value in env.items():
            self._saved_env.setdefault(key, os.environ.get(key))
            os.environ[key] = value

    def _restore_env(self) -> None:
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved_env.clear()


def _packed(tensors: list[torch.Tensor]) -> torch.Tensor:
    """One contiguous 1-D copy of ``tensors`` in a dtype Horovod reduces.

    Their common dtype (``torch.promote_types``) if Horovod takes it, float32 for floating
    types it refuses (bfloat16); refused before anything is submitted otherwise, so a refusal
    never leaves part of a list in flight.
    """
    common = tensors[0].dtype
    for tensor in tensors[1:]:
        common = torch.promote_types(common, tensor.dtype)
    if common not in _HOROVOD_DTYPES:
        if not common.is_floating_point:
            raise TypeError(f"cannot average a {common} tensor with Horovod")
        common = torch.float32
    return torch.cat([tensor.reshape(-1).to(common) for tensor in tensors])


def _endpoint(address: tuple) -> tuple[str, int]:
    """(ip, port) of a socket address, IPv4-mapped IPv6 written as plain IPv4."""
    ip, port = address[0], address[1]
    return (ip.removeprefix("::ffff:") if "." in ip else ip, int(port))


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def capability(info: RendezvousInfo) -> str:
    """The path secret of ``info``'s rendezvous server."""
    return dict(info.extra).get("capability", "")


def _base_url(info: RendezvousInfo) -> str:
    return f"http://{_url_host(info.host)}:{info.port}/{capability(info)}"


def _redacted(url: str) -> str:
    """``url`` with its capability (the first path segment) hidden: messages are logged."""
    scheme, _, rest = url.partition("://")
    where, _, path = rest.partition("/")
    _capability, _, tail = path.partition("/")
    return f"{scheme}://{where}/<capability>/{tail}"


def _http(url: str, deadline: float, method: str = "GET", body: bytes | None = None) -> bytes:
    """One request to the controller, retried until ``deadline`` while it is unreachable."""
    while True:
        request = urllib.request.Request(url, data=body, method=method)  # noqa: S310 (http only)
        try:
            with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310
                return response.read()
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, ConnectionRefusedError):
                # The server is started before its address is handed out, so a refusal means
                # it was stopped: the epoch was superseded or the controller closed.
                raise HorovodRendezvousError(
                    f"the rendezvous server at {_redacted(url)} is gone (epoch superseded or "
                    f"controller closed): {reason}"
                ) from exc
            if time.monotonic() > deadline:
                raise HorovodRendezvousError(
                    f"cannot reach the rendezvous server at {_redacted(url)}: {exc}"
                ) from exc
            time.sleep(0.05)


def _iface_towards(host: str, port: int) -> str | None:
    """The network interface this machine uses to reach ``host`` (``None`` if unknown)."""
    try:
        import psutil

        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect((host, port))  # UDP connect sends nothing; it only picks a route
            local_ip = probe.getsockname()[0]
        for name, addresses in psutil.net_if_addrs().items():
            if any(address.address.split("%")[0] == local_ip for address in addresses):
                return name
    except (OSError, ImportError):
        pass
    return "lo" if host.startswith("127.") or host in ("localhost", "::1") else None
