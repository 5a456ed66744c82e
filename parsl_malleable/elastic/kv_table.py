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
from typing import Any

KV_OPS = frozenset(
    {"kv_set", "kv_get", "kv_add", "kv_cas", "kv_check", "kv_wait", "kv_delete", "kv_num"}
)
MAX_KEY = 1024
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


def serve(table: KeyValueTable, message: dict[str, Any]) -> dict[str, Any]:
    """Answer one ``kv_*`` request; a malformed one gets an ``error`` reply, never an exception."""
    try:
        return _serve(table, message)
    except (KeyError, TypeError, ValueError, binascii.Error) as exc:
        return {"error": f"bad {message.get('op')!r} request: {exc}"}


def _key(message: dict[str, Any], field: str = "key") -> str:
    key = message[field]
    if not isinstance(key, str) or not 0 < len(key) <= MAX_KEY:
        raise ValueError(f"a key must be a string of 1-{MAX_KEY} characters")
    return key


def _keys(message: dict[str, Any]) -> list[str]:
    keys = message["keys"]
    if not isinstance(keys, list):
        raise TypeError("keys must be a list")
    return [_key({"key": k}) for k in keys]


def _bytes(message: dict[str, Any], field: str) -> bytes:
    return base64.b64decode(str(message[field]), validate=True)


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode()


def _serve(table: KeyValueTable, message: dict[str, Any]) -> dict[str, Any]:
    op = message.get("op")
    timeout_s = float(message.get("timeout_s", 0.0))
    if op == "kv_set":
        table.set(_key(message), _bytes(message, "value"))
        return {"ok": True}
    if op == "kv_get":
        value = table.get(_key(message), timeout_s)
        if value is None:
            return {"error": f"timeout: key {message['key']!r} not set after {timeout_s} s"}
        return {"value": _b64(value)}
    if op == "kv_add":
        return {"value": table.add(_key(message), int(message["amount"]))}
    if op == "kv_cas":
        held = table.compare_set(
            _key(message), _bytes(message, "expected"), _bytes(message, "desired")
        )
        return {"value": _b64(held)}
    if op == "kv_check":
        return {"ok": table.check(_keys(message))}
    if op == "kv_wait":
        if not table.wait(_keys(message), timeout_s):
            return {"error": f"timeout: keys not all set after {timeout_s} s"}
        return {"ok": True}
    if op == "kv_delete":
        return {"ok": table.delete(_key(message))}
    if op == "kv_num":
        return {"value": len(table)}
    return {"error": f"unknown op {op!r}"}


__all__ = ["KV_OPS", "KeyValueTable", "serve"]
