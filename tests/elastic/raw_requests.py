"""Requests at the wire level, for tests of the protocol itself (malformed ones included).

The product sends typed requests (:meth:`RequestClient.call`); a test that checks what the
server does with a request of any shape sends the raw message and reads the raw reply, as the
client did before the messages were typed: an ``error`` reply raises :class:`MalleableError`.
"""

from __future__ import annotations

from typing import Any

from parsl_malleable.errors import MalleableError
from parsl_malleable.transport.wire import RequestClient


def request(client: RequestClient, op: str, **fields: Any) -> dict[str, Any]:
    """Send ``op`` with ``fields`` as they are; the reply, or MalleableError for a refusal."""
    reply = client.exchange({"op": op, **fields})
    if "error" in reply:
        raise MalleableError(f"coordinator refused {op!r}: {reply['error']}")
    return reply
