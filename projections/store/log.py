"""The event log: append (pipelined), read, tail, heads (tail and length together) and the
namespace registry."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import redis
from hiredis import pack_command as _pack

from hivemind_memory.events.codec import encode_event
from hivemind_memory.events.errors import AppendFailed
from hivemind_memory.events.positions import ZERO, Position, format_pos, parse_pos
from hivemind_memory.events.schema import Event
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.types import (
    Pipe,
    Store,
    StreamEntry,
    as_bytes,
    give_back,
    newest_pos,
    stream_entries,
)

FIELD = b"d"
"""The single field of a stream entry: the msgpack-encoded event."""


def register_namespaces(r: Store, nss: Iterable[str]) -> None:
    """Add namespaces to the registry (before their first append can land, so a sweep always
    finds a namespace that has entries)."""
    names = sorted(set(nss))
    if names:
        r.sadd(keys.NAMESPACES, *names)


def append(r: Store, events: Sequence[Event], pipe: Pipe | None = None) -> list[str]:
    """Register the events' namespaces, then XADD each event to its namespace's stream.

    One pipeline for the XADDs (pass ``pipe`` to join a caller's pipeline: the registration
    is queued first on it and no ids are returned). Returns the entry ids in order. When
    some XADDs fail (maxmemory, a dropped connection), raises ``AppendFailed`` with the exact
    number that reached the log and their ids: re-appending the whole sequence is safe
    (a repeated event_id is applied once).
    """
    return append_encoded(r, [(ev.ns, encode_event(ev)) for ev in events], pipe)


def append_encoded(r: Store, events: Sequence[tuple[str, bytes]],
                   pipe: Pipe | None = None) -> list[str]:
    """``append`` of events already encoded (``(ns, encode_event(ev))`` pairs), with the same
    registration, ids and ``AppendFailed`` rules."""
    nss = sorted({ns for ns, _ in events})
    if pipe is not None:
        if nss:
            pipe.sadd(keys.NAMESPACES, *nss)
        for ns, blob in events:
            pipe.xadd(keys.stream(ns), {FIELD: blob})
        return []
    if not events:
        return []
    register_namespaces(r, nss)
    p = r.pipeline(transaction=False)
    for ns, blob in events:
        p.xadd(keys.stream(ns), {FIELD: blob})
    try:
        res = p.execute(raise_on_error=False)
    except redis.RedisError as exc:  # the connection died: we cannot know which landed
        raise AppendFailed(f"append failed, an unknown number of {len(events)} event(s) may "
                           f"have landed: {type(exc).__name__}: {exc}", 0, []) from exc
    ids = [x.decode() if isinstance(x, bytes) else str(x) for x in res
           if not isinstance(x, Exception)]
    errors = [x for x in res if isinstance(x, Exception)]
    if errors:
        first = errors[0]
        raise AppendFailed(f"{len(ids)} of {len(events)} event(s) appended, then "
                           f"{type(first).__name__}: {_server_words(first)}", len(ids), ids)
    return ids


def _pack_xadd(key: str, blob: bytes) -> bytes:
    cmd: tuple[Any, ...] = ("XADD", key, "*", FIELD, blob)
    packed: bytes = _pack(cmd)
    return packed


class ChunkSender:
    """Appends chunks of encoded events on one connection of a plain Redis, each chunk written
    before the previous one's replies are read, so the caller prepares the next chunk (reads,
    parses, packs it) while Redis appends this one. Same rules as ``append_encoded``:
    namespaces are registered before any of their entries is sent, and a chunk that failed
    part-way raises ``AppendFailed`` with the exact number that landed (nothing of a later
    chunk is sent before this one's replies are read: ``finish`` first).

    ``pack`` (any time), then ``finish`` (the chunk in flight, if any), then ``send``;
    ``close`` at the end (``broken``: replies may be left unread, drop the connection).
    """

    def __init__(self, r: redis.Redis) -> None:
        self.r = r
        self.pool = r.connection_pool
        self.conn: Any = self.pool.get_connection()
        self.registered: set[str] = set()
        self.in_flight = 0
        """Entries sent whose replies are not read yet."""

    def pack(self, events: Sequence[tuple[str, bytes]]) -> list[bytes]:
        """The XADD commands of a chunk, packed (by hiredis itself, in one buffer)."""
        return [b"".join([_pack_xadd(keys.stream(ns), blob) for ns, blob in events])]

    def finish(self) -> int:
        """Read the replies of the chunk in flight; how many entries landed (all of them, or
        ``AppendFailed``)."""
        n, self.in_flight = self.in_flight, 0
        landed: list[str] = []
        first: Exception | None = None
        for _ in range(n):
            try:
                reply = self.conn.read_response()
            except redis.ResponseError as exc:
                first = first or exc
                continue
            except redis.RedisError as exc:  # the connection died: the rest is unknown
                raise AppendFailed(f"append failed after {len(landed)} of {n} event(s), an "
                                   f"unknown number of the others may have landed: "
                                   f"{type(exc).__name__}: {exc}", len(landed),
                                   landed) from exc
            landed.append(reply.decode() if isinstance(reply, bytes) else str(reply))
        if first is not None:
            raise AppendFailed(f"{len(landed)} of {n} event(s) appended, then "
                               f"{type(first).__name__}: {_server_words(first)}",
                               len(landed), landed)
        return n

    def send(self, nss: set[str], packed: list[bytes], count: int) -> None:
        """Register the namespaces not registered yet (one round trip, only then), then write
        a packed chunk of ``count`` entries."""
        assert self.in_flight == 0, "finish the chunk in flight first"
        new = sorted(nss - self.registered)
        if new:
            register_namespaces(self.r, new)
            self.registered.update(new)
        self.in_flight = count
        try:
            self.conn.send_packed_command(packed)
        except redis.RedisError as exc:
            raise AppendFailed(f"append failed, an unknown number of {count} event(s) may "
                               f"have landed: {type(exc).__name__}: {exc}", 0, []) from exc

    def close(self, broken: bool) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            give_back(self.pool, conn, broken=broken)


def _server_words(exc: Exception) -> str:
    text = str(exc)
    _, sep, tail = text.partition(" caused error: ")
    return tail if sep else text


def tail(r: Store, ns: str) -> Position:
    """Position of the newest entry of the namespace's stream ((0, 0) if none)."""
    return newest_pos(r.xrevrange(keys.stream(ns), count=1))


def length(r: Store, ns: str) -> int:
    """How many entries the namespace's stream holds (XLEN)."""
    return int(r.xlen(keys.stream(ns)))


def heads(r: Store, nss: Sequence[str]) -> dict[str, tuple[Position, int]]:
    """Each namespace's newest position and stream length, the two read together (one MULTI
    per namespace, so the length counts exactly the entries up to that position)."""
    out: dict[str, tuple[Position, int]] = {}
    for ns in nss:
        p = r.pipeline(transaction=True)
        p.xrevrange(keys.stream(ns), count=1)
        p.xlen(keys.stream(ns))
        last, n = p.execute()
        out[ns] = (newest_pos(last), int(n))
    return out


def read_after(r: Store, ns: str, after: Position, count: int,
               until: Position | None = None) -> list[StreamEntry]:
    """Up to ``count`` entries strictly after ``after`` (and at most ``until``)."""
    start = "(" + format_pos(after) if after != ZERO else "-"
    end = format_pos(until) if until is not None else "+"
    return stream_entries(r.xrange(keys.stream(ns), min=start, max=end, count=count))


def iter_all(r: Store, ns: str, until: Position | None = None,
             chunk: int = 5000) -> Iterable[StreamEntry]:
    """Every entry of the stream in order, read in chunks (memory bounded by ``chunk``)."""
    pos = ZERO
    while True:
        got = read_after(r, ns, pos, chunk, until)
        if not got:
            return
        yield from got
        pos = parse_pos(got[-1].id)


def namespaces(r: Store) -> list[str]:
    """Every namespace that has had an event appended, sorted.

    Read with SSCAN in slices (never one long SMEMBERS), so a registry of many thousands of
    namespaces neither blocks its Redis nor needs one reply that holds them all. The registry
    is one key (one slot of a cluster); it is only ever touched by single-key commands.
    """
    return sorted({as_bytes(x).decode() for x in r.sscan_iter(keys.NAMESPACES, count=1000)})
