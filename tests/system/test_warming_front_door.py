"""A namespace too large to build inside a query job is built off the query's path, and its
queries meanwhile get ``index_warming`` at once through every door (HTTP 503 with
``Retry-After``, the SDK's ``IndexWarming``), then answers once the build wrote the snapshot."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from hivemind_memory.api_stub.sdk import Memory
from hivemind_memory.events.errors import IndexWarming
from hivemind_memory.worker import engine as engine_mod
from tests.support.frontdoor import ALICE, call, created, start_live


def _query(base: str, text: str) -> tuple[int, dict[str, str], Any]:
    return _post(base, "/v1/ns/team-a/query", {"text": text, "budget": 50})


def _post(base: str, path: str, body: Any) -> tuple[int, dict[str, str], Any]:
    """``(status, headers with lower-case names, decoded JSON body)`` of one POST."""
    req = urllib.request.Request(base + path, method="POST", data=json.dumps(body).encode())
    req.add_header("Content-Type", "application/json")
    req.add_header("Authorization", f"Bearer {ALICE}")
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            heads = {k.lower(): v for k, v in resp.headers.items()}
            return resp.status, heads, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        heads = {k.lower(): v for k, v in exc.headers.items()}
        return exc.code, heads, json.loads(exc.read())


def test_a_large_first_load_is_503_index_warming_at_once_then_answered(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()
    real = engine_mod.load_index

    def slow_build(*a: Any, **kw: Any) -> None:  # a build that takes as long as the test says
        assert release.wait(60)
        real(*a, **kw)

    monkeypatch.setattr(engine_mod, "load_index", slow_build)
    srv = start_live(f"memory://{tmp_path / 'w'}", warm_inline_max_notes=3, query_timeout_s=60)
    try:
        evs = [created(f"e{i}", f"n{i}@@alice", f"lease batch {i}") for i in range(3)]
        assert call(srv.base, "POST", "/v1/ns/team-a/events", evs, token=ALICE)[0] == 200
        t = time.monotonic()
        st, headers, body = _query(srv.base, "lease")
        assert st == 503 and body["error"]["code"] == "index_warming"
        assert headers.get("retry-after") == "2"
        assert "'team-a'" in body["error"]["message"]
        assert time.monotonic() - t < 30  # answered while the build is still held back
        st, _, body = _post(srv.base, "/v1/ns/team-a/recall", {"query": "lease", "budget": 50})
        assert st == 503 and body["error"]["code"] == "index_warming"
        with Memory(srv.base, ns="team-a", token=ALICE) as mem, \
                pytest.raises(IndexWarming) as err:
            mem.recall("lease", budget=50)
        assert err.value.code == "index_warming" and err.value.retry_after == 2
        release.set()
        deadline = time.monotonic() + 60
        while True:  # the build ends in the worker's thread; then the snapshot is read
            st, _, body = _query(srv.base, "lease")
            if st != 503 or time.monotonic() > deadline:
                break
            time.sleep(0.1)  # as a client honouring Retry-After would, only shorter
        assert st == 200 and sorted(n["note_id"] for n in body["notes"]) == [
            "n0@@alice", "n1@@alice", "n2@@alice"]
    finally:
        release.set()
        srv.stop()
