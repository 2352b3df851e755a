"""An index snapshot: a ``NamespaceIndex`` (notes, columns, positions) as one byte string, so a
worker start or reset loads it in one read instead of re-tokenizing every note. Pure; stored by
``projections.store.index_snapshot``.

The columns are compacted first (no delta), their arrays stored as raw little-endian buffers of
a fixed dtype per field. ``SNAPSHOT_VERSION`` changes whenever the layout (or the tokenizer)
changes; a snapshot of another version is ignored (and rebuilt).
"""

from __future__ import annotations

import msgspec
import numpy as np

from hivemind_memory.events.positions import format_pos, parse_pos
from hivemind_memory.projections.columns import Columns
from hivemind_memory.projections.index import NamespaceIndex
from hivemind_memory.projections.state import NoteState

SNAPSHOT_VERSION = 1
"""Layout version of a snapshot (part of its Redis key, and checked on decode)."""

_ARRAYS: dict[str, type[np.generic]] = {
    "doc_len": np.int64, "tokens": np.int64, "created_us": np.int64, "uses": np.int64,
    "scratch": np.bool_, "private": np.bool_, "owner": np.int64, "live": np.bool_,
}
"""Per-slot arrays and their dtypes (written in place later, so copied on load)."""


class IndexSnapshot(msgspec.Struct, frozen=True, array_like=True):
    """Everything a ``NamespaceIndex`` holds, in a portable form."""

    version: int
    ns: str
    checkpoint: str
    changes_seen: str
    notes: list[NoteState]
    ids: list[str]
    """Note id of each slot (a note that got a new slot appears more than once)."""
    terms: list[str]
    """Terms in id order."""
    agents: list[str]
    """Agents in id order."""
    arrays: dict[str, bytes]
    base_ptr: bytes
    base_slot: bytes
    base_tf: bytes


_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(IndexSnapshot).decode


def _le(a: np.ndarray, dtype: type[np.generic]) -> bytes:
    return np.ascontiguousarray(a, dtype=np.dtype(dtype).newbyteorder("<")).tobytes()


def _from(b: bytes, dtype: type[np.generic], writable: bool = True) -> np.ndarray:
    a = np.frombuffer(b, dtype=np.dtype(dtype).newbyteorder("<"))
    return a.astype(dtype) if writable or a.dtype != np.dtype(dtype) else a


def encode_index(idx: NamespaceIndex) -> bytes:
    """The snapshot of ``idx`` (compacts its columns first). ``idx`` must have been loaded."""
    assert idx.changes_seen is not None
    cols = idx.cols
    cols.compact(force=True)
    n = len(cols)
    return _encode(IndexSnapshot(
        version=SNAPSHOT_VERSION, ns=idx.ns, checkpoint=format_pos(idx.checkpoint),
        changes_seen=format_pos(idx.changes_seen), notes=list(idx.notes.values()),
        ids=cols.ids, terms=list(cols.terms), agents=list(cols.agents),
        arrays={k: _le(getattr(cols, k)[:n], t) for k, t in _ARRAYS.items()},
        base_ptr=_le(cols.base_ptr, np.int64), base_slot=_le(cols.base_slot, np.int32),
        base_tf=_le(cols.base_tf, np.int32)))


def decode_index(data: bytes, ns: str) -> NamespaceIndex | None:
    """The index in ``data``, or None when it is of another version or namespace (or not a
    snapshot at all): the caller then loads in full."""
    try:
        snap = _decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    if snap.version != SNAPSHOT_VERSION or snap.ns != ns:
        return None
    cols = Columns()
    cols.ids = snap.ids
    cols.slot = {k: i for i, k in enumerate(snap.ids)}  # a later slot of an id wins
    cols.terms = {t: i for i, t in enumerate(snap.terms)}
    cols.agents = {a: i for i, a in enumerate(snap.agents)}
    for k, t in _ARRAYS.items():
        setattr(cols, k, _from(snap.arrays[k], t))
    # the CSR base is only ever replaced (by compaction), never written: no copy
    cols.base_ptr = _from(snap.base_ptr, np.int64, writable=False)
    cols.base_slot = _from(snap.base_slot, np.int32, writable=False)
    cols.base_tf = _from(snap.base_tf, np.int32, writable=False)
    cols._recount()
    idx = NamespaceIndex(ns)
    idx.notes = {n.note_id: n for n in snap.notes}
    idx.cols = cols
    idx._dirty_dims = {len(n.embedding) for n in snap.notes if n.embedding is not None}
    idx.checkpoint = parse_pos(snap.checkpoint)
    idx.changes_seen = parse_pos(snap.changes_seen)
    return idx
