"""JSON-lines messages between ranks and the membership coordinator.

One request, one reply, each a single JSON object on one line. Every connection starts with a
challenge: the coordinator sends a random nonce and the client answers with
HMAC-SHA256(job token, nonce) (:func:`proof`), so a stray client (or another job's rank) cannot
change a job's membership, and the token itself never crosses the wire.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import secrets
import socket
import threading
from collections.abc import Callable
from typing import Any

from parsl_malleable.errors import MalleableError

MAX_LINE = 1 << 20


class CoordinatorUnavailable(MalleableError):
    """The coordinator cannot be reached, or closed the connection (the job has ended)."""


def proof(token: str, nonce: str) -> str:
    """What a client sends for the server's ``nonce``: it shows the token, never sends it."""
    return hmac.new(token.encode(), nonce.encode(), hashlib.sha256).hexdigest()


def derive_secret(secret: str, purpose: str) -> str:
    """A secret for ``purpose`` made from ``secret`` (HMAC-SHA256): whoever holds ``secret`` can
    compute it, so it never has to be sent; knowing it reveals nothing about ``secret``."""
    return hmac.new(secret.encode(), purpose.encode(), hashlib.sha256).hexdigest()


def challenge(sock: socket.socket, reader: LineReader, token: str) -> bool:
    """Server side of the handshake: send a fresh nonce, check the answer is
    :func:`proof` of ``token``. ``False`` (after telling the peer, where it answered) means the
    caller must close the connection. The socket's timeout bounds the wait."""
    nonce = secrets.token_hex(32)
    send_message(sock, {"challenge": nonce})
    answer = reader.read()
    if answer is None:
        return False
    if answer.get("op") != "auth" or not hmac.compare_digest(
        str(answer.get("mac", "")), proof(token, nonce)
    ):
        send_message(sock, {"error": "bad token"})
        return False
    send_message(sock, {"ok": True})
    return True


def _authenticate(
    sock: socket.socket, reader: LineReader, token: str, where: str, timeout_s: float
) -> None:
    """Client side of the handshake; a server that sends no challenge within ``timeout_s``
    (one that speaks another protocol) raises instead of leaving the client waiting forever."""
    sock.settimeout(timeout_s)
    try:
        offer = reader.read()
        if offer is None or not isinstance(offer.get("challenge"), str):
            raise CoordinatorUnavailable(f"coordinator {where} sent no challenge")
        send_message(sock, {"op": "auth", "mac": proof(token, offer["challenge"])})
        reply = reader.read()
        if reply is None:
            raise CoordinatorUnavailable(f"coordinator {where} closed during authentication")
        if "error" in reply:
            raise MalleableError(f"coordinator refused the connection: {reply['error']}")
    except (OSError, ValueError) as exc:
        sock.close()
        raise CoordinatorUnavailable(f"coordinator {where}: authentication failed: {exc}") from exc
    except MalleableError:
        sock.close()
        raise
    sock.settimeout(None)


def send_message(sock: socket.socket, message: dict[str, Any]) -> None:
    """Write one message as a JSON line."""
    sock.sendall(json.dumps(message, separators=(",", ":")).encode() + b"\n")


class LineReader:
    """Reads newline-terminated JSON objects from a socket, keeping any partial tail."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = b""

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

    def __init__(self, host: str, port: int, token: str, connect_timeout_s: float = 10.0) -> None:
        self.host = host
        self.port = port
        self._lock = threading.Lock()
        self._sock = _connect(host, port, connect_timeout_s)
        self._reader = LineReader(self._sock)
        _authenticate(self._sock, self._reader, token, f"{host}:{port}", connect_timeout_s)
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
        self._sock = _connect(host, port, 10.0)
        self._reader = LineReader(self._sock)
        _authenticate(self._sock, self._reader, token, f"{host}:{port}", 10.0)
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
