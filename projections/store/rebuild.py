"""Rebuild a namespace from its log: in memory (replay, --as-of, verification) and, for
``replay``, written back over the live read model atomically."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import redis
from hiredis import pack_command as _pack

from hivemind_memory.events.errors import StoreError
from hivemind_memory.events.positions import ZERO, Position, format_pos, parse_pos
from hivemind_memory.events.schema import Event
from hivemind_memory.projections.ranking.dupsketch import DupSpec
from hivemind_memory.projections.reduce import Projection, Undecodable
from hivemind_memory.projections.state import NoteState, pack_note, unpack_note
from hivemind_memory.projections.store import dupindex, eventdigest, keys
from hivemind_memory.projections.store.readmodel import (
    DEFAULT_SPEC,
    decode_entries,
    no_cycle_collection,
)
from hivemind_memory.projections.store.types import Store, as_bytes, give_back


@dataclass
class Rebuilt:
    """A namespace folded in memory, and the last stream position it saw."""

    projection: Projection
    position: Position
    events: int
    duplicates: int


def fold_log(r: Store, ns: str, *, until: Position | None = None,
             as_of: datetime | None = None, chunk: int = 5000,
             on_chunk: Callable[[], None] | None = None,
             file_digests: bool = False) -> Rebuilt:
    """Fold the namespace's log up to ``until`` (inclusive), keeping only events whose ``at``
    is <= ``as_of`` when given. Pure fold, memory bounded by the state, not the log.
    ``on_chunk`` runs after each chunk (``replay`` renews its lease there).
    ``file_digests`` (not with ``as_of``): also file the keyed digest of each event id's
    first event that has none in ``event_digests`` (``file_missing_digests``)."""
    with no_cycle_collection():
        chunks = (decode_entries(reply, ns) for reply in _xrange_chunks(r, ns, until, chunk))
        if as_of is not None:
            return fold_entries((e for decoded in chunks for e in decoded), as_of=as_of,
                                chunk=chunk, on_chunk=on_chunk)
        proj = Projection()  # every entry applies: whole chunks, no filter
        events = dups = 0
        last = ""
        key = eventdigest.store_key(r) if file_digests else b""
        for decoded in chunks:
            if file_digests:
                file_missing_digests(r, ns, key, decoded, proj.seen)
            dups += proj.absorb(decoded)
            events += len(decoded)
            last = decoded[-1][0]
            if len(decoded) == chunk and on_chunk is not None:
                on_chunk()
        return Rebuilt(projection=proj, position=parse_pos(last) if last else ZERO,
                       events=events, duplicates=dups)


def file_missing_digests(r: Store, ns: str, key: bytes,
                         decoded: list[tuple[str, Event | Undecodable, bytes]],
                         seen: set[str]) -> int:
    """File the keyed digest (``eventdigest``) of each event of ``decoded`` that is the first
    of its id in the log (not in ``seen``, the ids folded before it) and has none yet: events
    projected before the digests were kept, so that an old event resent with other content
    is a conflict, not a retry. HSETNX: a digest already filed (by the projector, or the
    ``erased`` mark of an erasure) is kept. Returns how many were filed."""
    first: dict[str, Event] = {}
    for _eid, ev, _raw in decoded:
        if not isinstance(ev, Undecodable) and ev.event_id not in seen:
            first.setdefault(ev.event_id, ev)
    if not first:
        return 0
    ids = list(first)
    have = r.hmget(keys.event_digests(ns), ids)
    missing = [i for i, d in zip(ids, have, strict=True) if d is None]
    if not missing:
        return 0
    p = r.pipeline(transaction=False)
    for i in missing:
        p.hsetnx(keys.event_digests(ns), i, eventdigest.digest(key, first[i]))
    return sum(1 for x in p.execute() if x)


def _xrange_chunks(r: Store, ns: str, until: Position | None, chunk: int) -> Iterator[Any]:
    """The log (up to ``until``) as XRANGE replies of ``chunk`` entries. On one plain Redis
    the next XRANGE is written as soon as a reply is in, so Redis reads it while the caller
    decodes and folds this one (the replies are raw: each entry ``[id, [field, value]]``)."""
    key = keys.stream(ns)
    end = format_pos(until) if until is not None else "+"
    if not isinstance(r, redis.Redis):
        after = b""
        while reply := r.xrange(key, min=b"(" + after if after else "-", max=end,
                                count=chunk):
            yield reply
            after = as_bytes(reply[-1][0])
        return
    pool = r.connection_pool
    conn: Any = pool.get_connection()
    broken = True
    try:
        conn.send_command("XRANGE", key, "-", end, "COUNT", chunk)
        while reply := conn.read_response():
            conn.send_command("XRANGE", key, b"(" + as_bytes(reply[-1][0]), end, "COUNT",
                              chunk)
            yield reply
        broken = False
    finally:  # broken: the caller stopped early, a reply is left unread
        give_back(pool, conn, broken=broken)


def fold_entries(entries: Iterable[tuple[str, Event | Undecodable, bytes]], *,
                 as_of: datetime | None = None, chunk: int = 5000,
                 on_chunk: Callable[[], None] | None = None) -> Rebuilt:
    """Fold decoded log entries ``(entry_id, event, raw)`` in order (see ``fold_log``)."""
    proj = Projection()
    last = ""
    events = dups = 0
    batch: list[tuple[str, Event | Undecodable, bytes]] = []

    def flush() -> None:
        nonlocal dups
        if batch:
            dups += proj.feed(batch).duplicates
            batch.clear()

    for eid, ev, raw in entries:
        last = eid
        events += 1
        if as_of is not None and not isinstance(ev, Undecodable) and ev.at > as_of:
            # Not visible at as_of, but its event_id is taken: a later duplicate of it (even
            # one dated earlier) is never applied, as in the live projection.
            flush()
            proj.seen.add(ev.event_id)
            continue
        batch.append((eid, ev, raw))
        if len(batch) >= chunk:
            flush()
            if on_chunk is not None:
                on_chunk()
    flush()
    return Rebuilt(projection=proj, position=parse_pos(last) if last else ZERO, events=events,
                   duplicates=dups)


def live_snapshot(r: Store, ns: str) -> tuple[Position, dict[str, NoteState]]:
    """The live checkpoint and notes, read in one MULTI so they belong together."""
    p = r.pipeline(transaction=True)
    p.get(keys.checkpoint(ns))
    p.hgetall(keys.notes(ns))
    cp, raw = p.execute()
    return parse_pos(cp), {k.decode(): unpack_note(v) for k, v in raw.items()}


def diff_notes(live: dict[str, NoteState], rebuilt: dict[str, NoteState]) -> list[str]:
    """Human-readable differences between two note maps (empty when equal)."""
    out = []
    for nid in sorted(set(live) | set(rebuilt)):
        a, b = live.get(nid), rebuilt.get(nid)
        if a == b:
            continue
        if a is None or b is None:
            out.append(f"{nid}: {'only in the rebuilt state' if a is None else 'only live'} "
                       "(a projection key was changed, or the log was)")
            continue
        fields = [f"{f} live={getattr(a, f)!r} rebuilt={getattr(b, f)!r}"
                  for f in NoteState.__struct_fields__ if getattr(a, f) != getattr(b, f)]
        out.append(f"{nid}: " + "; ".join(fields))
    return out


SEEN_PER_SADD = 10_000
"""Event ids per SADD of a write-back (bounded commands, few of them)."""


class LeaseLost(StoreError):
    """The projection lease was lost (expired and taken) while rebuilding."""


def write_back(r: Store, ns: str, rebuilt: Rebuilt, token: str | None = None,
               now_ms: int = 0, spec: DupSpec = DEFAULT_SPEC) -> bool:
    """Replace the live read model with ``rebuilt`` in one MULTI/EXEC.

    Guarded with WATCH: only while ``token`` still holds the projection lease (when given),
    and never moving the checkpoint backwards: if the live checkpoint is already past the
    rebuilt position, nothing is written and False is returned (fold further and retry).
    The generation is bumped, so any batch folded before this write can no longer commit, and
    the changes stream gets a ``reset`` entry so in-memory indexes reload in full. The
    near-duplicate lookup is made again from the rebuilt notes (with ``spec``).
    Dead letters are kept: those the live projector recorded (entries up to its checkpoint)
    stay, and those the rebuild found past that checkpoint are added (``at_ms`` = ``now_ms``),
    so each dead entry of the log is recorded exactly once whoever folded it.
    """
    with no_cycle_collection():
        if isinstance(r, redis.Redis):
            return _write_back_packed(r, ns, rebuilt, token, now_ms, spec)
        with r.pipeline(transaction=True) as p:  # type: ignore[no-untyped-call]  # a cluster
            try:
                p.watch(keys.lock(ns), keys.checkpoint(ns))
                holder = p.get(keys.lock(ns))
                live_cp = _may_write(ns, rebuilt, token, holder, p.get(keys.checkpoint(ns)))
                if live_cp is None:
                    return False
                p.multi()
                for cmd in _write_commands(ns, rebuilt, live_cp, now_ms, spec):
                    p.execute_command(*cmd)
                p.execute()
                return True
            except redis.WatchError:
                return False


def _may_write(ns: str, rebuilt: Rebuilt, token: str | None, holder: Any,
               cp: Any) -> Position | None:
    """The live checkpoint, if the write-back may go ahead (None: the live checkpoint is past
    the rebuilt position); ``LeaseLost`` if ``token`` no longer holds the lease."""
    if token is not None and (as_bytes(holder).decode() if holder else "") != token:
        raise LeaseLost(f"namespace {ns!r}: projection lease lost during replay")
    live_cp = parse_pos(as_bytes(cp) if cp else None)
    return None if live_cp > rebuilt.position else live_cp


def _write_back_packed(r: redis.Redis, ns: str, rebuilt: Rebuilt, token: str | None,
                       now_ms: int, spec: DupSpec) -> bool:
    """``write_back`` on one plain Redis, its commands packed by hiredis and written straight
    to one connection (redis-py's pipeline spent more time packing a 300,000-id write-back
    than Redis spent applying it)."""
    pool = r.connection_pool
    conn: Any = pool.get_connection()
    clean = False
    try:
        conn.send_command("WATCH", keys.lock(ns), keys.checkpoint(ns))
        conn.read_response()
        conn.send_command("MGET", keys.lock(ns), keys.checkpoint(ns))
        holder, cp = conn.read_response()
        try:
            live_cp = _may_write(ns, rebuilt, token, holder, cp)
        except LeaseLost:
            conn.send_command("UNWATCH")
            conn.read_response()
            clean = True
            raise
        if live_cp is None:
            conn.send_command("UNWATCH")
            conn.read_response()
            clean = True
            return False
        commands = [("MULTI",), *_write_commands(ns, rebuilt, live_cp, now_ms, spec),
                    ("EXEC",)]
        for i in range(0, len(commands), 64):
            conn.send_packed_command([_pack(cmd) for cmd in commands[i:i + 64]])
        first: redis.ResponseError | None = None
        for _ in range(len(commands) - 1):
            try:
                conn.read_response()  # OK, then QUEUED for each command
            except redis.ResponseError as exc:
                first = first or exc
        try:
            done = conn.read_response()
        except redis.ResponseError as exc:  # EXECABORT: a command was refused when queued
            raise (first or exc) from exc
        clean = True
        if first is not None:
            raise first
        return done is not None  # None: a watched key changed, nothing was written
    finally:
        give_back(pool, conn, broken=not clean)


def _write_commands(ns: str, rebuilt: Rebuilt, live_cp: Position,
                    now_ms: int, spec: DupSpec) -> Iterator[tuple[Any, ...]]:
    """The commands of a write-back, in order (run inside MULTI/EXEC)."""
    yield ("INCR", keys.generation(ns))
    yield ("DEL", keys.notes(ns), keys.seen(ns), keys.index_snapshot(ns),
           *keys.old_index_snapshots(ns))
    items = sorted(rebuilt.projection.notes.items())
    for i in range(0, len(items), 1000):
        yield ("HSET", keys.notes(ns), *[x for nid, n in items[i:i + 1000]
                                         for x in (nid, pack_note(n))])
    yield from dupindex.rebuild_commands(ns, rebuilt.projection.notes, spec)
    seen = list(rebuilt.projection.seen)  # a set: the order it is written in changes nothing
    for i in range(0, len(seen), SEEN_PER_SADD):
        yield ("SADD", keys.seen(ns), *seen[i:i + SEEN_PER_SADD])
    if rebuilt.position != ZERO:
        yield ("SET", keys.checkpoint(ns), format_pos(rebuilt.position))
    else:
        yield ("DEL", keys.checkpoint(ns))
    yield ("SET", keys.projected(ns), rebuilt.events)
    yield ("XADD", keys.changes(ns), "MAXLEN", "~", keys.CHANGES_MAXLEN, "*",
           "pos", format_pos(rebuilt.position), "reset", "1", "notes", "")
    for d in rebuilt.projection.dead:
        if parse_pos(d.entry_id) > live_cp:
            yield ("XADD", keys.dead(ns), "*", "entry", d.entry_id, "reason", d.reason,
                   "raw", d.raw, "at_ms", str(now_ms))
