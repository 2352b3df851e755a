"""The Redis read model: fold one batch after the checkpoint and commit it atomically.

Exactly-once effects from at-least-once delivery: the batch, the seen event_ids, the dead
letters and the new checkpoint are written by one Lua script that first checks the checkpoint
and the replay generation are still the ones the batch was read after. Re-running a batch is
a no-op; a crash at any point either committed everything or nothing.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

import msgspec

from hivemind_memory.events.codec import decode_event
from hivemind_memory.events.positions import ZERO, Position, format_pos, parse_pos
from hivemind_memory.events.schema import Event
from hivemind_memory.projections.reduce import BatchResult, Undecodable, fold_batch
from hivemind_memory.projections.state import NoteState, pack_note, unpack_note
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.connection import BLOCK_SLICE_S
from hivemind_memory.projections.store.log import FIELD, read_after
from hivemind_memory.projections.store.scripts import script

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


def checkpoint(r: Any, ns: str) -> Position:
    """The namespace's last applied stream position ((0, 0) if none)."""
    return parse_pos(r.get(keys.checkpoint(ns)))


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


def prepare_batch(r: Any, ns: str,
                  batch_size: int = DEFAULT_BATCH) -> Prepared | None:
    """Read the next batch after the checkpoint and fold it (writes nothing). None: caught up."""
    cp_raw, gen_raw = r.mget([keys.checkpoint(ns), keys.generation(ns)])
    cp_str = cp_raw.decode() if cp_raw else ""
    expected = cp_str + "|" + (gen_raw.decode() if gen_raw else "")
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


def commit(r: Any, prep: Prepared, now_ms: int) -> bool:
    """Write a prepared batch atomically if the checkpoint and generation are still the ones it
    was read after; False (nothing written) otherwise."""
    res, ns = prep.result, prep.ns
    argv: list[Any] = [prep.expected, prep.new_checkpoint, now_ms, keys.CHANGES_MAXLEN]
    argv.append(len(res.notes))
    for nid in sorted(res.notes):
        argv += [nid, pack_note(res.notes[nid])]
    argv.append(len(res.seen))
    argv += res.seen
    argv.append(len(res.dead))
    for d in res.dead:
        argv += [d.entry_id, d.reason, d.raw]
    ok = script(r, "commit_batch")(
        keys=[keys.checkpoint(ns), keys.notes(ns), keys.seen(ns), keys.dead(ns),
              keys.changes(ns), keys.generation(ns)],
        args=argv,
    )
    return bool(ok)


def project_batch(r: Any, ns: str,
                  batch_size: int = DEFAULT_BATCH) -> BatchInfo | None:
    """Fold the next batch after the checkpoint and commit it. None when caught up."""
    t0 = time.perf_counter()
    prep = prepare_batch(r, ns, batch_size)
    if prep is None:
        return None
    ok = commit(r, prep, int(time.time() * 1000))
    res = prep.result
    return BatchInfo(ns=ns, count=prep.count, first=prep.first, last=prep.new_checkpoint,
                     applied=res.applied, dead=len(res.dead), duplicates=res.duplicates,
                     committed=ok, seconds=time.perf_counter() - t0)


def read_notes(r: Any, ns: str) -> dict[str, NoteState]:
    """Every projected note of the namespace (forgotten ones included)."""
    raw = r.hgetall(keys.notes(ns))
    return {k.decode(): unpack_note(v) for k, v in raw.items()}


def read_dead(r: Any, ns: str, count: int = 1000) -> list[dict[str, str]]:
    """The namespace's first ``count`` dead letters, oldest first (the raw payload left out;
    ``dead_total`` says how many there are)."""
    out = []
    for eid, f in r.xrange(keys.dead(ns), count=count):
        out.append({"id": eid.decode(), "entry": _text(f.get(b"entry", b"")),
                    "reason": _text(f.get(b"reason", b"")),
                    "at_ms": _text(f.get(b"at_ms", b""))})
    return out


def dead_total(r: Any, ns: str) -> int:
    """How many dead letters the namespace has."""
    return int(r.xlen(keys.dead(ns)))


@dataclass(slots=True)
class Lease:
    """A held projection lease (renew it per batch; it expires if the holder dies)."""

    r: Any
    ns: str
    token: str
    lease_ms: int

    def renew(self) -> bool:
        """Extend the lease; False if it was lost (expired and taken)."""
        return bool(script(self.r, "release_lock")(keys=[keys.lock(self.ns)],
                                                   args=[self.token, self.lease_ms]))

    def release(self) -> None:
        """Give the lease back if we still hold it."""
        script(self.r, "release_lock")(keys=[keys.lock(self.ns)], args=[self.token, 0])


def try_lease(r: Any, ns: str, lease_ms: int) -> Lease | None:
    """Take the namespace's projection lease now, or None if another projector holds it."""
    token = uuid.uuid4().hex
    if r.set(keys.lock(ns), token, nx=True, px=lease_ms):
        return Lease(r, ns, token, lease_ms)
    return None


def changes_tail(r: Any, ns: str) -> bytes:
    """Id of the newest entry of the changes stream (b'0-0' if none)."""
    got = r.xrevrange(keys.changes(ns), count=1)
    return bytes(got[0][0]) if got else b"0-0"


def wait_for_change(r: Any, ns: str, after: bytes, timeout_s: float) -> bytes:
    """Block until a batch is committed after changes-entry ``after`` (or the timeout, at most
    ``BLOCK_SLICE_S``: callers loop until their own deadline)."""
    ms = max(1, int(min(timeout_s, BLOCK_SLICE_S) * 1000))
    got = r.xread({keys.changes(ns): after}, count=1, block=ms)
    if got:
        return bytes(got[0][1][-1][0])
    return after


__all__ = [
    "ZERO",
    "BatchInfo",
    "Prepared",
    "checkpoint",
    "commit",
    "dead_total",
    "format_pos",
    "prepare_batch",
    "project_batch",
    "read_dead",
    "read_notes",
    "try_lease",
    "wait_for_change",
]
