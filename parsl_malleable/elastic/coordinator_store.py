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

import torch.distributed as dist

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
from parsl_malleable.transport.messages import Ok
from parsl_malleable.transport.wire import RequestClient


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
        self._client = RequestClient(host, port, token)
        self._timeout_s = timeout_s

    @property
    def local_address(self) -> str:
        """This process's address on the interface that reaches the coordinator."""
        return self._client.local_address

    @property
    def peer_address(self) -> tuple[str, int]:
        """The coordinator's address and port as this store's connection reaches them."""
        return self._client.peer_address

    def set(self, key: str, value: bytes | str) -> None:
        """Store ``value`` under ``key``."""
        self._client.call(KvSet(key=key, value=_b64(value)), Ok)

    def get(self, key: str) -> bytes:
        """The value of ``key``, waiting for it up to the store's timeout."""
        reply = self._client.call(KvGet(key=key, timeout_s=self._timeout_s), KvBytes)
        return base64.b64decode(reply.value)

    def add(self, key: str, amount: int) -> int:
        """Add ``amount`` to the counter ``key``; its new value."""
        return self._client.call(KvAdd(key=key, amount=int(amount)), KvCount).value

    def compare_set(self, key: str, expected: bytes | str, desired: bytes | str) -> bytes:
        """Set ``desired`` where ``key`` holds ``expected``; the value now held."""
        request = KvCas(key=key, expected=_b64(expected), desired=_b64(desired))
        return base64.b64decode(self._client.call(request, KvBytes).value)

    def wait(self, keys: list[str], timeout: datetime.timedelta | None = None) -> None:
        """Wait until every key exists (``timeout`` or the store's own)."""
        seconds = self._timeout_s if timeout is None else timeout.total_seconds()
        self._client.call(KvWait(keys=list(keys), timeout_s=seconds), Ok)

    def check(self, keys: list[str]) -> bool:
        """Whether every key exists now."""
        return self._client.call(KvCheck(keys=list(keys)), KvFlag).ok

    def delete_key(self, key: str) -> bool:
        """Remove ``key``; whether it existed."""
        return self._client.call(KvDelete(key=key), KvFlag).ok

    def num_keys(self) -> int:
        """How many keys the job's table holds."""
        return self._client.call(KvNum(), KvCount).value

    def close(self) -> None:
        """Close the connection."""
        self._client.close()


__all__ = ["CoordinatorStore"]
