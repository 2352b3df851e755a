"""The packed notes as one context a model reads: each note under a header that names it and
its date, and the header's cost counted in the note's cost, so what is rendered never exceeds
the budget. Pure: the notes come in; no clock, no I/O.

A note renders as ``[<note_id> | <YYYY-MM-DD>]`` and a newline, then its text (a passage of a
long note as ``[<note_id> | <YYYY-MM-DD> | passage <i>/<n>]``,
``projections.ranking.passages``); notes are separated by a blank line. The id lets an agent
report ``used`` for the notes it used; the date (UTC, of its creation) answers "when did ..."
questions. The cost of a note in a rendered context is its ``tokens`` plus ``header_tokens``
of its id (and a passage's place): the header, its newline and the
separator, in the default estimate (``ceil(utf8 bytes / 4)``). So with default token counts,
``ceil(len(context.encode()) / 4)`` is at most the sum of the costs, which is at most the
budget (``ceil`` of a sum is at most the sum of the ``ceil``s).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

import numpy as np
import numpy.typing as npt

from hivemind_memory.projections.ranking.passages import Passage

HEADER_FIXED_BYTES = len("[ | YYYY-MM-DD]\n") + len("\n\n")
"""Bytes of a header beyond its note id, with its newline and the blank line before the next
note (note ids are ASCII: one byte a character)."""
SEPARATOR = "\n\n"


def header(note_id: str, created_at: datetime, place: str = "") -> str:
    """The line above a note's text (``place``: a passage's, ``place_label``)."""
    return f"[{note_id} | {created_at.date().isoformat()}{place}]"


def place_label(p: Passage) -> str:
    """What a passage's header adds after the date: `` | passage 3/10`` (counted from 1;
    ASCII)."""
    return f" | passage {p.index + 1}/{p.count}"


def header_tokens(note_ids: Sequence[str],
                  places: Sequence[str] | None = None) -> npt.NDArray[np.int64]:
    """What each note's header adds to its cost (the default token estimate of its bytes);
    ``places``: each one's ``place_label`` (a passage's place, or "")."""
    n = np.fromiter(map(len, note_ids), np.int64, len(note_ids)) + HEADER_FIXED_BYTES
    if places is not None:
        n = n + np.fromiter(map(len, places), np.int64, len(places))
    return (n + 3) // 4


def render(notes: Iterable[tuple[str, datetime, str]],
           places: Iterable[Passage | None] | None = None) -> str:
    """``(note_id, created_at, text)`` in context order, as the context; ``places``: each
    one's passage (None: a whole note)."""
    if places is None:
        return SEPARATOR.join(f"{header(nid, at)}\n{text}" for nid, at, text in notes)
    return SEPARATOR.join(
        f"{header(nid, at, '' if p is None else place_label(p))}\n{text}"
        for (nid, at, text), p in zip(notes, places, strict=True))

