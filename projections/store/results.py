"""Publishing a query's answer: the result key, the done list its waiters block on, and the
audit stream. All keys of one namespace (one hash slot), so one MULTI can carry them."""

from __future__ import annotations

from collections.abc import Sequence

from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.connection import BLOCK_SLICE_S
from hivemind_memory.projections.store.types import Pipe, Store, as_bytes

INVALID_NS = "_invalid"
"""Pseudo-namespace of the result keys of requests whose namespace itself is invalid."""
AUDIT_FIELD = b"d"
"""The single field of an audit stream entry: the JSON-encoded ``query.served`` event."""


def stage_result(p: Pipe, ns: str, query_id: str, body: bytes, ttl: int) -> None:
    """Queue on ``p`` the writes that publish a result: the result key and the done list its
    waiters BLPOP on, both with ``ttl``."""
    p.set(keys.result(ns, query_id), body, ex=ttl)
    p.delete(keys.done(ns, query_id))
    p.rpush(keys.done(ns, query_id), b"1")
    p.expire(keys.done(ns, query_id), ttl)


def stage_audit(p: Pipe, ns: str, event: bytes) -> None:
    """Queue on ``p`` the append of one audit event (JSON) to the namespace's audit stream."""
    p.xadd(keys.audit(ns), {AUDIT_FIELD: event})


def read_result(r: Store, ns: str, query_id: str) -> bytes | None:
    """A result's JSON bytes, or None while it does not exist (or after it expired)."""
    body = r.get(keys.result(ns, query_id))
    return None if body is None else bytes(body)  # type: ignore[arg-type]


def read_results(r: Store, ns: str, query_ids: Sequence[str]) -> list[bytes | None]:
    """``read_result`` of several queries of one namespace in one round trip (one slot)."""
    if not query_ids:
        return []
    got = r.mget([keys.result(ns, q) for q in query_ids])
    return [None if b is None else as_bytes(b) for b in got]


def result_exists(r: Store, ns: str, query_id: str) -> bool:
    """Whether the result key exists (an identical as-of query need not run again)."""
    return bool(r.exists(keys.result(ns, query_id)))


def wait_done(r: Store, ns: str, query_id: str, timeout_s: float) -> bool:
    """Block up to ``timeout_s`` (at most ``BLOCK_SLICE_S``, whatever the socket timeout) on
    the query's done list; True when it was pushed. Leaves the marker in place for other
    waiters. Callers loop until their own deadline."""
    return wait_result(r, ns, query_id, timeout_s)[0]


def wait_result(r: Store, ns: str, query_id: str,
                timeout_s: float) -> tuple[bool, bytes | None]:
    """``wait_done``, and once done the result, read in the same round trip that puts the
    marker back: (done, the result's bytes or None if it expired meanwhile)."""
    popped = r.blpop([keys.done(ns, query_id)], timeout=min(max(timeout_s, 0.01), BLOCK_SLICE_S))
    if popped is None:
        return False, None
    p = r.pipeline(transaction=False)
    p.lpush(keys.done(ns, query_id), b"1")  # wake other waiters too
    p.get(keys.result(ns, query_id))
    _, body = p.execute()
    return True, None if body is None else as_bytes(body)
