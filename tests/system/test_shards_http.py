"""A shard with no live worker through the doors users take: ``/readyz`` names it, its queries
get 503 ``shard_unavailable`` with ``Retry-After`` at once (query, recall, a queued query's
result, a batch's objects), the SDK raises ``QueryError`` with that code, and a served shard's
queries are not touched by it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from hivemind_memory.api_stub.client import SHARD_RETRY_AFTER_S
from hivemind_memory.api_stub.protocol import jobs
from hivemind_memory.api_stub.sdk import Memory
from hivemind_memory.events.errors import QueryError
from hivemind_memory.worker.ops.heartbeat import Heartbeat
from tests.support import RedisProc
from tests.support.beats import ns_in
from tests.support.frontdoor import OPS, Live, call, created, start_live

pytestmark = pytest.mark.redis_server

DOWN = ns_in(1, 2)
UP = ns_in(0, 2)


@pytest.fixture
def half_served(redis_server: RedisProc) -> Iterator[Live]:
    """``serve`` with HIVEMIND_SHARDS=2 on a real Redis where a worker serves shard 0 only."""
    r = redis_server.client()
    r.flushall()
    hb = Heartbeat(r, "w0", "worker", [jobs.query_queue_name(0, 2), jobs.PROJECT_QUEUE],
                   shards=(0,), shard_count=2).start()
    srv = start_live(redis_server.url, env={"HIVEMIND_SHARDS": "2"})
    try:
        yield srv
    finally:
        srv.stop()
        hb.stop()
        r.flushall()


def _raw(base: str, method: str, path: str, body: Any = None) -> tuple[int, dict[str, str], Any]:
    req = urllib.request.Request(base + path, method=method,
                                 data=None if body is None else json.dumps(body).encode())
    req.add_header("Content-Type", "application/json")
    req.add_header("Authorization", f"Bearer {OPS}")
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            status, hdrs, raw = resp.status, resp.headers.items(), resp.read()
    except urllib.error.HTTPError as exc:
        status, hdrs, raw = exc.code, exc.headers.items(), exc.read()
    return status, {k.lower(): v for k, v in hdrs}, json.loads(raw)


def test_a_shard_without_a_worker_is_503_with_retry_after_through_http_and_the_sdk(
        half_served: Live) -> None:
    base = half_served.base
    st, health = call(base, "GET", "/readyz")
    assert st == 503 and "shard(s) 1 of 2 have no live worker" in health["detail"]
    for ns in (DOWN, UP):
        assert call(base, "POST", f"/v1/ns/{ns}/events", [created("e1", "n1", "redis aof")],
                    token=OPS)[0] == 200

    st, hdrs, body = _raw(base, "POST", f"/v1/ns/{DOWN}/query", {"text": "redis", "budget": 50})
    assert st == 503 and body["error"]["code"] == "shard_unavailable", body
    assert hdrs.get("retry-after") == str(SHARD_RETRY_AFTER_S)
    assert f"shard 1 of 2 (namespace {DOWN!r}" in body["error"]["message"]
    st, hdrs, body = _raw(base, "POST", f"/v1/ns/{DOWN}/recall", {"query": "redis", "budget": 50})
    assert (st, body["error"]["code"]) == (503, "shard_unavailable")
    assert hdrs.get("retry-after") == str(SHARD_RETRY_AFTER_S)
    # a batch keeps its 200 (streamed): each query's object says it
    st, _, arr = _raw(base, "POST", f"/v1/ns/{DOWN}/queries",
                      [{"text": "redis", "budget": 50}, {"text": "aof", "budget": 50}])
    assert st == 200 and [o["error"]["code"] for o in arr] == ["shard_unavailable"] * 2
    # a queued query's result: not "not found yet" but the reason nothing will come for now
    qid = arr[0]["query_id"]
    st, hdrs, body = _raw(base, "GET", f"/v1/ns/{DOWN}/results/{qid}")
    assert (st, body["error"]["code"]) == (503, "shard_unavailable")
    assert hdrs.get("retry-after") == str(SHARD_RETRY_AFTER_S)
    # the SDK over HTTP raises what it raises over a store: QueryError with the code
    with pytest.raises(QueryError) as err:
        Memory(base, ns=DOWN, token=OPS).recall("redis", 50)
    assert err.value.code == "shard_unavailable"
    # the served shard: queued for its worker (this one answers nothing), so a result that
    # is not there yet is 404 as before, never 503
    ids = half_served.served.client.submit_batch([{"ns": UP, "text": "redis",
                                                       "budget": 9}])
    st, _, body = _raw(base, "GET", f"/v1/ns/{UP}/results/{ids[0]}")
    assert (st, body["error"]["code"]) == (404, "not_found")
