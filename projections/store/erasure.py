"""Erasure: remove the content of erased notes from everything hivemind wrote in a namespace.

A ``note.erased`` is folded like any event (``projections.reduce``); this module then
redacts, once the read model has folded it (``redact`` checks that each note is erased):

- the event log: every entry carrying an erased note's content (``CONTENT_EVENTS`` with its
  ``note_id``, dead-lettered duplicates included) is rewritten into its redacted form
  (``events.schema.redacted``: same entry id and fields, ``text`` empty, no embedding,
  ``tokens`` explicit, ``redacted`` the digest of what was removed), so replaying the log
  gives the live state. A Redis stream cannot edit an entry in place: the stream is copied,
  redacted, into ``keys.rewrite`` with the same entry ids, then ``swap_stream.lua`` takes
  along whatever was appended meanwhile and RENAMEs the copy over the stream in one atomic
  step, keeping its last id and counters (concurrent appenders and the projector see the
  same ids before and after; nothing uses consumer groups on these streams, which a RENAME
  would drop);
- the dead letters (``keys.dead``): the same, for dead letters whose payload is such an event;
- result keys (``keys.result``) that show an erased note: replaced by an error object
  (code ``erased``) that keeps their TTL, so a waiting client gets an answer;
- the index snapshot (and drafts): deleted, after the erasure fence (``keys.erasure_fence``)
  was raised past the ``note.erased``, so no worker whose index predates it stores one again
  (``publish_snapshot.lua``);
- a ``memory://PATH`` store's file (``embedded.StreamLog.rewrite``): rewritten, crash-safely
  (new file, fsync, rename), and the backups ``fsck`` kept beside it.

The audit stream holds no note content (note ids, signals, digests) and is left as it is.
Everything here is idempotent: running it again finds nothing left to change, and a crash at
any point leaves the ``note.erased`` in the log for a rerun to complete.
"""

from __future__ import annotations

import contextlib
import secrets
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import msgspec
import redis

from hivemind_memory.events.codec import decode_event, encode_event
from hivemind_memory.events.errors import StoreError
from hivemind_memory.events.positions import format_pos
from hivemind_memory.events.schema import CONTENT_EVENTS, NoteCreated, NoteRevised, redacted
from hivemind_memory.projections.state import unpack_note
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.log import FIELD
from hivemind_memory.projections.store.readmodel import checkpoint
from hivemind_memory.projections.store.scripts import script
from hivemind_memory.projections.store.types import Store, as_bytes, stream_entries

CHUNK = 1000
"""Entries read (and copied) per round trip while rewriting a stream."""
SWAP_ATTEMPTS = 100
"""Swaps tried before giving up while writers keep appending content to redact."""
LEASE_MS = 120_000
"""Lifetime of the erasure lease of a namespace (renewed per chunk while rewriting)."""
LEASE_WAIT_S = 300.0
"""How long ``redact`` waits for another erasure of the namespace to finish."""
DEAD_RAW = b"raw"
"""The dead-letter field that holds the event's payload (``commit_batch.lua``)."""
ERASED_CODE = "erased"
"""Error code of a result that showed a note erased since."""


@dataclass
class Redaction:
    """What ``redact`` did in one namespace."""

    ns: str
    erased: list[str] = field(default_factory=list)
    """The notes whose content is now gone (they are erased in the read model)."""
    not_erased: list[str] = field(default_factory=list)
    """Notes asked for that the read model does not have erased: left untouched."""
    events: int = 0
    """Entries of the event log rewritten."""
    dead: int = 0
    """Dead letters rewritten."""
    results: int = 0
    """Result keys replaced by an ``erased`` error object."""
    snapshots: int = 0
    """Index snapshot keys (and drafts) deleted."""
    log_records: int = 0
    """Records of the ``memory://PATH`` files rewritten."""
    fence: str = ""
    """The erasure fence after this erasure."""


def erasure_counts(red: Redaction) -> dict[str, int]:
    """What a redaction rewrote, by kind (for people and for JSON answers)."""
    return {"log_entries": red.events, "dead_letters": red.dead, "results": red.results,
            "snapshot_keys": red.snapshots, "file_records": red.log_records}


def needles(note_ids: Sequence[str]) -> list[bytes]:
    """The bytes every encoded event about one of ``note_ids`` contains: the msgpack of its
    ``note_id`` field and value, as ``encode_event`` writes them (side by side)."""
    key = msgspec.msgpack.encode("note_id")
    return [key + msgspec.msgpack.encode(n) for n in dict.fromkeys(note_ids)]


DIGEST_KEY_BYTES = 32
"""Length of the store's digest secret (``keys.DIGEST_KEY``)."""


def digest_key(r: Store) -> bytes:
    """The store's secret for ``redacted`` digests, made on first use: an XADD with the
    fixed id ``0-1`` succeeds once, so concurrent first erasures agree on one secret."""
    with contextlib.suppress(redis.ResponseError):  # made before: "ID ... equal or smaller"
        r.xadd(keys.DIGEST_KEY, {"k": secrets.token_bytes(DIGEST_KEY_BYTES)}, id="0-1")
    [entry] = stream_entries(r.xrange(keys.DIGEST_KEY, count=1))
    return entry.fields[b"k"]


def content_change(ns: str, note_ids: Sequence[str], key: bytes
                   ) -> Callable[[bytes], bytes | None]:
    """The redaction of one encoded event: its redacted encoding (digest keyed with ``key``)
    when it is a content event of ``ns`` about one of ``note_ids`` that is not redacted yet,
    else None (unchanged)."""
    wanted = frozenset(note_ids)
    found = needles(note_ids)

    def change(raw: bytes) -> bytes | None:
        if not any(n in raw for n in found):  # cheap: most entries are not about them
            return None
        try:
            ev = decode_event(raw)
        except Exception:  # an entry this version cannot read carries no event to redact
            return None
        if not isinstance(ev, CONTENT_EVENTS) or ev.ns != ns or ev.note_id not in wanted:
            return None
        assert isinstance(ev, NoteCreated | NoteRevised)
        if ev.redacted is not None:
            return None
        return encode_event(redacted(ev, key))

    return change


class _Lease:
    """The namespace's erasure lease (one rewrite at a time), renewed while in use."""

    def __init__(self, r: Store, ns: str) -> None:
        self.r, self.ns, self.token = r, ns, uuid.uuid4().hex

    def take(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        delay = 0.01
        while not self.r.set(keys.erasing(self.ns), self.token, nx=True, px=LEASE_MS):
            if time.monotonic() >= deadline:
                raise StoreError(f"namespace {self.ns!r}: another erasure held the erasure "
                                 f"lease for {timeout_s:g}s; try again")
            time.sleep(delay)  # a lease held by another process: no event wakes us
            delay = min(delay * 2, 0.5)

    def renew(self) -> None:
        if not script(self.r, "renew_lease")(keys=[keys.erasing(self.ns)],
                                             args=[self.token, LEASE_MS]):
            raise StoreError(f"namespace {self.ns!r}: the erasure lease was lost "
                             "(expired mid-rewrite); run the erasure again")

    def release(self) -> None:
        script(self.r, "renew_lease")(keys=[keys.erasing(self.ns)], args=[self.token, 0])


def _changed_fields(fields: dict[bytes, bytes], name: bytes,
                    change: Callable[[bytes], bytes | None]) -> dict[bytes, bytes] | None:
    raw = fields.get(name)
    if raw is None:
        return None
    new = change(raw)
    return None if new is None else {**fields, name: new}


def _copy(r: Store, key: str, tmp: str, after: bytes | None, name: bytes,
          change: Callable[[bytes], bytes | None], lease: _Lease) -> tuple[bytes | None, int]:
    """Copy ``key``'s entries after ``after`` (None: all) into ``tmp`` with their own ids,
    redacted; (id of the last entry copied, entries changed)."""
    last, changed = after, 0
    while True:
        start = "-" if last is None else "(" + last.decode()
        got = stream_entries(r.xrange(key, min=start, max="+", count=CHUNK))
        if not got:
            return last, changed
        p = r.pipeline(transaction=False)
        for e in got:
            new = _changed_fields(e.fields, name, change)
            changed += new is not None
            p.xadd(tmp, new or e.fields, id=e.id)  # type: ignore[arg-type]
        p.execute()
        last = got[-1].id
        lease.renew()


def _needs_change(r: Store, key: str, name: bytes,
                  change: Callable[[bytes], bytes | None]) -> bool:
    """Whether any entry of ``key`` would change (read only: a rerun writes nothing)."""
    start = "-"
    while True:
        got = stream_entries(r.xrange(key, min=start, max="+", count=CHUNK))
        if not got:
            return False
        if any(_changed_fields(e.fields, name, change) is not None for e in got):
            return True
        start = "(" + got[-1].id.decode()


def rewrite_stream(r: Store, ns: str, key: str, name: bytes, note_ids: Sequence[str],
                   lease: _Lease) -> int:
    """Rewrite stream ``key`` of ``ns`` with field ``name`` of each entry redacted (see the
    module docstring); how many entries changed (0: the stream was left as it is)."""
    change = content_change(ns, note_ids, digest_key(r))
    if not _needs_change(r, key, name, change):
        return 0
    tmp = keys.rewrite(ns)
    marks = needles(note_ids)
    for _ in range(SWAP_ATTEMPTS):
        r.delete(tmp)
        last, changed = _copy(r, key, tmp, None, name, change, lease)
        if last is None:
            return 0
        for _ in range(SWAP_ATTEMPTS):
            done, _ = script(r, "swap_stream")(keys=[key, tmp], args=[last, *marks])
            if int(done) == 1:
                return changed
            if int(done) == -1:
                break  # entries were deleted meanwhile: copy afresh
            got, more = _copy(r, key, tmp, last, name, change, lease)
            last, changed = got or last, changed + more
    r.delete(tmp)
    raise StoreError(f"namespace {ns!r}: {key} kept changing under {SWAP_ATTEMPTS} attempts "
                     "to swap in its redacted copy; run the erasure again")


def erased_notes(r: Store, ns: str, note_ids: Sequence[str]) -> tuple[list[str], list[str]]:
    """Those of ``note_ids`` the read model has erased, and the others (in order)."""
    ids = list(dict.fromkeys(note_ids))
    blobs = r.hmget(keys.notes(ns), ids) if ids else []
    yes: list[str] = []
    no: list[str] = []
    for nid, b in zip(ids, blobs, strict=True):
        (yes if b is not None and unpack_note(as_bytes(b)).erased else no).append(nid)
    return yes, no


def _shows(body: bytes, note_ids: frozenset[str]) -> bool:
    """Whether a result's JSON shows (or lists as a candidate) one of ``note_ids``."""
    if not any(n.encode() in body for n in note_ids):
        return False
    try:
        obj = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return True  # unreadable, yet it names the note: treat as showing it
    if not isinstance(obj, dict):
        return True
    rows = [*(obj.get("notes") or []), *(obj.get("candidates") or [])]
    return any(isinstance(x, dict) and x.get("note_id") in note_ids for x in rows)


def redact_results(r: Store, ns: str, note_ids: Sequence[str]) -> int:
    """Replace every result key of ``ns`` that shows one of ``note_ids`` by an error object
    (code ``erased``, TTL kept); how many."""
    wanted = frozenset(note_ids)
    prefix = keys.result(ns, "")
    n = 0
    batch: list[bytes] = []

    def flush() -> int:
        if not batch:
            return 0
        bodies = r.mget(batch)
        done = 0
        p = r.pipeline(transaction=False)
        for k, body in zip(batch, bodies, strict=True):
            if body is None or not _shows(as_bytes(body), wanted):
                continue
            qid = k.decode()[len(prefix):]
            err = msgspec.json.encode({"query_id": qid, "error": {
                "code": ERASED_CODE,
                "message": "this answer showed a note that was erased since; ask again"}})
            p.set(k, err, keepttl=True, xx=True)
            done += 1
        p.execute()
        batch.clear()
        return done

    for k in r.scan_iter(match=prefix + "*", count=1000):
        batch.append(as_bytes(k))
        if len(batch) >= CHUNK:
            n += flush()
    return n + flush()


def drop_snapshots(r: Store, ns: str) -> int:
    """Delete the namespace's index snapshots and drafts (of every layout); how many keys."""
    found = [keys.index_snapshot(ns), *keys.old_index_snapshots(ns)]
    found += [as_bytes(k).decode() for k in
              r.scan_iter(match=keys.index_snapshot_draft(ns, "*"), count=1000)]
    return sum(int(r.delete(k)) for k in found)


def raise_fence(r: Store, ns: str) -> str:
    """Raise the erasure fence to the namespace's checkpoint (past every ``note.erased`` the
    read model has folded); the fence afterwards."""
    pos = format_pos(checkpoint(r, ns))
    return as_bytes(script(r, "raise_fence")(keys=[keys.erasure_fence(ns)], args=[pos])
                    ).decode()


def redact(r: Store, ns: str, note_ids: Sequence[str],
           lease_wait_s: float = LEASE_WAIT_S) -> Redaction:
    """Redact the content of ``note_ids`` everywhere hivemind wrote it in ``ns``, for those
    the read model has erased (the caller waits for the projector to fold the
    ``note.erased`` first); the others are reported in ``not_erased`` and left alone."""
    out = Redaction(ns)
    out.erased, out.not_erased = erased_notes(r, ns, note_ids)
    if not out.erased:
        return out
    lease = _Lease(r, ns)
    lease.take(lease_wait_s)
    try:
        out.fence = raise_fence(r, ns)  # first: no older index stores a snapshot from now on
        out.events = rewrite_stream(r, ns, keys.stream(ns), FIELD, out.erased, lease)
        out.dead = rewrite_stream(r, ns, keys.dead(ns), DEAD_RAW, out.erased, lease)
        out.results = redact_results(r, ns, out.erased)
        out.snapshots = drop_snapshots(r, ns)
        from hivemind_memory.projections.store.embedded import (  # fakeredis: not for plain Redis
            stream_log_of,
        )

        slog = stream_log_of(r)
        if slog is not None:
            change = content_change(ns, out.erased, digest_key(r))
            events_key = keys.stream(ns).encode()

            def on_record(key: bytes, fields: list[bytes]) -> list[bytes] | None:
                if key != events_key or len(fields) != 2 or fields[0] != FIELD:
                    return None
                new = change(fields[1])
                return None if new is None else [FIELD, new]

            out.log_records = slog.rewrite(on_record)
    finally:
        lease.release()
    return out
