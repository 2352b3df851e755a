"""The near-duplicate lookup in Redis: kept by the projector, read by a checked write.

One sorted set per namespace (``keys.dupidx``), every score 0, each member a key's digest
(``projections.ranking.dupsketch``: the twin key and the MinHash band keys) followed by the
note id; the notes filed under a key are one lex range (``ZRANGEBYLEX [digest (digest\\xff``:
note ids are ASCII). Only active notes are filed. The projector's commit script removes and
adds members in the same atomic write as the notes and the checkpoint (``commit_batch.lua``),
so the lookup is exactly the read model's: a note that is revised is filed under its new
keys, one forgotten, superseded or erased leaves it (only digests were ever kept).
``replay`` rebuilds it with the notes. ``keys.dupspec`` holds the spec tag it was made with.
Each note with terms also has a terms member (``dupsketch.terms_member``: a fixed 8-byte mark,
the note id, a NUL, then the sorted 64-bit digests of its terms), so a write computes the exact
overlap of the notes the bands name without reading or analysing their texts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hivemind_memory.events.positions import Position, parse_pos
from hivemind_memory.projections.ranking.dupsketch import (
    DIGEST_BYTES,
    TERMS_MARK,
    DupSpec,
    Probe,
    entries,
)
from hivemind_memory.projections.state import NoteState
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.scripts import script
from hivemind_memory.projections.store.types import Store, as_bytes


@dataclass(frozen=True, slots=True)
class IndexChanges:
    """What one folded batch does to the lookup: members to remove, then to add."""

    removed: list[bytes]
    added: list[bytes]


def _filed(nid: str, state: NoteState | None, spec: DupSpec) -> list[bytes]:
    return entries(nid, state.text, spec) if state is not None and state.active else []


def changes(before: Mapping[str, NoteState], after: Mapping[str, NoteState],
            spec: DupSpec) -> IndexChanges:
    """The members to remove and add when the notes ``before`` (their states as the batch
    found them; absent: new) become ``after`` (the batch's folded states). A note whose text
    and activity did not change (a use, say) costs nothing."""
    removed: list[bytes] = []
    added: list[bytes] = []
    for nid, post in after.items():
        pre = before.get(nid)
        if pre is not None and pre.text == post.text and pre.active == post.active:
            continue
        old = _filed(nid, pre, spec)
        new = _filed(nid, post, spec)
        if old == new:
            continue
        keep = set(new)
        removed += [m for m in old if m not in keep]
        gone = set(old)
        added += [m for m in new if m not in gone]
    return IndexChanges(removed, added)


def commit_args(ch: IndexChanges, spec: DupSpec) -> list[Any]:
    """The tail of ``commit_batch.lua``'s ARGV for ``ch`` (its header has the layout)."""
    argv: list[Any] = [len(ch.removed), *ch.removed, len(ch.added)]
    for m in ch.added:
        argv += (0, m)
    argv.append(spec.tag)
    return argv


def rebuild_commands(ns: str, notes: Mapping[str, NoteState], spec: DupSpec,
                     per_call: int = 2000) -> Iterable[tuple[Any, ...]]:
    """The commands that replace the lookup with one made from ``notes`` (run in ``replay``'s
    MULTI, after the notes)."""
    yield ("DEL", keys.dupidx(ns))
    members = [m for nid, st in sorted(notes.items()) for m in _filed(nid, st, spec)]
    for i in range(0, len(members), per_call):
        yield ("ZADD", keys.dupidx(ns), *[x for m in members[i:i + per_call] for x in (0, m)])
    yield ("SET", keys.dupspec(ns), spec.tag)


@dataclass(frozen=True, slots=True)
class Found:
    """A lookup's answer: the spec tag the index holds (None: none recorded yet, i.e. nothing
    projected), the checkpoint it stands at, the notes filed under the probe's twin key,
    those filed under at least ``min_hits`` of its band keys with their term digests
    (``near_terms``, packed as ``dupsketch.terms_member`` packs them; b"" when the note has
    no terms member: filed before they were kept), and the log's entries after the
    checkpoint (``tail``: XRANGE's reply, for ``readmodel.decode_entries``), all read at one
    instant."""

    tag: str | None
    checkpoint: str
    twins: list[str]
    near: list[str]
    tail: list[Any]
    near_terms: list[bytes] = field(default_factory=list)


def lookup(r: Store, ns: str, pr: Probe, min_hits: int) -> Found:
    """The notes filed under ``pr``'s keys, with the checkpoint they stand at and the log's
    tail after it: one script (``lua/dup_lookup.lua``, atomic, read only) of
    ``1 + len(pr.bands)`` lex ranges that counts the band hits in Redis, so only the notes
    that pass come back (each with its terms member's digests), then one XRANGE."""
    tag, cp, twins, near, tail, near_terms = script(r, "dup_lookup")(
        keys=[keys.dupidx(ns), keys.dupspec(ns), keys.checkpoint(ns), keys.stream(ns)],
        args=[min_hits, pr.twin, TERMS_MARK, *pr.bands])
    return Found(tag=as_bytes(tag).decode() or None, checkpoint=as_bytes(cp).decode(),
                 twins=[as_bytes(x).decode() for x in twins],
                 near=[as_bytes(x).decode() for x in near], tail=list(tail or []),
                 near_terms=[as_bytes(x) for x in near_terms])


def members(r: Store, ns: str) -> list[bytes]:
    """Every member of the lookup (for checks and ``replay --verify``)."""
    return [as_bytes(m) for m in r.zrange(keys.dupidx(ns), 0, -1)]


def expected_members(notes: Mapping[str, NoteState], spec: DupSpec) -> list[bytes]:
    """The members a lookup made from ``notes`` holds, sorted as Redis keeps them."""
    return sorted(m for nid, st in notes.items() for m in _filed(nid, st, spec))


def lookup_diffs(r: Store, ns: str, cp: Position, notes: Mapping[str, NoteState],
                 spec: DupSpec) -> list[str]:
    """How the live lookup differs from one made from ``notes`` (the log folded up to the
    live checkpoint ``cp``), in words; empty when equal, or when the checkpoint moved since
    (nothing to compare then)."""
    p = r.pipeline(transaction=True)
    p.get(keys.checkpoint(ns))
    p.get(keys.dupspec(ns))
    p.zrange(keys.dupidx(ns), 0, -1)
    cp_now, tag, live = p.execute()
    if parse_pos(as_bytes(cp_now) if cp_now else None) != cp:
        return []
    out: list[str] = []
    want = expected_members(notes, spec)
    if notes and (as_bytes(tag).decode() if tag else None) != spec.tag:
        out.append(f"near-duplicate lookup: made with {tag!r}, this config makes "
                   f"{spec.tag!r} (replay rebuilds it)")
        return out
    have = {as_bytes(m) for m in live}
    wrong = sorted(note_ids_in([m for m in set(want) ^ have]))
    if wrong:
        out.append(f"near-duplicate lookup: notes {wrong[:10]} filed differently from the "
                   f"log's ({len(wrong)} in all)")
    return out


def note_ids_in(ms: Sequence[bytes]) -> set[str]:
    """The note ids some members file (a terms member: the id up to its NUL)."""
    return {m[DIGEST_BYTES:].split(b"\x00", 1)[0].decode() for m in ms}
