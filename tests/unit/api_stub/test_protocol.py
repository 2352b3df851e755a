"""The wire protocol's small rules: telling an error object from a result by its first bytes
(so ``hivemind batch`` prints the worker's bytes without decoding them), and how a batch is
cut into jobs (``query_chunks``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol.jobs import JOBS_PER_WORKER, MIN_QUERY_CHUNK, query_chunks
from hivemind_memory.api_stub.protocol.messages import (
    QueryResult,
    encode,
    error_json,
    is_error_json,
)
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.worker.rqworker import HivemindWorker


def test_an_error_object_is_told_from_a_result_by_its_first_bytes() -> None:
    qid = "team-a.0123456789abcdef01234567"
    err = error_json(qid, "invalid_request", 'line 3: "error":{ is not a query')
    ok = encode(QueryResult(query_id=qid, ns="team-a", agent="a", text='"error":{"code":1}',
                            as_of=datetime(2026, 1, 1, tzinfo=UTC), budget=10, used=0,
                            method="exact", notes=[]))
    assert is_error_json(err, qid)
    assert not is_error_json(ok, qid)
    assert not is_error_json(err, qid + "x")  # another query's error is not this one's
    assert b'\\"error\\":{' in ok  # a result may hold the words, escaped inside a string


@pytest.mark.parametrize("n", [0, 1, 9, 10, 11, 99, 100, 101, 250, 1000, 1234])
@pytest.mark.parametrize("workers", [1, 2, 3, 8])
def test_a_batch_is_cut_into_jobs_that_shrink_as_it_runs_out(n: int, workers: int) -> None:
    sizes = query_chunks(n, 100, workers)
    assert sum(sizes) == n and all(1 <= s <= 100 for s in sizes)
    if workers == 1:
        assert sizes == [100] * (n // 100) + ([n % 100] if n % 100 else [])
        return
    head = sizes[:-1]  # the last job may take a remainder under MIN_QUERY_CHUNK with it
    assert head == sorted(head, reverse=True)
    assert all(s >= MIN_QUERY_CHUNK for s in head)
    if len(sizes) > 1:
        assert sizes[0] == min(100, max(MIN_QUERY_CHUNK, -(-n // (JOBS_PER_WORKER * workers))))
    if n >= 400:  # several workers get small jobs at the end, so they finish together
        assert sizes[-1] < 2 * MIN_QUERY_CHUNK
        assert len(sizes) > -(-n // 100)


def test_query_chunks_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="limit=0"):
        query_chunks(10, 0, 2)


def test_a_batch_shared_by_two_workers_is_queued_as_shrinking_jobs(store: Any) -> None:
    c = Client(store, settings=Settings(query_chunk=100))
    reqs = [{"ns": "team-a", "text": f"word{i}", "budget": 100} for i in range(300)]
    c.submit_batch(reqs)
    one = [len(j.args[0]) for j in c._qq.get_jobs()]
    assert one == [100, 100, 100]
    c._qq.empty()
    for name in ("w1", "w2"):  # two workers listening on the query queue
        HivemindWorker([c._qq], store, name=name).register_birth()
    ids = c.submit_batch(reqs)
    two = [len(j.args[0]) for j in c._qq.get_jobs()]
    assert sum(two) == 300 and len(two) > 3 and two[-1] < two[0]
    got = [e["query_id"] for j in c._qq.get_jobs() for e in j.args[0]]
    assert got == ids  # the jobs hold the batch in input order
