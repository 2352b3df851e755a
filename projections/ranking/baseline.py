"""The seed's rule, kept to compare with: "5 % a day" for every note, forever, and a top-down
fill that stops at the first note that does not fit. ``hivemind demo``, ``hivemind audit
explain`` and the browser explorer run it on the same candidates (the same relevance) as the
real ranking, so only the recency curve and the fill differ. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hivemind_memory.projections.ranking.curves import DAILY_DECAY
from hivemind_memory.projections.ranking.rank_result import ScoredNote


@dataclass(frozen=True, slots=True)
class Baseline:
    """What "5 % a day" and a top-down fill return from the same candidates."""

    notes: list[ScoredNote]
    """Chosen, in the order the fill took them (its rank order)."""
    ranked: list[ScoredNote]
    """Every candidate in the baseline's rank order."""
    used: int
    stopped_at: ScoredNote | None
    """The first note that did not fit (the fill stops there), if any."""


def naive_score(c: ScoredNote) -> float:
    """The seed's score: relevance * 0.95 ** age in days (no tiers, no floor)."""
    return float(c.relevance * DAILY_DECAY ** c.age_days)


def five_percent_fill(candidates: Sequence[ScoredNote], budget: int) -> Baseline:
    """Sort by the seed's score, take notes top-down until the next one does not fit."""
    ranked = sorted(candidates, key=lambda c: (-naive_score(c), c.note_id))
    chosen: list[ScoredNote] = []
    used = 0
    for c in ranked:
        if used + c.cost > budget:
            return Baseline(chosen, ranked, used, c)
        chosen.append(c)
        used += c.cost
    return Baseline(chosen, ranked, used, None)


def value(notes: Sequence[ScoredNote]) -> float:
    """Sum of scores (relevance x recency as hivemind computes them)."""
    return sum(n.score for n in notes)


__all__ = ["DAILY_DECAY", "Baseline", "five_percent_fill", "naive_score", "value"]
