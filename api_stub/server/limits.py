"""Bounds on what a connection may hold of ``hivemind serve``.

uvicorn closes an idle kept-alive connection (``timeout_keep_alive``) but has no timeout for a
request that is still arriving: a client that sends half a request line and waits keeps its
socket (and a file descriptor) for good, and a thousand such clients stop the server.
``GuardedH11Protocol`` is uvicorn's h11 protocol with a request-read timeout: from the first
byte of a request until its head and body are in, at most ``read_timeout_s``; then the
connection is closed. Together with ``limit_concurrency`` (uvicorn answers 503 past it) and
the unit's ``LimitNOFILE``, no client can hold the server's sockets.
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

READ_TIMEOUT_S = 10.0
"""Default: seconds a request may take to arrive (head and body)."""


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request is not in within
    ``read_timeout_s`` of its first byte (class attribute; ``protocol_with`` sets it)."""

    read_timeout_s: float = READ_TIMEOUT_S

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._read_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()  # a connection that sends nothing at all is a request not arriving

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state in (h11.IDLE, h11.SEND_BODY):  # a request still arriving
            if self._read_timer is None:
                self._arm()
        else:
            self._disarm()

    def on_response_complete(self) -> None:
        self._disarm()  # between requests uvicorn's keep-alive timeout applies
        super().on_response_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._read_timer = self.loop.call_later(self.read_timeout_s, self._read_timed_out)

    def _disarm(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def _read_timed_out(self) -> None:
        self._read_timer = None
        if self.conn.their_state in (h11.IDLE, h11.SEND_BODY) and \
                not self.transport.is_closing():
            self.transport.close()  # a body trickling in: its handler sees a disconnect


def protocol_with(read_timeout_s: float) -> type[GuardedH11Protocol]:
    """A ``GuardedH11Protocol`` class with its timeout (uvicorn takes a class)."""
    return type("GuardedH11Protocol", (GuardedH11Protocol,), {"read_timeout_s": read_timeout_s})
