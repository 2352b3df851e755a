"""The access log of ``serve``: one ``http_request`` line per request, refused and forged ones
included, with method, path, status, error code, agent, ns and duration, and never a secret."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
from structlog.testing import capture_logs

from tests.support.frontdoor import ALICE, OPS, call, start_live, start_serve

FORGED = "forged-secret-0000000000"


def _requests(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in logs if e["event"] == "http_request"]


def test_one_line_per_request_answered_refused_or_forged(tmp_path: Path) -> None:
    srv = start_live(f"memory://{tmp_path / 'store'}")
    b = srv.base
    ev = {"type": "note.created", "event_id": "e1", "note_id": "n1@@alice",
          "at": "2026-05-01T09:00:00Z", "text": "deploys on tuesday"}
    try:
        with capture_logs() as logs:
            assert call(b, "POST", "/v1/ns/team-a/events", [ev], token=ALICE)[0] == 200
            assert call(b, "POST", "/v1/ns/team-a/events", [ev])[0] == 401
            assert call(b, "POST", "/v1/ns/team-a/events", [ev], token=FORGED)[0] == 401
            assert call(b, "GET", "/v1/ns/team-b/notes", token=ALICE)[0] == 403
            assert call(b, "GET", "/v1/nope?secret=x", token=OPS)[0] == 404
            mcp = httpx.post(b + "/mcp", headers={"Authorization": f"Bearer {FORGED}",
                                                  "Accept": "application/json",
                                                  "X-Hivemind-Ns": "team-a"},
                             json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
            assert mcp.status_code == 401
            assert call(b, "GET", "/readyz")[0] == 200
            deadline = time.monotonic() + 10
            while len(_requests(logs)) < 7:  # the last line is written after the reply
                assert time.monotonic() < deadline, _requests(logs)
                time.sleep(0.01)
    finally:
        srv.stop()
    got = _requests(logs)
    rows = [(e["method"], e["path"], e["status"], e["error"], e["agent"], e["auth"], e["ns"])
            for e in got]
    assert rows == [
        ("POST", "/v1/ns/team-a/events", 200, None, "alice", "token", "team-a"),
        ("POST", "/v1/ns/team-a/events", 401, "unauthorized", None, "missing", "team-a"),
        ("POST", "/v1/ns/team-a/events", 401, "unauthorized", None, "unknown", "team-a"),
        ("GET", "/v1/ns/team-b/notes", 403, "forbidden", "alice", "token", "team-b"),
        ("GET", "/v1/nope", 404, "not_found", "ops", "token", None),
        ("POST", "/mcp", 401, "unauthorized", None, "unknown", "team-a"),
        ("GET", "/readyz", 200, None, None, "missing", None),
    ]
    assert all(isinstance(e["duration_ms"], float) and e["duration_ms"] >= 0 for e in got)
    assert all(e["client"] == "127.0.0.1" for e in got)
    text = json.dumps(logs)
    for secret in (ALICE, OPS, FORGED):
        assert secret not in text


def test_serve_writes_the_line_to_its_stderr_log_without_the_secret(tmp_path: Path) -> None:
    (tmp_path / "tokens.toml").write_text(
        f'[[token]]\nsecret = "{ALICE}"\nns = ["team-a"]\nagent = "alice"\n'
        'rights = ["write", "query"]\n')
    srv = start_serve(["--redis-url", "memory://data", "--tokens", "tokens.toml"], tmp_path)
    try:
        assert call(srv.base, "GET", "/v1/ns/team-a/notes", token=FORGED)[0] == 401
        assert call(srv.base, "POST", "/v1/ns/team-a/query", {"text": "x", "budget": 5},
                    token=ALICE)[0] == 200
    finally:
        srv.stop()
    lines = [json.loads(ln) for ln in srv.stderr.read_text().splitlines() if ln.startswith("{")]
    reqs = [x for x in lines if x["event"] == "http_request" and x["path"].startswith("/v1")]
    assert [(x["status"], x["auth"], x["agent"], x["error"]) for x in reqs] == [
        (401, "unknown", None, "unauthorized"), (200, "token", "alice", None)]
    assert reqs[0]["logger"] == "hivemind.http" and reqs[0]["level"] == "info"
    raw = srv.stderr.read_text()
    assert FORGED not in raw and ALICE not in raw
