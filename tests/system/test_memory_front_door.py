"""A worker that cannot hold a namespace's index says why, at once, through every door: HTTP
(507 ``namespace_too_large``, 503 ``worker_out_of_memory``), the SDK over HTTP, ``/readyz``,
``/metrics`` and the status endpoint; never a client timeout."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hivemind_memory.api_stub.sdk import Memory
from hivemind_memory.events.errors import HivemindError, QueryError
from hivemind_memory.worker import engine as engine_mod
from tests.support.frontdoor import ALICE, OPS, call, created, start_live

WORDS = ["lease", "batch", "replay", "agent", "budget", "query", "index", "shard", "memory",
         "worker", "snapshot", "eviction", "cache", "vector", "posting", "checkpoint"]


def _big_text(i: int) -> str:
    return " ".join(f"{WORDS[(i + k) % len(WORDS)]}{(i * 31 + k) % 997}" for k in range(400))


@pytest.mark.slow
def test_a_namespace_over_the_budget_is_507_at_once_and_shown(tmp_path: Path) -> None:
    # a 1 MiB budget; team-a gets ~1.7 MiB of text (its index cannot fit), team-b one note
    srv = start_live(f"memory://{tmp_path / 'm'}", memory_budget_mib=1, query_timeout_s=60)
    try:
        for part in range(6):  # bodies under the server's limit
            evs = [created(f"e{i}", f"n{i}@@alice", _big_text(i)) for i in range(part * 100,
                                                                        part * 100 + 100)]
            st, _ = call(srv.base, "POST", "/v1/ns/team-a/events", evs, token=ALICE)
            assert st == 200
        assert call(srv.base, "POST", "/v1/ns/team-b/events",
                    [created("b1", "m1", "lease batch")], token=OPS)[0] == 200
        st, body = call(srv.base, "POST", "/v1/ns/team-a/query",
                        {"text": "lease3 batch4", "budget": 500}, token=ALICE)
        assert st == 507 and body["error"]["code"] == "namespace_too_large"
        assert "'team-a'" in body["error"]["message"]
        assert "1.0 MiB" in body["error"]["message"]  # the budget, beside the size
        st, body = call(srv.base, "POST", "/v1/ns/team-a/recall",
                        {"query": "lease3", "budget": 500}, token=ALICE)
        assert st == 507 and body["error"]["code"] == "namespace_too_large"
        with Memory(srv.base, ns="team-a", token=ALICE) as mem, \
                pytest.raises(QueryError) as err:
            mem.recall("lease3 batch4", budget=500)
        assert err.value.code == "namespace_too_large"
        # the other namespace is answered by the same worker
        st, body = call(srv.base, "POST", "/v1/ns/team-b/query",
                        {"text": "lease", "budget": 50}, token=OPS)
        assert st == 200 and [n["note_id"] for n in body["notes"]] == ["m1"]
        _shown(srv.base, "team-a", "namespace_too_large")
    finally:
        srv.stop()


def test_a_load_out_of_memory_is_503_worker_out_of_memory_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = engine_mod.refresh_index

    def starved(r: Any, idx: Any, embedder: Any = None, **kw: Any) -> None:
        if idx.ns == "team-a":
            raise MemoryError  # what a worker under an address-space limit meets
        real(r, idx, embedder, **kw)

    monkeypatch.setattr(engine_mod, "refresh_index", starved)
    srv = start_live(f"memory://{tmp_path / 'o'}", query_timeout_s=60)
    try:
        assert call(srv.base, "POST", "/v1/ns/team-a/events",
                    [created("e1", "n1@@alice", "lease batch")], token=ALICE)[0] == 200
        st, body = call(srv.base, "POST", "/v1/ns/team-a/query",
                        {"text": "lease", "budget": 50}, token=ALICE)
        assert st == 503 and body["error"]["code"] == "worker_out_of_memory"
        assert "'team-a'" in body["error"]["message"]
        with Memory(srv.base, ns="team-a", token=ALICE) as mem, \
                pytest.raises(HivemindError) as err:
            mem.recall("lease", budget=50)
        assert "ran out of memory loading namespace 'team-a'" in str(err.value)
        assert getattr(err.value, "code", "worker_out_of_memory") == "worker_out_of_memory"
        _shown(srv.base, "team-a", "worker_out_of_memory")
        monkeypatch.setattr(engine_mod, "refresh_index", real)  # memory again: answered
        st, body = call(srv.base, "POST", "/v1/ns/team-a/query",
                        {"text": "lease", "budget": 50}, token=ALICE)
        assert st == 200 and [n["note_id"] for n in body["notes"]] == ["n1@@alice"]
    finally:
        srv.stop()


def _shown(base: str, ns: str, code: str) -> None:
    """``/readyz``, the status endpoint and ``/metrics`` name the failure (the worker's
    heartbeat carries it: it beats every 2 s, so wait for one that does)."""
    import time

    deadline = time.monotonic() + 15
    while True:
        st, h = call(base, "GET", "/readyz")
        if f"{ns}: {code}" in h["detail"] or time.monotonic() > deadline:
            break
        time.sleep(0.2)  # the next heartbeat of the in-process worker
    assert st == 200 and f"cannot hold {ns}: {code}" in h["detail"]
    st, status = call(base, "GET", f"/v1/ns/{ns}/status", token=OPS)
    assert st == 200
    [w] = status["workers"]
    assert [(f["ns"], f["code"]) for f in w["memory"]["failures"]] == [(ns, code)]
    import urllib.request

    with urllib.request.urlopen(urllib.request.Request(
                base + "/metrics", headers={"Authorization": f"Bearer {OPS}"}), timeout=30) as resp:
        text = resp.read().decode()
    assert f'hivemind_index_load_failures_total{{code="{code}",ns="{ns}"}}' in text
    assert f'hivemind_worker_namespaces_unavailable{{code="{code}"' in text
