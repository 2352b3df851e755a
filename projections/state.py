"""The projected state of one note, and the tier rule."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

import msgspec

from hivemind_memory.events.schema import Kind, Scope
from hivemind_memory.projections.ranking.config import RankingConfig

Tier = Literal["longterm", "short", "scratch"]


def tier_of(uses: int, kind: str, cfg: RankingConfig) -> Tier:
    """``longterm`` once used ``cfg.longterm_uses`` times (earned), else by kind."""
    if uses >= cfg.longterm_uses:
        return "longterm"
    return "scratch" if kind == "scratch" else "short"


class NoteState(msgspec.Struct, frozen=True, forbid_unknown_fields=False, gc=False):
    """Everything a query needs about one note, folded from its events (facts only: the tier
    depends on the ranking config and is computed where it is used). Unknown fields are ignored
    on decode, so read models written by older versions (which stored a tier) still load.
    ``gc=False``: only strings, numbers, datetimes and a list of floats inside, never part of
    a reference cycle, so the garbage collector need not track the many a projection makes."""

    note_id: str
    agent: str
    scope: Scope
    kind: Kind
    text: str
    tokens: int
    created_at: datetime
    uses: int = 0
    last_used_at: datetime | None = None
    forgotten: bool = False
    embedding: list[float] | None = None
    # Appended by the lifecycle events (defaults: read models written before them load).
    revised_at: datetime | None = None
    """When the text last changed (``note.revised``); None: never revised."""
    version: int = 1
    """1 for the created text, +1 per applied ``note.revised``."""
    superseded_by: str | None = None
    """The note that superseded this one (it leaves future answers); None: not superseded."""
    supersedes: list[str] | None = None
    """The notes this one superseded when it was created."""
    erased: bool = False
    """``note.erased`` applied: text empty, no embedding, never a candidate again."""
    redacted: bool = False
    """The content was removed from the log by an erasure (a replay of a rewritten log sees
    the note before its ``note.erased`` this way: folded as usual, never a candidate)."""
    metadata: dict[str, str | int | float | bool] | None = None
    """The note's metadata (``note.created``, replaced by a ``note.revised`` that gives it;
    dropped by an erasure). None: none."""
    expires_at: datetime | None = None
    """The note is in no answer as of this instant or later (None: only the config's
    ``default_ttl_days`` may expire it)."""

    @property
    def active(self) -> bool:
        """Whether the note may be a candidate at all: not forgotten, superseded or erased,
        and its content not redacted."""
        return not (self.forgotten or self.erased or self.redacted
                    or self.superseded_by is not None)


class NoteRow(msgspec.Struct, frozen=True):
    """One line of ``hivemind notes --json`` (the contract's fields, then the note's text)."""

    note_id: str
    agent: str
    scope: str
    kind: str
    tokens: int
    created_at: datetime
    uses: int
    last_used_at: datetime | None
    tier: str
    forgotten: bool
    text: str = ""
    """The note's text (an auditor reads what was shown without another lookup)."""
    version: int = 1
    """1 for the created text, +1 per revision."""
    revised_at: datetime | None = None
    """When the current text was written by a revision (None: never revised)."""
    superseded_by: str | None = None
    """The note that superseded this one (it is then in no answer)."""
    erased: bool = False
    """Erased: its content is gone everywhere (``text`` is empty) and it is in no answer."""
    metadata: dict[str, str | int | float | bool] | None = None
    """The note's metadata (None: none)."""
    expires_at: datetime | None = None
    """When the note leaves every answer (its own ``expires_at``; None: not set)."""


def note_row(n: NoteState, cfg: RankingConfig) -> NoteRow:
    """The listing row of a note, its tier under ``cfg``."""
    return NoteRow(
        note_id=n.note_id, agent=n.agent, scope=n.scope, kind=n.kind, tokens=n.tokens,
        created_at=n.created_at, uses=n.uses, last_used_at=n.last_used_at,
        tier=tier_of(n.uses, n.kind, cfg),
        forgotten=n.forgotten, text=n.text, version=n.version, revised_at=n.revised_at,
        superseded_by=n.superseded_by, erased=n.erased, metadata=n.metadata,
        expires_at=n.expires_at,
    )


_pack = msgspec.msgpack.Encoder().encode
_unpack = msgspec.msgpack.Decoder(NoteState).decode


def pack_note(n: NoteState) -> bytes:
    """Compact encoding for the Redis read model."""
    return _pack(n)


def unpack_note(data: bytes) -> NoteState:
    """Inverse of ``pack_note``."""
    return _unpack(data)
