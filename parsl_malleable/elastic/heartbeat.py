"""A rank's liveness connection to its coordinator: pings up, notices down.

The coordinator treats the connection's loss, or missing pings, as the rank's death; it pushes
notices on it (:class:`~parsl_malleable.elastic.messages.PeerLostNotice`,
:class:`~parsl_malleable.elastic.messages.DroppedNotice`).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Callable

from pydantic import ValidationError

from parsl_malleable.elastic.messages import NOTICE, DroppedNotice, Liveness, Notice, Ping
from parsl_malleable.transport.wire import PeerUnavailable, open_authenticated, send_message

logger = logging.getLogger(__name__)

PING = Ping().to_json()  # the liveness connection's only message; its content is not read


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
        on_notice: Callable[[Notice], None] | None = None,
    ) -> None:
        self._sock, self._reader = open_authenticated(host, port, token)
        send_message(self._sock, Liveness(member=member_id).to_json())
        if self._reader.read() is None:
            raise PeerUnavailable(f"coordinator {host}:{port} refused liveness connection")
        self._interval = interval_s
        self._on_notice = on_notice
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="elastic-heartbeat", daemon=True)
        self._thread.start()
        self._listener = threading.Thread(target=self._listen, name="elastic-notices", daemon=True)
        self._listener.start()

    def _listen(self) -> None:
        """Notices pushed by the coordinator (a peer of this epoch was lost; this rank was
        dropped). The connection ending, unless :meth:`close` ended it, is a drop too: the
        coordinator no longer counts this rank."""
        why = "liveness connection closed by the coordinator"
        try:
            while (raw := self._reader.read()) is not None:
                try:
                    notice = NOTICE.validate_python(raw)
                except ValidationError:
                    logger.debug("ignoring an unknown notice from the coordinator: %.200r", raw)
                    continue
                if self._on_notice is not None:
                    self._on_notice(notice)
        except (OSError, ValueError) as exc:
            why = f"liveness connection failed: {exc}"
        if not self._stop.is_set() and self._on_notice is not None:
            self._on_notice(DroppedNotice(why=why))

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                send_message(self._sock, PING)
            except OSError:
                return

    def close(self) -> None:
        """Stop pinging and close the connection."""
        self._stop.set()
        # shutdown() first: close() alone waits for the listener's blocked recv to return.
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()


__all__ = ["Heartbeat"]
