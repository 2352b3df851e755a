"""A namespace's counters as stored, read together for ``hivemind status`` and
``/metrics``: the stream's length, the checkpoint, how many entries the read model has
projected, the dead letters, the audit's length and its newest entry (one MULTI)."""

from __future__ import annotations

from typing import NamedTuple

from hivemind_memory.events.positions import Position, parse_pos
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.types import Store, StreamEntry, as_bytes, stream_entries


class Counters(NamedTuple):
    """One namespace's counters, read atomically."""

    stream_length: int
    checkpoint: Position
    projected: int | None
    """Entries the read model has folded (None: a read model from before this counter)."""
    dead_letters: int
    audit_length: int
    last_audit: StreamEntry | None


def read_counters(r: Store, ns: str) -> Counters:
    """``ns``'s counters (one MULTI)."""
    p = r.pipeline(transaction=True)
    p.xlen(keys.stream(ns))
    p.get(keys.checkpoint(ns))
    p.get(keys.projected(ns))
    p.xlen(keys.dead(ns))
    p.xlen(keys.audit(ns))
    p.xrevrange(keys.audit(ns), count=1)
    length, cp_raw, projected_raw, dead, served, audit = p.execute()
    last = stream_entries(audit)
    return Counters(stream_length=int(length),
                    checkpoint=parse_pos(None if cp_raw is None else as_bytes(cp_raw)),
                    projected=None if projected_raw is None else int(projected_raw),
                    dead_letters=int(dead), audit_length=int(served),
                    last_audit=last[-1] if last else None)
