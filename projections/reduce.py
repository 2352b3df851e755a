"""Pure reducers: (note state, event) -> note state, and the batch fold built on them.

No clock, no Redis, no ranking config: the fold records facts (uses, times, flags); tiers are
computed where they are used, with the config of that use. The same events in the same stream
order always fold to the same state;
a repeated ``event_id`` is applied once; events that cannot apply become dead letters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import msgspec

from hivemind_memory.events.schema import (
    Event,
    NoteCreated,
    NoteErased,
    NoteForgotten,
    NoteRevised,
    NoteUsed,
    event_type,
    token_estimate,
)
from hivemind_memory.projections.state import NoteState


@dataclass(frozen=True, slots=True)
class Rejected:
    """Why an event changed nothing: ``"<code>: <explanation>"``."""

    reason: str

    @property
    def code(self) -> str:
        """The machine-readable part (``note_id_exists``, ``unknown_note``, ``forgotten_note``,
        ``not_visible``, ``not_allowed``, ``erased_note``, ``superseded_note``,
        ``duplicate_supersedes``, ``version_conflict``)."""
        return self.reason.partition(":")[0]


def apply_event(note: NoteState | None, ev: Event) -> NoteState | Rejected:
    """Apply one event to the current state of its note (None: never seen). A
    ``note.created`` that supersedes other notes also changes them: see ``apply_write``."""
    if isinstance(ev, NoteCreated):
        if note is not None and note.erased:
            return Rejected("erased_note: the note was erased (ids are never reused)")
        if note is not None:
            return Rejected("note_id_exists: ids are never reused, even after forgetting")
        return NoteState(
            note_id=ev.note_id, agent=ev.agent, scope=ev.scope, kind=ev.kind, text=ev.text,
            tokens=ev.tokens if ev.tokens is not None else token_estimate(ev.text),
            created_at=ev.at, embedding=ev.embedding,
            supersedes=list(ev.supersedes) if ev.supersedes else None,
            redacted=ev.redacted is not None, metadata=ev.metadata or None,
            expires_at=ev.expires_at,
        )
    if note is None:
        return Rejected("unknown_note: the namespace has never seen this note_id")
    if note.erased:
        return Rejected("erased_note: the note was erased")
    admin = isinstance(ev, NoteForgotten | NoteRevised | NoteErased) and ev.as_admin
    if isinstance(ev, NoteErased):
        if not admin:
            return Rejected("not_allowed: only an admin may erase a note")
        return msgspec.structs.replace(note, text="", embedding=None, erased=True,
                                       redacted=True, metadata=None)
    if note.forgotten:
        return Rejected("forgotten_note: the note was forgotten")
    if note.scope == "private" and ev.agent != note.agent and not admin:
        return Rejected("not_visible: a private note of another agent")
    if isinstance(ev, NoteUsed):
        last = ev.at if note.last_used_at is None else max(note.last_used_at, ev.at)
        return msgspec.structs.replace(note, uses=note.uses + 1, last_used_at=last)
    if ev.agent != note.agent and not admin:
        verb = "forget" if isinstance(ev, NoteForgotten) else "revise"
        return Rejected(f"not_allowed: only its author or an admin may {verb} a note")
    if isinstance(ev, NoteForgotten):
        return msgspec.structs.replace(note, forgotten=True)
    if isinstance(ev, NoteRevised):
        if ev.expected_version is not None and ev.expected_version != note.version:
            return Rejected(f"version_conflict: the note is at version {note.version}, the "
                            f"revision expected {ev.expected_version}")
        return msgspec.structs.replace(
            note, text=ev.text, embedding=ev.embedding,
            tokens=ev.tokens if ev.tokens is not None else (
                token_estimate(ev.text) if ev.text else note.tokens),
            kind=note.kind if ev.kind is None else ev.kind,
            version=note.version + 1, revised_at=ev.at,
            redacted=note.redacted or ev.redacted is not None,
            metadata=note.metadata if ev.metadata is None else (ev.metadata or None))
    raise TypeError(f"unhandled event type {type(ev).__name__}")  # pragma: no cover


def supersede(target: NoteState | None, ev: NoteCreated) -> NoteState | Rejected:
    """The state of a note that ``ev`` (a new note) supersedes: it leaves future answers.
    Only a note the new note's author may forget can be superseded (its author, since a
    ``note.created`` carries no admin right), and only once."""
    if target is None:
        return Rejected("unknown_note: a superseded note the namespace has never seen")
    if target.erased:
        return Rejected("erased_note: a superseded note was erased")
    if target.forgotten:
        return Rejected("forgotten_note: a superseded note was forgotten")
    if target.scope == "private" and ev.agent != target.agent:
        return Rejected("not_visible: a superseded note is a private note of another agent")
    if ev.agent != target.agent:
        return Rejected("not_allowed: only its author may supersede a note")
    if target.superseded_by is not None:
        return Rejected(f"superseded_note: {target.note_id} was already superseded by "
                        f"{target.superseded_by}")
    return msgspec.structs.replace(target, superseded_by=ev.note_id)


def apply_write(get: Callable[[str], NoteState | None], ev: Event
                ) -> dict[str, NoteState] | Rejected:
    """Apply one event, with every note it changes: ``{note_id: new state}``, or why it
    changes nothing. ``get`` gives the current state of a note (None: never seen). A note
    that supersedes others starts with their uses (they carry over: the fact lives on in the
    new text) and the latest of their last uses."""
    res = apply_event(get(ev.note_id), ev)
    if isinstance(res, Rejected):
        return res
    if type(ev) is not NoteCreated or not ev.supersedes:
        return {ev.note_id: res}
    out: dict[str, NoteState] = {}
    uses = 0
    last = None
    for sid in ev.supersedes:
        if sid == ev.note_id or sid in out:
            return Rejected(f"duplicate_supersedes: {sid} is named twice or is the note itself")
        old = supersede(get(sid), ev)
        if isinstance(old, Rejected):
            return old
        out[sid] = old
        uses += old.uses
        if old.last_used_at is not None and (last is None or old.last_used_at > last):
            last = old.last_used_at
    out[ev.note_id] = msgspec.structs.replace(res, uses=uses, last_used_at=last)
    return out


def touched_by(ev: Event) -> tuple[str, ...]:
    """Every note id whose state ``ev`` may change (its own, and those it supersedes)."""
    if type(ev) is NoteCreated and ev.supersedes:
        return (ev.note_id, *ev.supersedes)
    return (ev.note_id,)


@dataclass(frozen=True, slots=True)
class Undecodable:
    """A stream entry this version cannot decode (kept as raw bytes for the dead letters)."""

    raw: bytes
    reason: str


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """An entry that changed nothing, with the reason and the original payload."""

    entry_id: str
    reason: str
    raw: bytes


@dataclass(slots=True)
class BatchResult:
    """What one batch changed: the new states of touched notes, ids now seen, dead letters."""

    notes: dict[str, NoteState] = field(default_factory=dict)
    seen: list[str] = field(default_factory=list)
    dead: list[DeadLetter] = field(default_factory=list)
    applied: int = 0
    duplicates: int = 0


def fold_batch(
    notes: Mapping[str, NoteState],
    already_seen: set[str] | frozenset[str],
    entries: Iterable[tuple[str, Event | Undecodable, bytes]],
) -> BatchResult:
    """Fold stream entries ``(entry_id, event, raw)`` in order onto the given note states.

    ``notes`` must hold the current state of every note the batch touches (absent: unknown),
    ``already_seen`` every event_id of the batch that an earlier batch applied.
    """
    out = BatchResult()
    out.applied, out.duplicates = _fold(out.notes, notes, set(), already_seen, out.seen,
                                        out.dead, entries)
    return out


def _fold(touched: dict[str, NoteState], notes: Mapping[str, NoteState], seen_now: set[str],
          already_seen: set[str] | frozenset[str], seen_list: list[str], dead: list[DeadLetter],
          entries: Iterable[tuple[str, Event | Undecodable, bytes]]) -> tuple[int, int]:
    """The fold itself: new states into ``touched`` (read first, then ``notes``), applied
    event ids into ``seen_now`` and ``seen_list``; returns (applied, duplicates).

    Every event of a projection passes here once, so the common case (a use of a live note)
    is handled inline; it does exactly what ``apply_event`` does for it.
    """
    applied = duplicates = 0
    replace = msgspec.structs.replace

    def state_of(k: str) -> NoteState | None:
        return touched[k] if k in touched else notes.get(k)
    for entry_id, ev, raw in entries:
        if isinstance(ev, Undecodable):
            dead.append(DeadLetter(entry_id, ev.reason, ev.raw))
            continue
        eid = ev.event_id
        if eid in seen_now or eid in already_seen:
            duplicates += 1
            continue
        seen_now.add(eid)
        seen_list.append(eid)
        nid = ev.note_id
        current = touched.get(nid)
        if current is None:
            current = notes.get(nid)
        if type(ev) is NoteUsed and current is not None and not current.forgotten and \
                not current.erased and \
                (current.scope != "private" or current.agent == ev.agent):
            last = current.last_used_at
            at = ev.at
            touched[nid] = replace(current, uses=current.uses + 1,
                                   last_used_at=at if last is None or at > last else last)
            applied += 1
            continue
        res = apply_write(state_of, ev)
        if isinstance(res, Rejected):
            dead.append(DeadLetter(entry_id, f"{event_type(ev)}: {res.reason}", raw))
        else:
            touched.update(res)
            applied += 1
    return applied, duplicates


@dataclass(frozen=True, slots=True)
class CheckedWrite:
    """What a write would do, decided before it is appended: the indexes of its events that
    would apply, of those already in the log (applied once: a retry), and the first refusal
    (index, why) if any would never apply."""

    fresh: list[int]
    logged: list[int]
    refused: tuple[int, Rejected] | None


def check_write(notes: Mapping[str, NoteState], logged: set[str] | frozenset[str],
                events: Sequence[Event]) -> CheckedWrite:
    """Fold ``events`` in order onto ``notes`` (the current state of every note they touch,
    ``touched_by`` each, log tail included) exactly as the projector will, without writing
    anything. An event whose ``event_id`` is in ``logged`` (or earlier in the write) is a
    duplicate."""
    state = dict(notes)
    seen: set[str] = set()
    fresh: list[int] = []
    dup: list[int] = []
    for i, ev in enumerate(events):
        if ev.event_id in logged or ev.event_id in seen:
            dup.append(i)
            continue
        seen.add(ev.event_id)
        res = apply_write(state.get, ev)
        if isinstance(res, Rejected):
            return CheckedWrite(fresh, dup, (i, res))
        state.update(res)
        fresh.append(i)
    return CheckedWrite(fresh, dup, None)


_NONE_SEEN: frozenset[str] = frozenset()


@dataclass(slots=True)
class Projection:
    """A whole namespace folded in memory (replay, --as-of, the reference for tests)."""

    notes: dict[str, NoteState] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)
    dead: list[DeadLetter] = field(default_factory=list)

    def feed(self, entries: Iterable[tuple[str, Event | Undecodable, bytes]]) -> BatchResult:
        """Fold more entries onto this projection (mutates it) and return the batch delta."""
        res = fold_batch(self.notes, self.seen, entries)
        self.notes.update(res.notes)
        self.seen.update(res.seen)
        self.dead.extend(res.dead)
        return res

    def absorb(self, entries: Iterable[tuple[str, Event | Undecodable, bytes]]) -> int:
        """``feed`` folding straight into this projection, keeping no delta (a replay's fold
        of a whole log); returns the number of duplicates."""
        _, duplicates = _fold(self.notes, self.notes, self.seen, _NONE_SEEN, [], self.dead,
                              entries)
        return duplicates
