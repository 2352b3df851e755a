"""Fill a ``NamespaceIndex`` from Redis: a snapshot or a full load, then incremental refreshes.

Each committed projection batch appends one entry to ``changes`` listing the notes it
touched; a refresh reads the entries after the last one it saw and re-reads only those notes.
A gap (the changes stream was trimmed past our position) is bridged by a stored snapshot taken
since, when there is one (the projector keeps snapshots current: ``refresh_snapshot`` jobs);
otherwise a gap, or a ``reset`` entry (written by ``replay``), needs a full reload, which a
caller may refuse (``FullLoadNeeded``: a query job hands a large build to a thread).

The first refresh of a worker reads the namespace's index snapshot (``keys.index_snapshot``)
when there is one of this version, then goes on incrementally from the changes entry the
snapshot was taken at (so a stale snapshot is only a longer catch-up, and one from before a
``replay`` meets its ``reset`` entry and is reloaded in full). Every full load writes a new
snapshot (and deletes the keys of older layouts); ``replay`` deletes it.

Embeddings are derived here too: after every load or refresh, the notes without a vector of
the worker's embedder get one (``NamespaceIndex.embed_missing``, in batches), before the
snapshot is written; a snapshot of another embedder is re-embedded in full and rewritten.
They are never read from the log, so ``replay`` (which deletes the snapshot) recomputes them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Callable

import redis

from hivemind_memory.events.positions import ZERO, Position, format_pos, parse_pos
from hivemind_memory.projections.ranking.embedders import Embedder
from hivemind_memory.projections.ranking.index import NamespaceIndex
from hivemind_memory.projections.ranking.snapshot import decode_index, decode_meta, snapshot_fields
from hivemind_memory.projections.state import unpack_note
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.scripts import script
from hivemind_memory.projections.store.types import Store, as_bytes, newest_pos, stream_entries

DRAFT_TTL_S = 600
"""A snapshot draft older than this is dropped (its writer died, or took far too long)."""


def load_index(r: Store, idx: NamespaceIndex, *, snapshot: bool = True,
               embedder: Embedder | None = None) -> None:
    """Full load (first use, reset, or a gap in the changes stream) from the read model, the
    notes embedded with ``embedder``; then (unless ``snapshot`` is False) the index snapshot
    is rewritten."""
    ns = idx.ns
    p = r.pipeline(transaction=True)
    p.xrevrange(keys.changes(ns), count=1)
    p.get(keys.checkpoint(ns))
    p.hgetall(keys.notes(ns))
    last_change, cp, raw = p.execute()
    # the fields are the note ids, and bytes sort as their UTF-8 strings do: the notes are
    # decoded one at a time in note id order, each dropped once it is in the columns
    ordered = sorted(raw)
    idx.reset((unpack_note(raw.pop(k)) for k in ordered), parse_pos(cp),
              newest_pos(last_change), ordered=True)
    del raw, ordered
    idx.embed_missing(embedder)
    if snapshot:
        write_snapshot(r, idx)
    trim_heap()


def write_snapshot(r: Store, idx: NamespaceIndex) -> None:
    """Store ``idx`` as the namespace's index snapshot, replacing the stored one atomically
    (and deleting those of older layouts), unless an erasure's fence (``keys.erasure_fence``)
    is past ``idx.checkpoint``.

    The fields go one command each into a draft key of this writer's own, renamed over the
    snapshot at the end: one MULTI with every field would make redis-py build the whole
    command (~90 MB at 100k notes) as one more copy in memory. A writer that dies midway
    leaves a draft that expires."""
    key = keys.index_snapshot(idx.ns)
    draft = keys.index_snapshot_draft(idx.ns, os.urandom(8).hex())
    fields = snapshot_fields(idx)
    name, value = next(fields)  # meta
    p = r.pipeline(transaction=True)
    p.hset(draft, name, value)
    p.expire(draft, DRAFT_TTL_S)
    p.execute()
    for name, value in fields:
        r.hset(draft, name, value)
    # atomic: a reader gets the old snapshot or this one; refused (the draft dropped) when an
    # erasure happened after the position this index folded up to (it may hold erased text)
    stored = script(r, "publish_snapshot")(
        keys=[draft, key, keys.erasure_fence(idx.ns)], args=[format_pos(idx.checkpoint)])
    if stored == 1:
        r.delete(*keys.old_index_snapshots(idx.ns))


def read_snapshot(r: Store, idx: NamespaceIndex) -> bool:
    """Replace ``idx``'s content with the stored snapshot; False when there is none usable."""
    try:
        reply = r.hgetall(keys.index_snapshot(idx.ns))
    except redis.ResponseError:  # not a hash (WRONGTYPE): not a snapshot of this layout
        return False
    if not reply:
        return False
    fields = {as_bytes(k): as_bytes(v) for k, v in reply.items()}
    del reply
    snap = decode_index(fields, idx.ns)
    del fields
    if snap is None:
        return False
    idx.cols = snap.cols
    idx.derived = snap.derived
    idx._vectors, idx._dirty_dims = {}, snap._dirty_dims
    idx.checkpoint, idx.changes_seen = snap.checkpoint, snap.changes_seen
    idx.snapshot_loads += 1
    trim_heap()
    return True


def _malloc_trim() -> Callable[[int], object] | None:
    try:
        fn: Callable[[int], object] = ctypes.CDLL(
            ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to call
        return None
    return fn


_TRIM = _malloc_trim()


def trim_heap() -> None:
    """Give the pages a load freed back to the OS (glibc's ``malloc_trim``; a no-op
    elsewhere). A load frees ~100k small objects (the read model's reply, decoded notes,
    per-note counters) among ones that live on, and glibc keeps such holes in the heap: at
    100k notes this takes the worker's RSS after a full load from ~325 to ~190 MiB, in a few
    milliseconds."""
    if _TRIM is not None:
        _TRIM(0)


REWRITE_SNAPSHOT_AT = 0.5
"""A snapshot is rewritten when re-embedding it touched more than this share of its notes
(it was taken with another embedder)."""


NO_SNAPSHOT = "no usable snapshot"
"""``FullLoadNeeded.why`` of an index never loaded whose namespace has no usable snapshot."""


class FullLoadNeeded(Exception):
    """A refresh that can only go on by loading the namespace in full (no usable snapshot, a
    ``reset`` entry, or the changes stream trimmed past both the index and the snapshot),
    refused by its caller (``allow_full=False``): a query job hands the build to a thread."""

    def __init__(self, ns: str, why: str) -> None:
        super().__init__(f"namespace {ns!r} needs a full index load: {why}")
        self.ns, self.why = ns, why


FullLoadGate = bool | Callable[[str], bool]
"""Whether a refresh may load in full: a bool, or asked with the reason (it may raise)."""


def refresh_index(r: Store, idx: NamespaceIndex, embedder: Embedder | None = None, *,
                  allow_full: FullLoadGate = True) -> None:
    """Bring ``idx`` up to the read model's current state (new notes embedded with
    ``embedder``). A gap in the changes stream past ``idx`` is bridged by a newer stored
    snapshot when there is one; a full load happens only when nothing else can, and only
    if ``allow_full`` (or ``allow_full(why)``) says so: else ``FullLoadNeeded``."""
    if idx.changes_seen is None and read_snapshot(r, idx) and \
            idx.embed_missing(embedder) > REWRITE_SNAPSHOT_AT * max(1, idx.indexed()):
        write_snapshot(r, idx)
    _refresh(r, idx, embedder, allow_full)
    idx.embed_missing(embedder)


def _full(r: Store, idx: NamespaceIndex, embedder: Embedder | None,
          allow_full: FullLoadGate, why: str) -> None:
    if not (allow_full if isinstance(allow_full, bool) else allow_full(why)):
        raise FullLoadNeeded(idx.ns, why)
    load_index(r, idx, embedder=embedder)


def _has_change(r: Store, ns: str, pos: Position) -> bool:
    me = format_pos(pos)
    return bool(r.xrange(keys.changes(ns), min=me, max=me))


def _refresh(r: Store, idx: NamespaceIndex, embedder: Embedder | None,
             allow_full: FullLoadGate = True) -> None:
    ns = idx.ns
    if idx.changes_seen is None:
        _full(r, idx, embedder, allow_full, NO_SNAPSHOT)
        return
    seen = idx.changes_seen
    assert seen is not None
    entries = stream_entries(
        r.xrange(keys.changes(ns), min="(" + format_pos(seen) if seen != ZERO else "-"))
    if not entries:
        return
    if seen != ZERO and not _has_change(r, ns, seen):
        # the entry we last saw was trimmed away: later ones may be gone too. A snapshot
        # taken since (kept current by ``refresh_snapshot`` jobs) bridges the gap
        snap = snapshot_changes_seen(r, ns)
        if snap is not None and snap > seen and _has_change(r, ns, snap) and \
                read_snapshot(r, idx):
            idx.embed_missing(embedder)
            _refresh(r, idx, embedder, allow_full)
            return
        _full(r, idx, embedder, allow_full, "its changes stream was trimmed past the index "
              "and its snapshot")
        return
    touched: set[str] = set()
    for entry in entries:
        if entry.fields.get(b"reset") == b"1":
            _full(r, idx, embedder, allow_full, "its read model was replayed")
            return
        touched.update(x for x in entry.fields.get(b"notes", b"").decode().split(" ") if x)
    ids = sorted(touched)
    blobs = r.hmget(keys.notes(ns), ids) if ids else []
    last = entries[-1]
    idx.update((unpack_note(as_bytes(b)) for b in blobs if b is not None),
               parse_pos(last.fields.get(b"pos")), parse_pos(last.id))


def snapshot_changes_seen(r: Store, ns: str) -> Position | None:
    """The changes entry the stored snapshot of ``ns`` was taken at (None: no usable one)."""
    try:
        raw = r.hget(keys.index_snapshot(ns), "meta")
    except redis.ResponseError:
        return None
    meta = None if raw is None else decode_meta(as_bytes(raw), ns)
    return None if meta is None else parse_pos(meta.changes_seen)


def changes_last(r: Store, ns: str) -> Position:
    """Id of the namespace's newest changes entry (``ZERO`` if none): an index whose
    ``changes_seen`` equals it holds exactly the read model at its checkpoint."""
    return newest_pos(r.xrevrange(keys.changes(ns), count=1))
