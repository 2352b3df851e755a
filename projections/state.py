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


def note_row(n: NoteState, cfg: RankingConfig) -> NoteRow:
    """The listing row of a note, its tier under ``cfg``."""
    return NoteRow(
        note_id=n.note_id, agent=n.agent, scope=n.scope, kind=n.kind, tokens=n.tokens,
        created_at=n.created_at, uses=n.uses, last_used_at=n.last_used_at,
        tier=tier_of(n.uses, n.kind, cfg),
        forgotten=n.forgotten, text=n.text,
    )


_pack = msgspec.msgpack.Encoder().encode
_unpack = msgspec.msgpack.Decoder(NoteState).decode


def pack_note(n: NoteState) -> bytes:
    """Compact encoding for the Redis read model."""
    return _pack(n)


def unpack_note(data: bytes) -> NoteState:
    """Inverse of ``pack_note``."""
    return _unpack(data)
