"""The event log: append (pipelined), read, tail and the namespace registry."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import redis

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


def _server_words(exc: Exception) -> str:
    text = str(exc)
    _, sep, tail = text.partition(" caused error: ")
    return tail if sep else text


def tail(r: Store, ns: str) -> Position:
    """Position of the newest entry of the namespace's stream ((0, 0) if none)."""
    got = stream_entries(r.xrevrange(keys.stream(ns), count=1))
    return parse_pos(got[0].id) if got else ZERO


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
