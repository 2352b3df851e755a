"""Open mode (``serve`` without ``--tokens``) behind its own door, over a real socket: only the
bound loopback address in ``Host``, no foreign ``Origin``, writes only as JSON
(``api_stub/server/guard.py``). With tokens, none of it applies."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from hivemind_memory.projections.store import keys
from tests.support.frontdoor import ALICE, Live, call, created, start_live

NS = "n"


@pytest.fixture
def open_srv(tmp_path: Path) -> Iterator[Live]:
    srv = start_live(f"memory://{tmp_path / 'open'}", tokens=None)
    try:
        yield srv
    finally:
        srv.stop()


def _port(srv: Live) -> int:
    port = urlsplit(srv.base).port
    assert port is not None
    return port


def _logged(srv: Live) -> int:
    return int(srv.served.client.store.xlen(keys.stream(NS)))


def _write(srv: Live, **headers: str) -> tuple[int, dict[str, object]]:
    return call(srv.base, "POST", f"/v1/ns/{NS}/events",
                [created(f"e{_logged(srv)}", f"n{_logged(srv)}", "the door code is 4711",
                         agent="al")], headers=headers)


def test_a_foreign_host_is_refused_and_reads_nothing(open_srv: Live) -> None:
    port = _port(open_srv)
    assert _write(open_srv)[0] == 200
    for host in ("evil.example", f"evil.example:{port}", f"127.0.0.1:{port + 1}",
                 f"127.0.0.2:{port}", f"localhost.evil.example:{port}", ""):
        st, body = call(open_srv.base, "POST", f"/v1/ns/{NS}/query",
                        {"text": "door code", "budget": 50, "agent": "al"},
                        headers={"Host": host})
        assert st == 421, (host, body)
        assert body["error"]["code"] == "misdirected_host"  # type: ignore[index]
        st, body = call(open_srv.base, "GET", "/v1/namespaces", headers={"Host": host})
        assert st == 421, (host, body)
    assert _write(open_srv, Host=f"evil.example:{port}")[0] == 421
    assert _logged(open_srv) == 1
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}"):
        st, res = call(open_srv.base, "POST", f"/v1/ns/{NS}/query",
                       {"text": "door code", "budget": 50, "agent": "al"},
                       headers={"Host": host})
        assert st == 200 and len(res["notes"]) == 1, (host, res)  # type: ignore[arg-type]


def test_a_foreign_origin_is_refused(open_srv: Live) -> None:
    port = _port(open_srv)
    for origin in ("http://evil.example", "null", f"http://127.0.0.1:{port + 1}",
                   f"https://127.0.0.1:{port}", f"http://evil.example:{port}"):
        st, body = _write(open_srv, Origin=origin)
        assert st == 403, (origin, body)
        assert body["error"]["code"] == "forbidden_origin"  # type: ignore[index]
    assert _logged(open_srv) == 0
    for origin in (f"http://127.0.0.1:{port}", f"http://localhost:{port}"):
        assert _write(open_srv, Origin=origin)[0] == 200  # the explorer: same origin
    assert _logged(open_srv) == 2


def test_a_write_must_be_json(open_srv: Live) -> None:
    """A form post or a ``no-cors`` fetch (``text/plain``) holding JSON writes nothing."""
    for ctype in ("text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
                  "multipart/form-data; boundary=x", "application/jsonx", ""):
        st, body = _write(open_srv, **{"Content-Type": ctype})
        assert st == 415, (ctype, body)
        assert body["error"]["code"] == "unsupported_media_type"  # type: ignore[index]
    for path in ("/remember", "/forget", "/used", "/revise", "/query"):
        st, _ = call(open_srv.base, "POST", f"/v1/ns/{NS}{path}", {"text": "x", "agent": "al"},
                     headers={"Content-Type": "text/plain"})
        assert st == 415, path
    assert _logged(open_srv) == 0
    for ctype in ("application/json", "application/json; charset=utf-8", "Application/JSON"):
        assert _write(open_srv, **{"Content-Type": ctype})[0] == 200, ctype
    assert _logged(open_srv) == 3


def test_with_tokens_the_token_is_the_door(live: Live) -> None:
    """With tokens, Host, Origin and Content-Type are not looked at (a foreign page cannot
    send the bearer token)."""
    st, body = call(live.base, "POST", "/v1/ns/team-a/events", [created("e1", "n1@@alice", "x")],
                    token=ALICE, headers={"Host": "elsewhere.example", "Origin": "null",
                                          "Content-Type": "text/plain"})
    assert st == 200, body
