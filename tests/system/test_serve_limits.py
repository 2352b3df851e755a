"""``hivemind serve`` bounds what a connection may hold: a request that does not arrive within
``HIVEMIND_HTTP_READ_TIMEOUT`` of its first byte (half a request line, a trickling body, or
nothing at all) has its connection closed, while a normal request on the same server is
answered (``api_stub/server/limits.py``)."""

from __future__ import annotations

import socket
import time
from pathlib import Path

from tests.support.frontdoor import call, start_serve


def _closed_within(s: socket.socket, seconds: float) -> bool:
    """Whether the server closes ``s`` within ``seconds`` (recv returns b"")."""
    s.settimeout(seconds)
    try:
        while True:
            got = s.recv(4096)
            if not got:
                return True
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def test_half_sent_requests_are_closed_after_the_read_timeout(tmp_path: Path) -> None:
    srv = start_serve(["--redis-url", f"memory://{tmp_path / 'store'}"], tmp_path,
                      env={"HIVEMIND_HTTP_READ_TIMEOUT": "1.5"})
    port = srv.port
    try:
        socks = []
        for what in (b"", b"GET /healthz HT", b"POST /v1/ns/n/events HTTP/1.1\r\nHost: x\r\n",
                     b"POST /v1/ns/n/events HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n[" % port):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(what)
            socks.append(s)
        t0 = time.monotonic()
        assert call(srv.base, "GET", "/healthz")[0] == 200  # others are served meanwhile
        for s in socks:
            assert _closed_within(s, 10.0)
            s.close()
        waited = time.monotonic() - t0
        assert 1.0 <= waited < 10.0, waited
        # a request sent promptly on a fresh connection is not cut
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % port)
        s.settimeout(10)
        assert s.recv(4096).startswith(b"HTTP/1.1 200")
        s.close()
    finally:
        srv.stop()
