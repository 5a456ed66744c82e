"""The rendezvous key-value table a job's coordinator serves to its own (authenticated) ranks.

torch.distributed forms a group through a *store* (keys such as each rank's address). Instead of
a ``TCPStore`` (its own port, every interface, no authentication), the coordinator holds the
keys here and serves them as ``kv_*`` ops on its challenge-authenticated connections
(:mod:`~parsl_malleable.elastic.coordinator_store` is the rank's end). Values are bytes, sent
as base64 in the JSON messages; blocking reads wait on a condition, bounded by the caller's
timeout, and end at once when the table is closed.
"""

from __future__ import annotations

import base64
import binascii
import threading
import time

from parsl_malleable.elastic.messages import (
    KvAdd,
    KvBytes,
    KvCas,
    KvCheck,
    KvCount,
    KvDelete,
    KvFlag,
    KvGet,
    KvNum,
    KvSet,
    KvWait,
)
from parsl_malleable.transport.messages import Ok, Refusal, Reply

# What a rank's store sends (validated as these before serve() sees them).
KV_REQUESTS = (KvSet, KvGet, KvAdd, KvCas, KvCheck, KvWait, KvDelete, KvNum)
KvRequest = KvSet | KvGet | KvAdd | KvCas | KvCheck | KvWait | KvDelete | KvNum
MAX_WAIT_S = 3600.0


class KeyValueTable:
    """Thread-safe ``str -> bytes`` map with waits, as ``torch.distributed.Store`` means them."""

    def __init__(self) -> None:
        self._data: dict[str, bytes] = {}
        self._cond = threading.Condition()
        self._closed = False
        self.waiting = 0  # requests blocked in wait() now (diagnostics, tests)

    def set(self, key: str, value: bytes) -> None:
        """Store ``value`` under ``key`` and wake waiting readers."""
        with self._cond:
            self._data[key] = value
            self._cond.notify_all()

    def wait(self, keys: list[str], timeout_s: float) -> bool:
        """Whether every key exists within ``timeout_s`` (``False`` on timeout or close)."""
        deadline = time.monotonic() + min(max(timeout_s, 0.0), MAX_WAIT_S)
        with self._cond:
            self.waiting += 1
            try:
                while not all(k in self._data for k in keys):
                    left = deadline - time.monotonic()
                    if self._closed or left <= 0:
                        return False
                    self._cond.wait(left)
                return True
            finally:
                self.waiting -= 1

    def get(self, key: str, timeout_s: float) -> bytes | None:
        """The value of ``key`` once it exists, or ``None`` after ``timeout_s`` (or close)."""
        with self._cond:
            if not self.wait([key], timeout_s):
                return None
            return self._data[key]

    def add(self, key: str, amount: int) -> int:
        """Add ``amount`` to the integer under ``key`` (0 if absent); the new value."""
        with self._cond:
            value = int(self._data.get(key, b"0")) + amount
            self._data[key] = str(value).encode()
            self._cond.notify_all()
            return value

    def compare_set(self, key: str, expected: bytes, desired: bytes) -> bytes:
        """Set ``desired`` if ``key`` holds ``expected`` (or is absent and ``expected`` is empty);
        the value now held (``expected`` when the key is absent and nothing was set), as
        ``TCPStore`` does."""
        with self._cond:
            current = self._data.get(key)
            if current is None:
                if expected:
                    return expected
            elif current != expected:
                return current
            self._data[key] = desired
            self._cond.notify_all()
            return desired

    def check(self, keys: list[str]) -> bool:
        """Whether every key exists now."""
        with self._cond:
            return all(k in self._data for k in keys)

    def delete(self, key: str) -> bool:
        """Remove ``key``; whether it existed."""
        with self._cond:
            return self._data.pop(key, None) is not None

    def delete_prefix(self, prefix: str) -> int:
        """Remove every key under ``prefix`` (an abandoned epoch's); how many."""
        with self._cond:
            doomed = [k for k in self._data if k.startswith(prefix)]
            for key in doomed:
                del self._data[key]
            return len(doomed)

    def __len__(self) -> int:
        with self._cond:
            return len(self._data)

    def close(self) -> None:
        """Wake every waiter; later waits fail at once."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()


def serve(table: KeyValueTable, request: KvRequest) -> Reply | Refusal:
    """Answer one validated ``kv_*`` request (keys are checked by the message models); a value
    that is not base64 gets a refusal, never an exception."""
    try:
        return _serve(table, request)
    except (ValueError, binascii.Error) as exc:
        return Refusal(error=f"bad {request.op!r} request: {exc}")


def _bytes(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode()


def _serve(table: KeyValueTable, request: KvRequest) -> Reply | Refusal:
    match request:
        case KvSet():
            table.set(request.key, _bytes(request.value))
            return Ok()
        case KvGet():
            value = table.get(request.key, request.timeout_s)
            if value is None:
                return Refusal(
                    error=f"timeout: key {request.key!r} not set after {request.timeout_s} s"
                )
            return KvBytes(value=_b64(value))
        case KvAdd():
            return KvCount(value=table.add(request.key, request.amount))
        case KvCas():
            held = table.compare_set(request.key, _bytes(request.expected), _bytes(request.desired))
            return KvBytes(value=_b64(held))
        case KvCheck():
            return KvFlag(ok=table.check(request.keys))
        case KvWait():
            if not table.wait(request.keys, request.timeout_s):
                return Refusal(error=f"timeout: keys not all set after {request.timeout_s} s")
            return Ok()
        case KvDelete():
            return KvFlag(ok=table.delete(request.key))
        case KvNum():
            return KvCount(value=len(table))


__all__ = ["KV_REQUESTS", "KeyValueTable", "KvRequest", "serve"]
