"""The wire protocol's small rules: telling an error object from a result by its first bytes
(so ``hivemind batch`` prints the worker's bytes without decoding them)."""

from __future__ import annotations

from datetime import UTC, datetime

from hivemind_memory.api_stub.protocol.messages import (
    QueryResult,
    encode,
    error_json,
    is_error_json,
)


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
