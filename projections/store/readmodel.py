"""The Redis read model: fold one batch after the checkpoint and commit it atomically.

Exactly-once effects from at-least-once delivery: the batch, the seen event_ids, the dead
letters and the new checkpoint are written by one Lua script that first checks the checkpoint
and the replay generation are still the ones the batch was read after. Re-running a batch is
a no-op; a crash at any point either committed everything or nothing.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from hivemind_memory.events.codec import decode_event
from hivemind_memory.events.positions import Position, parse_pos
from hivemind_memory.events.schema import Event
from hivemind_memory.projections.reduce import BatchResult, Undecodable, fold_batch
from hivemind_memory.projections.state import NoteState, pack_note, unpack_note
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.log import FIELD, read_after
from hivemind_memory.projections.store.scripts import script
from hivemind_memory.projections.store.types import Store, as_bytes, stream_entries

DEFAULT_BATCH = 2000
"""Events folded per batch (one XRANGE, one HMGET, one SMISMEMBER, one Lua commit)."""


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """What one committed (or lost) batch did; logged one line per batch."""

    ns: str
    count: int
    first: str
    last: str
    applied: int
    dead: int
    duplicates: int
    committed: bool
    seconds: float


def checkpoint(r: Store, ns: str) -> Position:
    """The namespace's last applied stream position ((0, 0) if none)."""
    raw = r.get(keys.checkpoint(ns))
    return parse_pos(None if raw is None else as_bytes(raw))


def _text(b: bytes) -> str:
    return b.decode("utf-8", "backslashreplace")


def decode_entry(fields: dict[bytes, bytes], ns: str) -> tuple[Event | Undecodable, bytes]:
    """A stream entry of namespace ``ns`` as its event, or why it cannot apply. Never raises:
    whatever a rogue writer put on the stream (no ``d`` field, non-UTF-8 field names, bytes
    that are not msgpack, an invalid event, an ``at`` out of range in UTC, an event of
    another namespace) becomes an ``Undecodable`` with a reason, i.e. a dead letter."""
    raw = fields.get(FIELD)
    if raw is None:
        shown = {_text(k): _text(v) for k, v in fields.items()}
        return Undecodable(msgspec.json.encode(shown),
                           "undecodable: entry has no 'd' field"), b""
    try:
        ev = decode_event(raw)
    except (msgspec.ValidationError, msgspec.DecodeError, ValueError) as exc:
        return Undecodable(raw, f"undecodable: {exc}"), raw
    except Exception as exc:  # anything else these bytes provoke must not stall the namespace
        return Undecodable(raw, f"undecodable: {type(exc).__name__}: {exc}"), raw
    if ev.ns != ns:
        return Undecodable(raw, f"wrong_namespace: an event of namespace {ev.ns!r} on the "
                                f"stream of {ns!r}"), raw
    return ev, raw


@dataclass(frozen=True, slots=True)
class Prepared:
    """A folded batch, not yet committed: what ``commit`` will write, if still current."""

    ns: str
    expected: str
    """``checkpoint|generation`` as read before the batch."""
    new_checkpoint: str
    first: str
    count: int
    result: BatchResult


def prepare_batch(r: Store, ns: str,
                  batch_size: int = DEFAULT_BATCH) -> Prepared | None:
    """Read the next batch after the checkpoint and fold it (writes nothing). None: caught up."""
    cp_raw, gen_raw = r.mget([keys.checkpoint(ns), keys.generation(ns)])
    cp_str = as_bytes(cp_raw).decode() if cp_raw else ""
    expected = cp_str + "|" + (as_bytes(gen_raw).decode() if gen_raw else "")
    entries = read_after(r, ns, parse_pos(cp_str), batch_size)
    if not entries:
        return None
    decoded = []
    note_ids: set[str] = set()
    event_ids: set[str] = set()
    for eid, fields in entries:
        ev, raw = decode_entry(fields, ns)
        decoded.append((eid.decode(), ev, raw))
        if not isinstance(ev, Undecodable):
            note_ids.add(ev.note_id)
            event_ids.add(ev.event_id)
    uniq_notes = sorted(note_ids)
    uniq_events = sorted(event_ids)
    p = r.pipeline(transaction=False)
    if uniq_notes:
        p.hmget(keys.notes(ns), uniq_notes)
    if uniq_events:
        p.smismember(keys.seen(ns), uniq_events)
    got = p.execute()
    blobs = got[0] if uniq_notes else []
    flags = got[-1] if uniq_events else []
    current = {nid: unpack_note(b) for nid, b in zip(uniq_notes, blobs, strict=True) if b}
    seen = {e for e, f in zip(uniq_events, flags, strict=True) if f}
    res = fold_batch(current, seen, decoded)
    return Prepared(ns=ns, expected=expected, new_checkpoint=decoded[-1][0], first=decoded[0][0],
                    count=len(entries), result=res)


def commit(r: Store, prep: Prepared, now_ms: int, token: str | None = None) -> bool:
    """Write a prepared batch atomically if the checkpoint and generation are still the ones it
    was read after, and (given ``token``) the committer still holds the projection lease;
    False (nothing written) otherwise."""
    res, ns = prep.result, prep.ns
    argv: list[Any] = [prep.expected, prep.new_checkpoint, now_ms, keys.CHANGES_MAXLEN,
                       token or ""]
    argv.append(len(res.notes))
    for nid in sorted(res.notes):
        argv += [nid, pack_note(res.notes[nid])]
    argv.append(len(res.seen))
    argv += res.seen
    argv.append(len(res.dead))
    for d in res.dead:
        argv += [d.entry_id, d.reason, d.raw]
    argv.append(prep.count)
    ok = script(r, "commit_batch")(
        keys=[keys.checkpoint(ns), keys.notes(ns), keys.seen(ns), keys.dead(ns),
              keys.changes(ns), keys.generation(ns), keys.projected(ns), keys.lock(ns)],
        args=argv,
    )
    return bool(ok)


def project_batch(r: Store, ns: str, batch_size: int = DEFAULT_BATCH,
                  token: str | None = None) -> BatchInfo | None:
    """Fold the next batch after the checkpoint and commit it (fenced by the lease ``token``
    when given). None when caught up."""
    t0 = time.perf_counter()
    prep = prepare_batch(r, ns, batch_size)
    if prep is None:
        return None
    ok = commit(r, prep, int(time.time() * 1000), token)
    res = prep.result
    return BatchInfo(ns=ns, count=prep.count, first=prep.first, last=prep.new_checkpoint,
                     applied=res.applied, dead=len(res.dead), duplicates=res.duplicates,
                     committed=ok, seconds=time.perf_counter() - t0)


def lagging(r: Store, nss: Sequence[str], chunk: int = 500) -> list[str]:
    """Those of ``nss`` whose stream has entries past their checkpoint.

    Cross-namespace, so cluster-safe: single-key reads in non-transactional pipelines of
    ``chunk`` namespaces (a cluster client splits each by node), never a multi-key call.
    """
    late: list[str] = []
    for i in range(0, len(nss), chunk):
        part = nss[i:i + chunk]
        p = r.pipeline(transaction=False)
        for ns in part:
            p.xrevrange(keys.stream(ns), count=1)
            p.get(keys.checkpoint(ns))
        got = p.execute()
        for j, ns in enumerate(part):
            last = stream_entries(got[2 * j])
            cp = got[2 * j + 1]
            if last and parse_pos(last[0].id) > parse_pos(None if cp is None else as_bytes(cp)):
                late.append(ns)
    return late


def read_notes(r: Store, ns: str) -> dict[str, NoteState]:
    """Every projected note of the namespace (forgotten ones included)."""
    raw = r.hgetall(keys.notes(ns))
    return {as_bytes(k).decode(): unpack_note(as_bytes(v)) for k, v in raw.items()}


class DeadLetterRow(msgspec.Struct, frozen=True):
    """One dead letter as listed: its id in the dead-letter stream, the event's stream entry
    id, the reason and when it was recorded (ms; the raw payload left out)."""

    id: str
    entry: str
    reason: str
    at_ms: str


def read_dead(r: Store, ns: str, count: int = 1000) -> list[DeadLetterRow]:
    """The namespace's first ``count`` dead letters, oldest first (``dead_total`` says how many
    there are)."""
    return [DeadLetterRow(_text(e.id), _text(e.fields.get(b"entry", b"")),
                          _text(e.fields.get(b"reason", b"")), _text(e.fields.get(b"at_ms", b"")))
            for e in stream_entries(r.xrange(keys.dead(ns), count=count))]


def dead_total(r: Store, ns: str) -> int:
    """How many dead letters the namespace has."""
    return int(r.xlen(keys.dead(ns)))


__all__ = ["BatchInfo", "DeadLetterRow", "Prepared", "checkpoint", "commit", "dead_total",
           "lagging", "prepare_batch", "project_batch", "read_dead", "read_notes"]
