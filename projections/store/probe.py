"""What a query job must do before ranking, in one round trip: the namespace's checkpoint, the
id of its newest changes entry, its erasure fence and which of the job's queries already have
a result, read together (one MULTI, one hash slot).

A checkpoint at or past every live query's position means nothing to catch up; a newest
changes entry equal to the one a live index last folded in means nothing to refresh (each
projection commit writes its notes, checkpoint and changes entry atomically); a query with a
result was answered by an earlier run of its job."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from hivemind_memory.events.positions import Position, parse_pos
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.types import Store, as_bytes, newest_pos


class Probe(NamedTuple):
    checkpoint: Position
    """``ZERO`` when there is none."""
    last_change: Position
    """Id of the newest changes entry (``ZERO`` when there is none)."""
    answered: list[bool]
    """Whether each of the queries asked about has a result key."""
    fence: bytes | None = None
    """The namespace's erasure fence (``keys.erasure_fence``; None: never erased)."""


def probe(r: Store, ns: str, query_ids: Sequence[str] = ()) -> Probe:
    """The state of ``ns`` a query job checks first, as of one instant."""
    p = r.pipeline(transaction=True)
    p.get(keys.checkpoint(ns))
    p.xrevrange(keys.changes(ns), count=1)
    p.get(keys.erasure_fence(ns))
    for q in query_ids:
        p.exists(keys.result(ns, q))
    cp, last, fence, *there = p.execute()
    return Probe(parse_pos(None if cp is None else as_bytes(cp)), newest_pos(last),
                 [bool(n) for n in there], None if fence is None else as_bytes(fence))
