"""What loading a namespace's index would cost a worker, known before loading it: read from
the sizes of its stored snapshot's fields (HSTRLEN, nothing is transferred), so a worker under
a memory budget can refuse a namespace too large for it, or make room for it, first.

The figure is the snapshot's bytes as they become arrays (the derived vectors are widened from
int8 to float32 on load: 4 bytes a component) plus the Python objects a load builds per note
id and per term (``PER_ID_BYTES``, ``PER_TERM_BYTES``). The caches an index then fills while
it answers (decoded texts, BM25 parts of recent words, layouts of recent askers) are not in
it: the worker measures the loaded index itself (``projections.ranking.footprint``).
"""

from __future__ import annotations

import msgspec
import redis

from hivemind_memory.projections.ranking.columns import SLOT_ARRAYS
from hivemind_memory.projections.ranking.snapshot import SNAPSHOT_VERSION, Meta
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.types import Store

PER_ID_BYTES = 130
"""A note id as loaded: its ``str`` (~49 bytes + its length), a list slot (8), its entry in
the slot dict (~40) and the slot's ``int`` (28)."""
PER_TERM_BYTES = 20
"""A term as loaded besides its UTF-8 (``projections.ranking.terms.TermTable``): its hash (8),
id (4) and offset (8)."""
_FIELDS = ("ids", "terms", "base_ptr", "base_slot", "base_tf", "text_off", "vec_slot",
           "vec_off", "vec_val", "dvec", "dvec_done", *SLOT_ARRAYS)
_decode_meta = msgspec.msgpack.Decoder(Meta).decode


def estimate_load_bytes(r: Store, ns: str) -> int | None:
    """The memory a load of ``ns``'s stored snapshot would take (see the module docstring);
    None when there is no usable snapshot (the first load of a namespace: a full build, which
    is measured once it is done)."""
    key = keys.index_snapshot(ns)
    p = r.pipeline(transaction=False)
    p.hget(key, "meta")
    for f in _FIELDS:
        p.hstrlen(key, f)
    try:
        meta_raw, *lens = p.execute()
    except redis.ResponseError:  # not a hash of this layout
        return None
    if meta_raw is None:
        return None
    try:
        meta = _decode_meta(meta_raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    if meta.version != SNAPSHOT_VERSION or meta.ns != ns:
        return None
    size = dict(zip(_FIELDS, (int(n) for n in lens), strict=True))
    q = r.pipeline(transaction=False)
    for i in range(len(meta.text_first)):
        q.hstrlen(key, f"text.{i}")
    texts = sum(int(n) for n in q.execute()) if meta.text_first else 0
    terms = max(0, size["base_ptr"] // 8 - 1)
    return (sum(size.values()) + texts + 3 * size["dvec"]  # int8 -> float32
            + 4 * size["dvec_done"]  # + a float64 norm a slot
            + meta.slots * PER_ID_BYTES + terms * PER_TERM_BYTES)
