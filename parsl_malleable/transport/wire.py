"""JSON-lines messages between ranks and the membership coordinator: the client side.

One request, one reply, each a single JSON object on one line. Every connection starts with a
challenge: the coordinator sends a random nonce and the client answers with
HMAC-SHA256(job token, nonce) (:func:`proof`), so a stray client (or another job's rank) cannot
change a job's membership, and the token itself never crosses the wire. The server side is
:mod:`~parsl_malleable.transport.server`; the messages' shapes are
:mod:`~parsl_malleable.elastic.messages`.

A server under a flood of strangers may evict a handshake in progress (it tells the client
``busy``, or just closes): connecting then retries with backoff for ``retry_for_s``. A wrong
token, a server that speaks another protocol, or none listening is not retried.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import socket
import threading
from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_delay,
    wait_random_exponential,
)

from parsl_malleable.errors import MalleableError
from parsl_malleable.transport.messages import Auth, Challenge, Refusal, Request

logger = logging.getLogger(__name__)

MAX_LINE = 1 << 20
# How long a client keeps retrying handshakes that a busy server evicted.
RETRY_FOR_S = 30.0


R = TypeVar("R")


class PeerUnavailable(MalleableError):
    """The server at the other end (a job's coordinator, the controller's agent server) cannot
    be reached, or closed the connection (the job, or the run, has ended)."""


class HandshakeBusy(PeerUnavailable):
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
        return PeerUnavailable(f"coordinator {where} sent no challenge")
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
            raise PeerUnavailable(f"coordinator {where} sent no challenge") from None
        send_message(sock, Auth(op="auth", mac=proof(token, nonce)).model_dump())
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
        raise PeerUnavailable(f"coordinator {where}: authentication failed: {exc}") from exc
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


class RequestClient:
    """An authenticated request connection (thread-safe, one request at a time): a rank's to
    its coordinator, a node agent's to the controller.

    :meth:`call` sends a typed request and validates the answer as the type it expects, so
    neither side reads a raw dict.
    """

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

    @property
    def local_address(self) -> str:
        """This end's address: the interface of this host that reaches the server."""
        return str(self._sock.getsockname()[0])

    @property
    def peer_address(self) -> tuple[str, int]:
        """The server's address and port as this connection reaches them."""
        host, port = self._sock.getpeername()[:2]
        return str(host), int(port)

    def call(self, request: Request, answer: type[R] | TypeAdapter[R]) -> R:
        """Send ``request`` and wait (without limit: some requests block) for its answer.

        Raises :class:`PeerUnavailable` when the connection fails or the answer is not
        an ``answer`` (a peer of another version), :class:`MalleableError` for a refusal.
        """
        op = request.op
        reply = self.exchange(request.to_json())
        if "error" in reply:
            raise MalleableError(f"{self.host}:{self.port} refused {op!r}: {reply['error']}")
        try:
            if isinstance(answer, TypeAdapter):
                return answer.validate_python(reply)
            return answer.model_validate(reply)  # type: ignore[attr-defined]
        except ValidationError as exc:
            first = exc.errors(include_url=False, include_input=False)[0]
            where = ".".join(str(part) for part in first["loc"]) or "answer"
            raise PeerUnavailable(
                f"{self.host}:{self.port} answered {op!r} with a malformed message "
                f"({where}: {first['msg']})"
            ) from exc

    def exchange(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send one raw message and return the raw reply, refusals included: the transport
        under :meth:`call`, and what a probe or a test of malformed requests uses."""
        op = message.get("op")
        with self._lock:
            try:
                send_message(self._sock, message)
                reply = self._reader.read()
            except OSError as exc:
                raise PeerUnavailable(
                    f"{self.host}:{self.port} dropped request {op!r}: {exc}"
                ) from exc
        if reply is None:
            raise PeerUnavailable(f"{self.host}:{self.port} closed during {op!r}")
        return reply

    def close(self) -> None:
        """Close the connection."""
        self._sock.close()


def _connect(host: str, port: int, timeout_s: float) -> socket.socket:
    try:
        sock = socket.create_connection((host, port), timeout=timeout_s)
    except OSError as exc:
        raise PeerUnavailable(f"cannot reach coordinator at {host}:{port}: {exc}") from exc
    sock.settimeout(None)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock
