"""Context order of packed notes: ``edges`` (strongest at the ends), ``score`` or time."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Literal, Protocol, TypeVar


class Orderable(Protocol):
    """Anything with a score, an id and a creation time (e.g. ``ScoredNote``)."""

    @property
    def score(self) -> float: ...
    @property
    def note_id(self) -> str: ...
    @property
    def created_at(self) -> datetime: ...


T = TypeVar("T", bound=Orderable)


def by_score(scored: Iterable[T]) -> list[T]:
    """Score descending, then note id ascending."""
    return sorted(scored, key=lambda s: (-s.score, s.note_id))


def order(scored: Iterable[T], how: Literal["edges", "score", "chronological"]) -> list[T]:
    """The notes in context order.

    * ``score``: score descending, then note id.
    * ``edges``: strongest first, second strongest last, third second, fourth second to last,
      ... so the weakest sit in the middle (models attend best to the ends of a context).
    * ``chronological``: oldest first, then note id.
    """
    if how == "score":
        return by_score(scored)
    if how == "edges":
        ranked = by_score(scored)
        return ranked[0::2] + ranked[1::2][::-1]
    if how == "chronological":
        return sorted(scored, key=lambda s: (s.created_at, s.note_id))
    raise ValueError(f"unknown order {how!r}; expected 'edges', 'score' or 'chronological'")
