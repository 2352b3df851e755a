"""Notes read by id or id prefix, as an agent may see them, read-your-writes without waiting
for a worker: the read model plus the log tail the projector has not folded yet, folded with
the projector's own fold (``readmodel.write_view``, what a checked write decides on).

The tail is read before the read model is scanned: an entry appended before the call is
either in that tail or already folded into the notes hash when it is scanned (folded notes
never leave it), so no note written before the call is missed.
"""

from __future__ import annotations

from collections.abc import Sequence

from hivemind_memory.projections.reduce import Undecodable
from hivemind_memory.projections.state import NoteState
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.readmodel import decode_entries, write_view
from hivemind_memory.projections.store.types import Store, as_bytes

SCAN_COUNT = 1000
"""Fields per HSCAN step of a prefix read."""


def may_see(n: NoteState, agent: str) -> bool:
    """Active (``NoteState.active``: not forgotten, superseded or erased), and shared or
    ``agent``'s own private note (the rule a query applies)."""
    return n.active and (n.scope == "shared" or (bool(agent) and n.agent == agent))


def _tail_ids(r: Store, ns: str, prefix: str) -> set[str]:
    cp_raw = r.get(keys.checkpoint(ns))
    cp = as_bytes(cp_raw).decode() if cp_raw else ""
    decoded = decode_entries(r.xrange(keys.stream(ns), min="(" + cp if cp else "-",
                                      max="+") or [], ns)
    return {d[1].note_id for d in decoded
            if not isinstance(d[1], Undecodable) and d[1].note_id.startswith(prefix)}


def visible_notes(r: Store, ns: str, agent: str, *, note_ids: Sequence[str] = (),
                  prefix: str | None = None) -> dict[str, NoteState]:
    """The notes ``agent`` may see among ``note_ids``, or (``prefix`` given) among every note
    whose id starts with ``prefix`` ("" = all), as they stand once the projector has folded
    every event appended before this call. Note ids never hold a glob character (their
    charset is ``[A-Za-z0-9_.:@-]``), so ``HSCAN MATCH prefix*`` is exact."""
    wanted = set(note_ids)
    if prefix is not None:
        wanted |= _tail_ids(r, ns, prefix)
        for field, _ in r.hscan_iter(keys.notes(ns), match=prefix + "*", count=SCAN_COUNT):
            wanted.add(as_bytes(field).decode())
    if not wanted:
        return {}
    view = write_view(r, ns, sorted(wanted), [])
    return {k: n for k, n in view.notes.items() if k in wanted and may_see(n, agent)}
