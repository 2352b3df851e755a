"""Context order of packed notes: ``edges`` (strongest at the ends), ``score`` or time."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from operator import attrgetter
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


_ID = attrgetter("note_id")
_SCORE = attrgetter("score")
_CREATED = attrgetter("created_at")


def by_score(scored: Iterable[T]) -> list[T]:
    """Score descending, then note id ascending (two stable sorts with C key functions:
    ``reverse`` keeps equal scores in note id order; no Python call per note)."""
    return sorted(sorted(scored, key=_ID), key=_SCORE, reverse=True)


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
        return sorted(sorted(scored, key=_ID), key=_CREATED)
    raise ValueError(f"unknown order {how!r}; expected 'edges', 'score' or 'chronological'")
