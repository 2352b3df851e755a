"""Shards on the worker side: a worker answers only its shards' queues, announces its
shards, the namespaces it holds and its memory in its heartbeat, and ``status`` shows which
worker holds which shards and which shards have none."""

from __future__ import annotations

import io
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
from structlog.testing import capture_logs

from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol import jobs
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.projections.store import results
from hivemind_memory.worker import runtime
from hivemind_memory.worker.cli.output import print_status
from hivemind_memory.worker.loop import run_worker
from hivemind_memory.worker.ops.heartbeat import Heartbeat, held, read_beats
from hivemind_memory.worker.ops.status import read_status
from tests.support import rq_for
from tests.support.beats import ns_in, silent_worker
from tests.support.factories import created


@pytest.fixture
def two(store: Any) -> Iterator[tuple[Client, runtime.Runtime]]:
    s = Settings(shards=2)
    rt = runtime.build(s, store, rq_for(store))
    runtime.install(rt)
    yield Client(store, rq_for(store), settings=s), rt


def test_a_worker_answers_only_the_queries_of_its_shards(
        two: tuple[Client, runtime.Runtime]) -> None:
    c, rt = two
    a, b = ns_in(0, 2), ns_in(1, 2)
    c.append([created("n1", ns=a, text="alpha redis"), created("n2", ns=b, text="beta redis")])
    qa, qb = c.submit_query(a, "redis", 50), c.submit_query(b, "redis", 50)
    with capture_logs() as logs:
        assert run_worker(rt, burst=True, shards=(1,)) == 0
    [started] = [e for e in logs if e["event"] == "worker_started"]
    assert started["shards"] == [1] and started["shard_count"] == 2
    assert started["queues"] == ["hivemind-query-1-of-2", jobs.PROJECT_QUEUE]
    assert results.read_result(c.store, a, qa) is None  # shard 0: still queued
    assert len(c.shard_queue(0)) == 1
    got = msgspec.json.decode(results.read_result(c.store, b, qb) or b"{}")
    assert [n["note_id"] for n in got["notes"]] == ["n2"]
    # the projection queue is everyone's: shard 1's worker folded shard 0's namespace too
    assert c.wait_projected(a, 0.1)
    assert run_worker(rt, burst=True, shards=(0,)) == 0
    assert [n["note_id"] for n in c.result(qa, timeout=5)["notes"]] == ["n1"]


def test_the_heartbeat_says_which_namespaces_the_worker_holds_and_its_memory(
        two: tuple[Client, runtime.Runtime]) -> None:
    c, rt = two
    a, a2 = ns_in(1, 2), ns_in(1, 2, 1)
    c.append([created("n1", ns=a), created("n2", ns=a2)])
    assert held(rt).namespaces == ()  # nothing answered yet: no index
    c.submit_batch([{"ns": a, "text": "redis", "budget": 9}, {"ns": a2, "text": "x", "budget": 9}])
    assert run_worker(rt, burst=True, shards=(1,)) == 0
    hb = Heartbeat(rt.rq, "w1", "worker", [jobs.query_queue_name(1, 2)], shards=(1,),
                   shard_count=2, describe=lambda: held(rt)).start()
    try:
        [beat] = read_beats(rt.rq)
        assert beat.namespaces == sorted([a, a2]) and beat.namespace_count == 2
        assert beat.shards == [1] and beat.shard_count == 2
        assert beat.rss_bytes > 10 * 2**20  # a Python process with numpy loaded
    finally:
        hb.stop()


def test_status_shows_each_workers_shards_and_the_shards_nobody_serves(store: Any) -> None:
    beats = [Heartbeat(store, "w-a", "worker",
                       [jobs.query_queue_name(k, 4) for k in (0, 1, 2)], shards=(0, 1, 2),
                       shard_count=4).start()]
    try:
        st = read_status(store, store, datetime.now(UTC), shards=4)
        assert st.shard_count == 4 and st.unserved_shards == [3]
        [w] = st.workers
        assert (w.shards, w.shard_count) == ([0, 1, 2], 4)
        out = io.StringIO()
        print_status(st, out)
        text = out.getvalue()
        assert "shards 0-2 of 4" in text
        assert "shards with no live worker: 3 of 4" in text
        beats.append(Heartbeat(store, "w-b", "worker", [jobs.query_queue_name(3, 4)],
                               shards=(3,), shard_count=4).start())
        st = read_status(store, store, datetime.now(UTC), shards=4)
        assert st.unserved_shards == []
        out = io.StringIO()
        print_status(st, out)
        assert "all 4 shards have a live worker" in out.getvalue()
        # the same workers seen by a reader with another shard count serve none of its shards
        assert read_status(store, store, datetime.now(UTC), shards=2).unserved_shards == [0, 1]
    finally:
        for hb in beats:
            hb.stop()


def test_one_shard_is_served_by_any_worker_of_the_old_queue(store: Any) -> None:
    assert read_status(store, store, datetime.now(UTC)).unserved_shards == [0]
    with silent_worker(store):
        assert read_status(store, store, datetime.now(UTC)).unserved_shards == []


def test_the_embedded_store_serves_every_shard_with_its_one_worker() -> None:
    """``memory://`` with HIVEMIND_SHARDS=3: the in-process worker listens on every shard's
    queue, so each namespace is answered (none gets shard_unavailable)."""
    from hivemind_memory.api_stub.sdk import Memory

    s = Settings(redis_url="memory://", shards=3)
    for shard in range(3):
        m = Memory("memory://", ns=ns_in(shard, 3), agent="a", settings=s)
        try:
            m.remember("the deploy key rotates every monday", duplicates="ignore")
            got = m.recall("deploy key", 100)
            assert [n.text for n in got.notes] == ["the deploy key rotates every monday"]
        finally:
            m.close()


def test_a_queued_query_job_expires_with_its_result_ttl(store: Any) -> None:
    # a shard nobody serves must not hold its queries for good: RQ drops a job still queued
    # after HIVEMIND_RESULT_TTL (no one waits for its answer any more)
    c = Client(store, settings=Settings(result_ttl_seconds=120))
    c.append([created("a1", ns="a", text="redis")])
    c.submit_batch([{"ns": "a", "text": "redis", "budget": 50}])
    [job] = c._qq.jobs
    assert job.ttl == 120 and 0 < store.ttl(job.key) <= 120
