"""JSON-lines messages between ranks and the membership coordinator: the client side.

One request, one reply, each a single JSON object on one line. Every connection starts with a
challenge: the coordinator sends a random nonce and the client answers with
HMAC-SHA256(job token, nonce) (:func:`proof`), so a stray client (or another job's rank) cannot
change a job's membership, and the token itself never crosses the wire. The server side is
:mod:`~parsl_malleable.elastic.message_server`; the messages' shapes are
:mod:`~parsl_malleable.elastic.messages`.

A server under a flood of strangers may evict a handshake in progress (it tells the client
``busy``, or just closes): connecting then retries with backoff for ``retry_for_s``. A wrong
token, a server that speaks another protocol, or none listening is not retried.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
import socket
import threading
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_delay,
    wait_random_exponential,
)

from parsl_malleable.elastic.messages import Challenge, Refusal
from parsl_malleable.errors import MalleableError

logger = logging.getLogger(__name__)

MAX_LINE = 1 << 20
# How long a client keeps retrying handshakes that a busy server evicted.
RETRY_FOR_S = 30.0


class CoordinatorUnavailable(MalleableError):
    """The coordinator cannot be reached, or closed the connection (the job has ended)."""


class HandshakeBusy(CoordinatorUnavailable):
    """The server dropped this connection during its handshake (it was evicted by newcomers, or
    every handler slot was taken): a new connection may get in."""


def proof(token: str, nonce: str) -> str:
    """What a client sends for the server's ``nonce``: it shows the token, never sends it."""
    return hmac.new(token.encode(), nonce.encode(), hashlib.sha256).hexdigest()


def derive_secret(secret: str, purpose: str) -> str:
    """A secret for ``purpose`` made from ``secret`` (HMAC-SHA256): whoever holds ``secret`` can
    compute it, so it never has to be sent; knowing it reveals nothing about ``secret``."""
    return hmac.new(secret.encode(), purpose.encode(), hashlib.sha256).hexdigest()


def _refused(reply: dict[str, Any], where: str) -> MalleableError:
    """What an ``error`` reply to the handshake means for the client."""
    try:
        refusal = Refusal.model_validate(reply)
    except ValidationError:
        return CoordinatorUnavailable(f"coordinator {where} sent no challenge")
    if refusal.retry:
        return HandshakeBusy(f"coordinator {where} is busy: {refusal.error}")
    return MalleableError(f"coordinator refused the connection: {refusal.error}")


def _authenticate(
    sock: socket.socket, reader: LineReader, token: str, where: str, timeout_s: float
) -> None:
    """Client side of the handshake; a server that sends no challenge within ``timeout_s``
    (one that speaks another protocol) raises instead of leaving the client waiting forever."""
    sock.settimeout(timeout_s)
    try:
        offer = reader.read()
        if offer is None:
            raise HandshakeBusy(f"coordinator {where} closed the connection before its challenge")
        if "challenge" not in offer:
            raise _refused(offer, where)
        try:
            nonce = Challenge.model_validate(offer).challenge
        except ValidationError:
            raise CoordinatorUnavailable(f"coordinator {where} sent no challenge") from None
        send_message(sock, {"op": "auth", "mac": proof(token, nonce)})
        reply = reader.read()
        if reply is None:
            raise HandshakeBusy(f"coordinator {where} closed during authentication")
        if "error" in reply:
            raise _refused(reply, where)
    except MalleableError:
        sock.close()
        raise
    except (ConnectionResetError, BrokenPipeError) as exc:
        # An evicted handshake whose answer the server never read ends in a reset.
        sock.close()
        raise HandshakeBusy(f"coordinator {where} reset the connection: {exc}") from exc
    except (OSError, ValueError) as exc:
        sock.close()
        raise CoordinatorUnavailable(f"coordinator {where}: authentication failed: {exc}") from exc
    sock.settimeout(None)


def _log_retry(state: RetryCallState) -> None:
    error = state.outcome.exception() if state.outcome is not None else None
    logger.debug("handshake attempt %d failed (%s); retrying", state.attempt_number, error)


def open_authenticated(
    host: str, port: int, token: str, timeout_s: float = 10.0, retry_for_s: float = RETRY_FOR_S
) -> tuple[socket.socket, LineReader]:
    """A connection that passed the server's challenge, and its reader.

    ``timeout_s`` bounds the connect and each handshake read; handshakes the server evicted
    (:class:`HandshakeBusy`) are retried with jittered exponential backoff for ``retry_for_s``.
    """
    where = f"{host}:{port}"

    def attempt() -> tuple[socket.socket, LineReader]:
        sock = _connect(host, port, timeout_s)
        reader = LineReader(sock)
        _authenticate(sock, reader, token, where, timeout_s)
        return sock, reader

    retrying = Retrying(
        retry=retry_if_exception_type(HandshakeBusy),
        wait=wait_random_exponential(multiplier=0.05, max=2.0),
        stop=stop_after_delay(retry_for_s),
        before_sleep=_log_retry,
        reraise=True,
    )
    return retrying(attempt)


def send_message(sock: socket.socket, message: dict[str, Any]) -> None:
    """Write one message as a JSON line."""
    sock.sendall(json.dumps(message, separators=(",", ":")).encode() + b"\n")


class LineReader:
    """Reads newline-terminated JSON objects from a socket, keeping any partial tail.

    ``buffered``: bytes already read from the socket (what followed the handshake's line).
    """

    def __init__(self, sock: socket.socket, buffered: bytes = b"") -> None:
        self._sock = sock
        self._buffer = buffered

    def read(self) -> dict[str, Any] | None:
        """The next message, or ``None`` when the peer closed the connection."""
        while b"\n" not in self._buffer:
            chunk = self._sock.recv(65536)
            if not chunk:
                return None
            self._buffer += chunk
            if len(self._buffer) > MAX_LINE:
                raise ValueError(f"message longer than {MAX_LINE} bytes")
        line, _, self._buffer = self._buffer.partition(b"\n")
        message = json.loads(line)
        if not isinstance(message, dict):
            raise ValueError("message is not a JSON object")
        return message


class CoordinatorClient:
    """A rank's request connection to the coordinator (thread-safe, one request at a time)."""

    def __init__(
        self,
        host: str,
        port: int,
        token: str,
        connect_timeout_s: float = 10.0,
        retry_for_s: float = RETRY_FOR_S,
    ) -> None:
        self.host = host
        self.port = port
        self._lock = threading.Lock()
        self._sock, self._reader = open_authenticated(
            host, port, token, connect_timeout_s, retry_for_s
        )
        self.request("hello")

    @property
    def local_address(self) -> str:
        """This end's address: the interface of this host that reaches the coordinator."""
        return str(self._sock.getsockname()[0])

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        """Send ``op`` with ``fields`` and wait (without limit: some ops block) for the reply."""
        with self._lock:
            try:
                send_message(self._sock, {"op": op, **fields})
                reply = self._reader.read()
            except OSError as exc:
                raise CoordinatorUnavailable(
                    f"coordinator {self.host}:{self.port} dropped request {op!r}: {exc}"
                ) from exc
        if reply is None:
            raise CoordinatorUnavailable(
                f"coordinator {self.host}:{self.port} closed during {op!r}"
            )
        if "error" in reply:
            raise MalleableError(f"coordinator refused {op!r}: {reply['error']}")
        return reply

    def close(self) -> None:
        """Close the connection."""
        self._sock.close()


class Heartbeat:
    """A second connection that only pings; the coordinator treats its loss as the rank's death.

    A killed process's sockets are closed by the kernel, so the coordinator learns of a SIGKILL at
    once; a silent network loss is caught by the missing pings instead.
    """

    def __init__(
        self,
        host: str,
        port: int,
        token: str,
        member_id: str,
        interval_s: float = 1.0,
        on_notice: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self._sock, self._reader = open_authenticated(host, port, token)
        send_message(self._sock, {"op": "liveness", "member": member_id})
        if self._reader.read() is None:
            raise CoordinatorUnavailable(f"coordinator {host}:{port} refused liveness connection")
        self._interval = interval_s
        self._on_notice = on_notice
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="elastic-heartbeat", daemon=True)
        self._thread.start()
        self._listener = threading.Thread(target=self._listen, name="elastic-notices", daemon=True)
        self._listener.start()

    def _listen(self) -> None:
        """Notices pushed by the coordinator (a peer of this epoch was lost)."""
        try:
            while (notice := self._reader.read()) is not None:
                if self._on_notice is not None:
                    self._on_notice(notice)
        except (OSError, ValueError):
            return

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                send_message(self._sock, {"op": "ping"})
            except OSError:
                return

    def close(self) -> None:
        """Stop pinging and close the connection."""
        self._stop.set()
        # shutdown() first: close() alone waits for the listener's blocked recv to return.
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()


def _connect(host: str, port: int, timeout_s: float) -> socket.socket:
    try:
        sock = socket.create_connection((host, port), timeout=timeout_s)
    except OSError as exc:
        raise CoordinatorUnavailable(f"cannot reach coordinator at {host}:{port}: {exc}") from exc
    sock.settimeout(None)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock
