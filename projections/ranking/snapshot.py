"""An index snapshot: a ``NamespaceIndex`` (columns, texts, embeddings, positions) as a few
raw byte strings (the fields of one Redis hash), so a worker start or reset loads it in one
read, without re-tokenizing a note or building a Python object per note. Pure; stored by
``projections.store.index_loader``.

Layout (``SNAPSHOT_VERSION`` 3): ``meta`` (msgpack: version, namespace, positions, slot
count, agents, the first slot of each text chunk, the embedder's digest and dimension);
``ids`` and ``terms`` (``\\n``-joined UTF-8: neither a note id nor a term can hold a
newline); one field per per-slot array and per CSR array (raw little-endian buffers of a
fixed dtype); ``text_off`` plus one field per text chunk (``text.0``, ``text.1``, ...: no
field is larger than a chunk or the postings, which bounds what a reader holds twice while
the reply is parsed); ``vec_slot`` / ``vec_off`` / ``vec_val`` for the caller-supplied
embeddings; ``dvec`` (one int8 row per slot: the quantized vectors of
``projections.ranking.vectors``, derived from the texts by the embedder ``meta`` names) and
``dvec_done``. Loading is ``np.frombuffer`` over the reply: the CSR base and the texts are
used in place (never written: compaction and sealing replace them), the small per-slot
arrays are copied (``put`` writes them), the vectors widened to float32.

The columns are compacted and the texts sealed first. ``SNAPSHOT_VERSION`` changes whenever
the layout (or the tokenizer) changes; a snapshot of another version is ignored (and rebuilt).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from itertools import pairwise

import msgspec
import numpy as np

from hivemind_memory.events.positions import format_pos, parse_pos
from hivemind_memory.projections.ranking.columns import SLOT_ARRAYS, Columns
from hivemind_memory.projections.ranking.index import NamespaceIndex
from hivemind_memory.projections.ranking.terms import TermTable
from hivemind_memory.projections.ranking.texts import TextColumn
from hivemind_memory.projections.ranking.vectors import DerivedVectors

SNAPSHOT_VERSION = 3
"""Layout version of a snapshot (part of its Redis key, and checked on decode). Version 1
was one msgpack blob holding every ``NoteState``; version 2 had no derived embeddings."""


class Meta(msgspec.Struct, frozen=True, array_like=True):
    """The small part of a snapshot (field ``meta``)."""

    version: int
    ns: str
    checkpoint: str
    changes_seen: str
    slots: int
    agents: list[str]
    """Agents in id order."""
    text_first: list[int]
    """First slot of each text chunk (field ``text.K``)."""
    tf_dtype: str
    """dtype of ``base_tf``: the narrowest of ``u1``, ``<u2``, ``<i4`` that holds them."""
    embedder: str = ""
    """Digest of the embedder of ``dvec`` ("": none)."""
    embed_dim: int = 0


class Extra(msgspec.Struct, frozen=True, array_like=True):
    """Field ``extra``: the metadata and expiry (microseconds) of the slots that have them
    (written only when some slot does)."""

    meta: dict[int, dict[str, str | int | float | bool]]
    expires: dict[int, int]


_encode = msgspec.msgpack.Encoder().encode
_decode_meta = msgspec.msgpack.Decoder(Meta).decode
_decode_extra = msgspec.msgpack.Decoder(Extra).decode
_CSR: dict[str, type[np.generic]] = {"base_ptr": np.int64, "base_slot": np.int32}
_TF_DTYPES: dict[str, type[np.generic]] = {"u1": np.uint8, "<u2": np.uint16, "<i4": np.int32}


def _le(a: np.ndarray, dtype: type[np.generic]) -> bytes:
    return np.ascontiguousarray(a, dtype=np.dtype(dtype).newbyteorder("<")).tobytes()


def _view(b: bytes, dtype: type[np.generic], n: int | None = None) -> np.ndarray:
    """``b`` as a read-only array of ``dtype`` (no copy on a little-endian machine)."""
    a = np.frombuffer(b, dtype=np.dtype(dtype).newbyteorder("<"))
    if n is not None and len(a) != n:
        raise ValueError(f"{len(a)} values where {n} were expected")
    return a if a.dtype == np.dtype(dtype) else a.astype(dtype)


def _lines(b: bytes) -> list[str]:
    return b.decode().split("\n") if b else []


def encode_index(idx: NamespaceIndex) -> dict[bytes, bytes]:
    """The snapshot of ``idx`` as hash fields (``snapshot_fields`` in a dict)."""
    return dict(snapshot_fields(idx))


def snapshot_fields(idx: NamespaceIndex) -> Iterator[tuple[bytes, bytes]]:
    """The snapshot of ``idx``, one hash field at a time (so a writer holds one field's
    bytes, not all of them); it compacts ``idx``'s columns and seals its texts first. ``idx``
    must have been loaded and must not change until the last field."""
    assert idx.changes_seen is not None
    cols = idx.cols
    cols.compact(force=True)
    n = len(cols)
    chunks, first, off = cols.texts.parts()
    top = int(cols.base_tf.max()) if len(cols.base_tf) else 0
    tf_dtype = "u1" if top < 1 << 8 else "<u2" if top < 1 << 16 else "<i4"
    d = idx.derived
    yield b"meta", _encode(Meta(
        version=SNAPSHOT_VERSION, ns=idx.ns, checkpoint=format_pos(idx.checkpoint),
        changes_seen=format_pos(idx.changes_seen), slots=n, agents=list(cols.agents),
        text_first=first, tf_dtype=tf_dtype, embedder="" if d is None else d.digest,
        embed_dim=0 if d is None else d.dim))
    yield b"ids", "\n".join(cols.ids).encode()
    yield b"terms", cols.terms.joined()
    for k, t in SLOT_ARRAYS.items():
        yield k.encode(), _le(getattr(cols, k)[:n], t)
    for k, t in _CSR.items():
        yield k.encode(), _le(getattr(cols, k), t)
    yield b"base_tf", _le(cols.base_tf, _TF_DTYPES[tf_dtype])
    yield b"text_off", _le(off, np.int64)
    for i, chunk in enumerate(chunks):
        yield b"text.%d" % i, chunk
    vec_slots = sorted(s for s in cols.vec if s < n)
    vecs = [cols.vec[s] for s in vec_slots]
    vec_off = np.zeros(len(vecs) + 1, np.int64)
    np.cumsum([len(v) for v in vecs], out=vec_off[1:])
    yield b"vec_slot", _le(np.array(vec_slots, np.int64), np.int64)
    yield b"vec_off", _le(vec_off, np.int64)
    yield b"vec_val", _le(np.concatenate(vecs) if vecs else np.zeros(0), np.float64)
    if d is not None:
        yield b"dvec", d.ints(n).tobytes()
        yield b"dvec_done", _le(d.done(n), np.bool_)
    if cols.meta or cols.expires:
        yield b"extra", _encode(Extra({k: v for k, v in cols.meta.items() if k < n},
                                      {k: v for k, v in cols.expires.items() if k < n}))


def decode_meta(raw: bytes, ns: str) -> Meta | None:
    """The ``meta`` field of a snapshot of ``ns`` of this version (None: anything else)."""
    try:
        meta = _decode_meta(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return meta if meta.version == SNAPSHOT_VERSION and meta.ns == ns else None


def decode_index(fields: Mapping[bytes, bytes], ns: str) -> NamespaceIndex | None:
    """The index in ``fields``, or None when it is of another version or namespace (or not a
    snapshot at all, or damaged): the caller then loads in full."""
    try:
        meta = _decode_meta(fields[b"meta"])
        if meta.version != SNAPSHOT_VERSION or meta.ns != ns:
            return None
        return _decode(fields, meta)
    except (KeyError, ValueError, msgspec.DecodeError, msgspec.ValidationError):
        return None


def _decode(fields: Mapping[bytes, bytes], meta: Meta) -> NamespaceIndex:
    n = meta.slots
    cols = Columns()
    cols.ids = _lines(fields[b"ids"])
    if len(cols.ids) != n:
        raise ValueError("ids do not match the slot count")
    cols.slot = dict(zip(cols.ids, range(n), strict=True))  # a later slot of an id wins
    cols.terms = TermTable.from_joined(fields[b"terms"])
    n_terms = len(cols.terms)
    cols.agents = {a: i for i, a in enumerate(meta.agents)}
    for k, t in SLOT_ARRAYS.items():  # written in place by put: copied
        setattr(cols, k, _view(fields[k.encode()], t, n).copy())
    # the CSR base is only ever replaced (by compaction), never written: no copy
    cols.base_ptr = _view(fields[b"base_ptr"], np.int64, n_terms + 1)
    cols.base_slot = _view(fields[b"base_slot"], np.int32)
    cols.base_tf = _view(fields[b"base_tf"], _TF_DTYPES[meta.tf_dtype], len(cols.base_slot))
    if int(cols.base_ptr[-1]) != len(cols.base_slot):
        raise ValueError("postings do not match their pointers")
    cols.texts = TextColumn.from_parts(
        [fields[b"text.%d" % i] for i in range(len(meta.text_first))], meta.text_first,
        _view(fields[b"text_off"], np.int64, n + 1))
    vec_slot = _view(fields[b"vec_slot"], np.int64).tolist()
    vec_off = _view(fields[b"vec_off"], np.int64, len(vec_slot) + 1).tolist()
    vec_val = _view(fields[b"vec_val"], np.float64, vec_off[-1])
    if any(not 0 <= x < n for x in vec_slot) or any(
            a > b for a, b in pairwise(vec_off)):
        raise ValueError("embeddings do not match the slots")
    cols.vec = {s: vec_val[vec_off[i]:vec_off[i + 1]] for i, s in enumerate(vec_slot)}
    if b"extra" in fields:  # absent: no note had metadata or an expiry
        extra = _decode_extra(fields[b"extra"])
        if any(not 0 <= x < n for x in (*extra.meta, *extra.expires)):
            raise ValueError("metadata does not match the slots")
        cols.meta, cols.expires = extra.meta, extra.expires
    cols._recount()
    idx = NamespaceIndex(meta.ns)
    idx.cols = cols
    if meta.embedder:
        derived = DerivedVectors(meta.embedder, meta.embed_dim)
        derived.load(np.frombuffer(fields[b"dvec"], np.int8, n * meta.embed_dim),
                     _view(fields[b"dvec_done"], np.bool_, n), n)
        idx.derived = derived
    idx._dirty_dims = {len(v) for v in cols.vec.values()}
    idx.checkpoint = parse_pos(meta.checkpoint)
    idx.changes_seen = parse_pos(meta.changes_seen)
    return idx
