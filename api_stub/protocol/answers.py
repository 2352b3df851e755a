"""The answers of ``remember`` and ``recall``, one definition each for every door: the HTTP
API encodes them (and its OpenAPI document, hence the TypeScript types, is generated from
them), the SDK returns them (``Memory.recall``'s notes; its ``Remembered`` id wraps the wire
one), and the MCP tools' pydantic models are built from them (``server.mcp``).

A door that shows part of a shape derives its struct with ``projection``: the HTTP
``/recall`` answer names a note's id, date, score and tokens (plus ``cost``, the note with its
header in the rendered context, an answer of ``/recall`` only), without its text.

No class docstrings on the structs of the HTTP API: msgspec would put them into the OpenAPI
document as descriptions (their notes are comments here).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from hivemind_memory.projections.ranking.rank_result import Passage


# One note of a recall, in context order (``created_at``: RFC 3339, UTC; ``tier``:
# ``longterm``, ``short`` or ``scratch``; ``metadata``: empty when the note has none;
# ``passage``: set when only a passage of a long note was packed, its place in the note, and
# ``text`` and ``tokens`` are the passage's: ``projections.ranking.passages``; ``stands_for``:
# the near-identical notes it stands for, not packed beside it; ``updates``: the older
# versions of the same fact it won over as the newer: ``projections.ranking.updates``).
class RecalledNote(msgspec.Struct, frozen=True):
    note_id: str
    text: str
    score: float
    tokens: int
    created_at: str = ""
    tier: str = ""
    uses: int = 0
    metadata: dict[str, Any] = {}
    passage: Passage | None = None
    stands_for: list[str] = []
    updates: list[str] = []


# A note that says nearly what a remembered note says: its id and the word overlap of the two
# texts (0..1, ``projections.ranking.similarity``; the config's ``duplicate_threshold`` is the
# bar).
class Duplicate(msgspec.Struct, frozen=True):
    note_id: str
    overlap: float


# What ``remember`` answers (``POST .../remember``; the SDK's ``Remembered`` wraps it).
class Remembered(msgspec.Struct, omit_defaults=True):
    note_id: str
    """The new note's id; the twin's when ``duplicate_of`` is set."""
    event_id: str
    duplicates_checked: bool
    """Whether near-duplicates were looked for (false: ``duplicates: "ignore"``, or the check
    could not run and ``duplicates_unchecked`` says why)."""
    duplicates: list[Duplicate] | None
    """Near-duplicates found before writing, most similar first; null: not checked."""
    duplicate_of: str | None = None
    """The writer's own active note with the same normalised text: nothing was written."""
    duplicates_unchecked: str | None = None
    """Why the check could not run (the note was written unchecked)."""
    superseded: list[str] = []
    """The notes the new note superseded."""


def projection(name: str, base: type[msgspec.Struct], fields: Sequence[str],
               extra: Sequence[tuple[str, Any]] = ()) -> type[msgspec.Struct]:
    """A struct named ``name`` with ``base``'s ``fields`` (their types, in this order, every
    one required) and then ``extra`` ``(name, type)`` fields: what one door shows of a shape.
    A field ``base`` does not have is an error."""
    types = {f.name: f.type for f in msgspec.structs.fields(base)}
    missing = [f for f in fields if f not in types]
    if missing:
        raise TypeError(f"{base.__name__} has no field {', '.join(missing)}")
    return msgspec.defstruct(name, [(f, types[f]) for f in fields] + list(extra),
                             module=__name__)


RECALLED_HTTP = ("note_id", "created_at", "score", "tokens", "passage", "stands_for", "updates")
"""What ``POST .../recall`` shows of a ``RecalledNote`` (and its ``cost``)."""
RECALLED_MCP = ("note_id", "created_at", "score", "tokens", "tier", "metadata", "passage",
                "stands_for", "updates")
"""What the MCP ``recall`` tool shows of a ``RecalledNote`` (``metadata`` null when empty)."""
