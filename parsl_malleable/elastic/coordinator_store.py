"""A ``torch.distributed.Store`` whose keys live in the job's coordinator.

Ranks form gloo/nccl groups through this store instead of a ``TCPStore``: every call is a
``kv_*`` request (:mod:`~parsl_malleable.elastic.kv_table`) on a connection that passed the
coordinator's challenge, so the job has no unauthenticated rendezvous port and a process
without the job's token can neither read nor write its keys. One connection per store: a
blocking ``get`` does not hold up the rank's own requests.
"""

from __future__ import annotations

import base64
import datetime
from typing import Any

import torch.distributed as dist

from parsl_malleable.elastic.wire import CoordinatorClient


def _b64(value: bytes | str) -> str:
    raw = value.encode() if isinstance(value, str) else bytes(value)
    return base64.b64encode(raw).decode()


class CoordinatorStore(dist.Store):
    """The store API over the coordinator's authenticated protocol.

    ``timeout_s`` bounds every blocking read, as a ``TCPStore``'s timeout does: a key that
    never comes raises instead of hanging the group's formation.
    """

    def __init__(self, host: str, port: int, token: str, timeout_s: float) -> None:
        super().__init__()
        self._client = CoordinatorClient(host, port, token)
        self._timeout_s = timeout_s

    @property
    def local_address(self) -> str:
        """This process's address on the interface that reaches the coordinator."""
        return self._client.local_address

    def _call(self, op: str, **fields: Any) -> dict[str, Any]:
        return self._client.request(op, **fields)

    def set(self, key: str, value: bytes | str) -> None:
        """Store ``value`` under ``key``."""
        self._call("kv_set", key=key, value=_b64(value))

    def get(self, key: str) -> bytes:
        """The value of ``key``, waiting for it up to the store's timeout."""
        reply = self._call("kv_get", key=key, timeout_s=self._timeout_s)
        return base64.b64decode(reply["value"])

    def add(self, key: str, amount: int) -> int:
        """Add ``amount`` to the counter ``key``; its new value."""
        return int(self._call("kv_add", key=key, amount=int(amount))["value"])

    def compare_set(self, key: str, expected: bytes | str, desired: bytes | str) -> bytes:
        """Set ``desired`` where ``key`` holds ``expected``; the value now held."""
        reply = self._call("kv_cas", key=key, expected=_b64(expected), desired=_b64(desired))
        return base64.b64decode(reply["value"])

    def wait(self, keys: list[str], timeout: datetime.timedelta | None = None) -> None:
        """Wait until every key exists (``timeout`` or the store's own)."""
        seconds = self._timeout_s if timeout is None else timeout.total_seconds()
        self._call("kv_wait", keys=list(keys), timeout_s=seconds)

    def check(self, keys: list[str]) -> bool:
        """Whether every key exists now."""
        return bool(self._call("kv_check", keys=list(keys))["ok"])

    def delete_key(self, key: str) -> bool:
        """Remove ``key``; whether it existed."""
        return bool(self._call("kv_delete", key=key)["ok"])

    def num_keys(self) -> int:
        """How many keys the job's table holds."""
        return int(self._call("kv_num")["value"])

    def close(self) -> None:
        """Close the connection."""
        self._client.close()


__all__ = ["CoordinatorStore"]
