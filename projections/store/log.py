"""The event log: append (pipelined), read, tail and the namespace registry."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from hivemind_memory.events.codec import encode_event
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


def append(r: Store, events: Sequence[Event], pipe: Pipe | None = None,
           register: bool = True) -> list[str]:
    """XADD each event to its namespace's stream and register the namespace (unless
    ``register`` is False: the caller registers them, e.g. on another cluster node).

    Uses one pipeline for the whole sequence (pass ``pipe`` to join a caller's pipeline, in
    which case the ids are not returned). Returns the entry ids in order.
    """
    own = pipe is None
    p = r.pipeline(transaction=False) if pipe is None else pipe
    nss: set[str] = set()
    for ev in events:
        p.xadd(keys.stream(ev.ns), {FIELD: encode_event(ev)})
        nss.add(ev.ns)
    if nss and register:
        p.sadd(keys.NAMESPACES, *sorted(nss))
    if not own:
        return []
    res = p.execute()
    return [x.decode() if isinstance(x, bytes) else str(x) for x in res[: len(events)]]


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
