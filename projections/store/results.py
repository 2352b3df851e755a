"""Publishing a query's answer: the result key, the done list its waiters block on, and the
audit stream. All keys of one namespace (one hash slot), so one MULTI can carry them."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import redis.cluster
from hiredis import pack_command as _pack

from hivemind_memory.events.errors import StoreError
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.connection import BLOCK_SLICE_S
from hivemind_memory.projections.store.types import Pipe, Store, as_bytes, give_back

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


def write_results(r: Store, ns: str, bodies: Mapping[str, bytes], ttl: int) -> None:
    """Publish results of ``ns`` by query id (``stage_result`` each, in one MULTI)."""
    p = r.pipeline(transaction=True)
    for query_id, body in bodies.items():
        stage_result(p, ns, query_id, body, ttl)
    p.execute()


def stage_audit(p: Pipe, ns: str, event: bytes, min_id: str | None = None) -> None:
    """Queue on ``p`` the append of one audit event (JSON) to the namespace's audit stream;
    with ``min_id`` (``Settings.audit_min_id``) the same XADD drops, exactly (``MINID =``),
    every entry older than it. Exact rather than ``~``: Redis' approximate trim only frees
    whole macro-nodes (``stream-node-max-entries``, 100 by default), so entries past the
    retention would stay visible to ``audit list``/``reproduce``; appended at every query, the
    exact trim removes only what aged out since the previous append (usually nothing)."""
    if min_id is None:
        p.xadd(keys.audit(ns), {AUDIT_FIELD: event})
    else:
        p.xadd(keys.audit(ns), {AUDIT_FIELD: event}, minid=min_id, approximate=False)


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


def wait_done(r: Store, ns: str, query_id: str, timeout_s: float,
              ttl_s: int = keys.RESULT_TTL_SECONDS) -> bool:
    """Block up to ``timeout_s`` (at most ``BLOCK_SLICE_S``, whatever the socket timeout) on
    the query's done list; True when it was pushed. Leaves the marker in place for other
    waiters, expiring ``ttl_s`` from now (the results' TTL). Callers loop until their own
    deadline."""
    return wait_result(r, ns, query_id, timeout_s, ttl_s)[0]


def wait_result(r: Store, ns: str, query_id: str, timeout_s: float,
                ttl_s: int = keys.RESULT_TTL_SECONDS) -> tuple[bool, bytes | None]:
    """``wait_done``, and once done the result, read in the same round trip that puts the
    marker back: (done, the result's bytes or None if it expired meanwhile)."""
    done, [body] = wait_results(r, ns, [query_id], timeout_s, ttl_s)
    return done, body


def wait_results(r: Store, ns: str, query_ids: Sequence[str], timeout_s: float,
                 ttl_s: int = keys.RESULT_TTL_SECONDS) -> tuple[bool, list[bytes | None]]:
    """``wait_done`` on the first of ``query_ids`` (all of ``ns``), and once done the
    results of all of them (``read_results``), read in the same round trip that puts the
    first's marker back: (done, each result's bytes or None: not there yet, or expired).
    A batch's reader waits for its next missing answer and reads the ones after it, which
    the same worker wave usually published, without a round trip of their own.
    BLPOP took the marker's only element, so Redis deleted the list with its TTL: the
    marker put back expires ``ttl_s`` from now (without it, every waited-for query left a
    key that never expired, and a waiter of a result expired since found the marker done
    at once, round trip after round trip, until its deadline)."""
    first = keys.done(ns, query_ids[0])
    popped = r.blpop([first], timeout=min(max(timeout_s, 0.01), BLOCK_SLICE_S))
    if popped is None:
        return False, [None] * len(query_ids)
    p = r.pipeline(transaction=False)
    p.lpush(first, b"1")  # wake other waiters too
    p.expire(first, ttl_s)
    for q in query_ids:  # GETs, not MGET: a Redis Cluster pipeline refuses MGET
        p.get(keys.result(ns, q))
    _, _, *got = p.execute()
    return True, [None if b is None else as_bytes(b) for b in got]


class Publisher:
    """Writes MULTI blocks with one in flight: ``send`` takes the reply of the block sent
    before (its callback runs once that block went through), then writes the new one without
    waiting for its reply. A query job ranks its next queries while Redis applies the answers
    of the previous ones, instead of waiting for every write.

    Commands are staged on ``pipeline()`` (a redis-py pipeline used only to record them, so
    the same ``stage_*`` helpers serve both paths) and sent packed by hiredis, as one buffer,
    onto one connection taken from the pool. A failed block raises at the next ``send`` or at
    ``close``, and the connection (its later replies unread) is dropped. On a Redis Cluster
    every block runs at once, as a MULTI of its own slot (nothing overlapped).
    """

    def __init__(self, r: Store) -> None:
        self.r = r
        self._pool = None if isinstance(r, redis.cluster.RedisCluster) else r.connection_pool
        self._conn: Any = None
        self._pending: tuple[int, Callable[[], None],
                             Callable[[list[Any]], None] | None] | None = None
        """The block in flight: how many commands it holds, and its callbacks."""

    def pipeline(self) -> Pipe:
        """A pipeline to stage one block's commands on (all of one namespace: one slot)."""
        return self.r.pipeline(transaction=True)

    def send(self, p: Pipe, on_ok: Callable[[], None] = lambda: None,
             on_replies: Callable[[list[Any]], None] | None = None) -> None:
        """Settle the block in flight, then write ``p``'s commands as one MULTI. Once it
        went through: ``on_replies`` (given) gets its replies, then ``on_ok`` runs."""
        self.settle()
        if self._pool is None or not len(p):
            if len(p):  # a cluster's block runs at once
                got = p.execute()
                if on_replies is not None:
                    on_replies(list(got))
            on_ok()
            return
        cmds = [args for args, _ in p.command_stack]
        if self._conn is None:
            self._conn = self._pool.get_connection()
        try:
            # one buffer, one sendall (a list is written a piece at a time: ~100 syscalls)
            self._conn.send_packed_command(
                [b"".join([_pack(("MULTI",)), *(_pack(c) for c in cmds), _pack(("EXEC",))])])
        except BaseException:
            self._drop()
            raise
        self._pending = (len(cmds), on_ok, on_replies)

    def settle(self) -> None:
        """Take the reply of the block in flight (raise if it failed) and run its callback."""
        if self._pending is None:
            return
        (n, on_ok, on_replies), self._pending = self._pending, None
        try:
            for _ in range(n + 1):  # +OK of MULTI, then QUEUED for each command
                self._conn.read_response()
            replies = self._conn.read_response()  # EXEC
        except BaseException:
            self._drop()
            raise
        if replies is None:
            raise StoreError("a MULTI publishing results was aborted (EXEC returned nil)")
        for got in replies:
            if isinstance(got, Exception):
                raise StoreError(f"a command publishing results failed: {got}")
        if on_replies is not None:
            on_replies(list(replies))
        on_ok()

    def close(self) -> None:
        """Settle the block in flight and give the connection back."""
        try:
            self.settle()
        finally:
            if self._conn is not None:
                conn, self._conn = self._conn, None
                give_back(self._pool, conn, broken=False)

    def _drop(self) -> None:
        self._pending = None
        conn, self._conn = self._conn, None
        if conn is not None:
            give_back(self._pool, conn, broken=True)

    def __enter__(self) -> Publisher:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.close()
        else:
            self._drop()
