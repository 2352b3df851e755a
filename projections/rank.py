"""The ranking pipeline: filter, score, pack, order. Pure: ``now`` and the config are arguments.

Floats in the output are rounded to 6 decimals so the JSON is byte-identical across machines;
packing uses the unrounded scores. Ordering and the candidate list use the rounded scores (then
note id), so what a reader sees is consistent with the order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import NamedTuple

import msgspec

from hivemind_memory.projections.config import RankingConfig
from hivemind_memory.projections.ordering import by_score, order
from hivemind_memory.projections.packing import Item, Method, pack
from hivemind_memory.projections.recency import age_days, recency
from hivemind_memory.projections.state import NoteState, Tier, tier_of

DECIMALS = 6
"""Output floats are rounded to this many decimals."""
PRINTS_AS_ZERO = 0.5 * 10.0**-DECIMALS
"""A relevance at or below this rounds to 0.0 at ``DECIMALS`` (so it is no candidate)."""


class NoteSignals(msgspec.Struct, frozen=True):
    """A packed note as a result lists it: every signal that ranked it (the contract's
    ``notes`` fields, in order)."""

    note_id: str
    text: str
    tokens: int
    cost: int
    score: float
    relevance: float
    recency: float
    tier: Tier
    uses: int
    age_days: float
    created_at: datetime

    def signals(self) -> NoteSignals:
        """Just the contract's ``notes`` fields (drops ``chosen`` from a candidate)."""
        return NoteSignals(self.note_id, self.text, self.tokens, self.cost, self.score,
                           self.relevance, self.recency, self.tier, self.uses, self.age_days,
                           self.created_at)


class ScoredNote(NoteSignals, frozen=True):
    """A candidate: the signals plus whether the packer chose it (``candidates`` fields)."""

    chosen: bool


class RankResult(msgspec.Struct, frozen=True):
    """The packed notes in context order, and every candidate with its signals."""

    used: int
    method: Method
    upper_bound: float
    notes: list[ScoredNote]
    candidates: list[ScoredNote]


def visible(note: NoteState, agent: str) -> bool:
    """May ``agent`` retrieve ``note``? Never if forgotten; private notes only for their agent."""
    if note.forgotten:
        return False
    return note.scope != "private" or note.agent == agent


class Candidate(NamedTuple):
    """A candidate before rounding: its note and every signal, unrounded."""

    note: NoteState
    relevance: float
    recency: float
    score: float
    tier: Tier
    age_days: float


def _scored(c: Candidate, cost: int, chosen: bool) -> ScoredNote:
    n, rel, rec, score, tier, age = c
    return ScoredNote(
        note_id=n.note_id,
        text=n.text,
        tokens=n.tokens,
        cost=cost,
        score=round(score, DECIMALS),
        relevance=round(rel, DECIMALS),
        recency=round(rec, DECIMALS),
        tier=tier,
        uses=n.uses,
        age_days=round(age, DECIMALS),
        created_at=n.created_at,
        chosen=chosen,
    )


def rank(
    notes: Iterable[NoteState],
    relevance: Mapping[str, float],
    *,
    agent: str,
    now: datetime,
    budget: int,
    cfg: RankingConfig,
    explain: bool = True,
) -> RankResult:
    """The notes that best fill ``budget`` tokens for ``agent`` at ``now``.

    ``relevance`` maps note id -> relevance in [0, 1] (missing = 0). A note is a candidate when
    it is visible to ``agent`` and its relevance is > 0 and >= ``cfg.min_relevance``; "> 0" is
    judged on the relevance as printed (6 decimals), so no candidate ever shows relevance 0.
    score = relevance * recency(tier, age); cost = tokens + ``cfg.per_note_overhead_tokens``.
    ``explain=False`` leaves ``candidates`` empty (cheaper when nobody reads it).
    """
    overhead = cfg.per_note_overhead_tokens
    min_rel = cfg.min_relevance
    get = relevance.get
    raw: list[Candidate] = []
    for note in notes:
        rel = get(note.note_id, 0.0)
        if rel <= PRINTS_AS_ZERO or rel < min_rel or not visible(note, agent):
            continue
        tier = tier_of(note.uses, note.kind, cfg)
        age = age_days(note.created_at, now)
        rec = recency(tier, age, cfg)
        raw.append(Candidate(note, rel, rec, rel * rec, tier, age))
    packed = pack(
        (Item(c.note.note_id, c.note.tokens + overhead, c.score) for c in raw), budget,
        cfg.exact_max_cells,
    )
    chosen = set(packed.chosen)
    picked = [_scored(c, c.note.tokens + overhead, True) for c in raw
              if c.note.note_id in chosen]
    candidates: list[ScoredNote] = []
    if explain:
        candidates = by_score(
            _scored(c, c.note.tokens + overhead, c.note.note_id in chosen) for c in raw
        )
    return RankResult(
        used=packed.total_cost,
        method=packed.method,
        upper_bound=round(packed.upper_bound, DECIMALS),
        notes=order(picked, cfg.order),
        candidates=candidates,
    )
