"""What a query job must do before ranking, in one round trip: the namespace's checkpoint and
the id of its newest changes entry, read together (one MULTI, one hash slot).

A checkpoint at or past every live query's position means nothing to catch up; a newest
changes entry equal to the one a live index last folded in means nothing to refresh (each
projection commit writes its notes, checkpoint and changes entry atomically)."""

from __future__ import annotations

from hivemind_memory.events.positions import Position, parse_pos
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.types import Store, as_bytes, newest_pos


def probe(r: Store, ns: str) -> tuple[Position, Position]:
    """(checkpoint, id of the newest changes entry) of ``ns``, as of one instant (``ZERO``
    for either when there is none)."""
    p = r.pipeline(transaction=True)
    p.get(keys.checkpoint(ns))
    p.xrevrange(keys.changes(ns), count=1)
    cp, last = p.execute()
    return parse_pos(None if cp is None else as_bytes(cp)), newest_pos(last)
