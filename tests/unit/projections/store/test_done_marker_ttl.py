"""A result's done marker, put back by each waiter (``results.wait_results``), keeps expiring:
BLPOP takes its only element, so Redis deletes the list and its TTL, and the LPUSH that wakes
the other waiters makes a new one."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.projections.store import keys, results
from tests.support.beats import silent_worker

QID = "t.000000000000000000000001"


def _publish(store: Any, qids: list[str], ttl: int) -> None:
    results.write_results(
        store, "t", {q: msgspec.json.encode({"query_id": q, "notes": []}) for q in qids}, ttl)


def test_a_waited_for_marker_still_expires(store: Any) -> None:
    _publish(store, [QID], 60)
    done, body = results.wait_result(store, "t", QID, 1.0)
    assert done and body is not None
    assert store.lrange(keys.done("t", QID), 0, -1) == [b"1"]  # there for the next waiter
    assert 0 < store.ttl(keys.done("t", QID)) <= keys.RESULT_TTL_SECONDS


def test_the_clients_waits_leave_no_marker_without_a_ttl(
        store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both paths that wait (one result, a batch's runs) put the marker back with the
    client's result TTL."""
    c = Client(store, settings=Settings(redis_url="redis://unused", result_ttl_seconds=90))
    qids = [f"t.{i:024x}" for i in range(1, 5)]
    _publish(store, qids, 90)
    first_reads: list[str] = []
    many = results.read_results

    def missing_once(r: Any, ns: str, ids: Any) -> list[bytes | None]:
        if ids[0] not in first_reads:  # the first read finds nothing yet: the reader waits
            first_reads.append(ids[0])
            return [None] * len(ids)
        return many(r, ns, ids)

    def missing_once_one(r: Any, ns: str, qid: str) -> bytes | None:
        return missing_once(r, ns, [qid])[0]

    monkeypatch.setattr(results, "read_results", missing_once)
    monkeypatch.setattr(results, "read_result", missing_once_one)
    with silent_worker(store):  # the shard is served: the reader waits
        assert list(c.batch_results(qids[:3], timeout=5)) == many(store, "t", qids[:3])
        assert c.result_json(qids[3], timeout=5) == many(store, "t", [qids[3]])[0]
    assert first_reads == [qids[0], qids[3]]
    for q in (qids[0], qids[3]):
        assert 0 < store.ttl(keys.done("t", q)) <= 90, q
