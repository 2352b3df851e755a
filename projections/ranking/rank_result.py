"""What a ranking returns: the result structs (``Why`` and its rows too: what
``projections.ranking.why`` fills) and the rounding rule. The ranking itself is
``projections.ranking.ranker.rank_index`` (pure: ``now`` and the config are arguments); the
per-note pipeline it replaced lives on in ``tests/support/reference.py`` as the reference the tests
compare it with.

Floats in the output are rounded to 6 decimals so the JSON is byte-identical across machines;
packing uses the unrounded scores. Ordering and the candidate list use the rounded scores (then
note id), so what a reader sees is consistent with the order.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

import msgspec

from hivemind_memory.projections.state import Tier


class Passage(msgspec.Struct, frozen=True, omit_defaults=True):
    """Where a packed passage sits in its note: ``index`` (from 0) of ``count`` passages,
    ``start`` and ``end`` the character offsets of its text in the note's text; ``rank`` its
    place among the note's passages that match, by their match (``RankingConfig.
    passage_repeat``)."""

    index: int
    count: int
    start: int
    end: int
    rank: int = 0
    """0 for the note's best passage (omitted); ``k`` for its ``k``-th next, whose score was
    multiplied by ``passage_repeat ** k`` (set only while ``passage_repeat`` is under 1)."""


Method = Literal["exact", "greedy+swap"]
"""How a packing was found (``projections.ranking.packing``)."""

DECIMALS = 6
"""Output floats are rounded to this many decimals."""
PRINTS_AS_ZERO = 0.5 * 10.0**-DECIMALS
"""A relevance at or below this rounds to 0.0 at ``DECIMALS`` (so it is no candidate)."""


class LeftOut(msgspec.Struct, frozen=True, array_like=True):
    """A note that matched but was not shown (encoded as a JSON array: 6 values)."""

    note_id: str
    reason: str
    relevance: float
    recency: float
    score: float
    cost: int


class Shown(msgspec.Struct, frozen=True, array_like=True):
    """The signals of a shown note (parallel to ``QueryServed.chosen``)."""

    relevance: float
    recency: float
    cost: int


class Why(msgspec.Struct, frozen=True, omit_defaults=True):
    """What a served query's audit entry keeps about why: the shown notes' signals, the
    ``limit`` strongest left-out notes and how many were left out per reason."""

    limit: int
    left_out: list[LeftOut] = []
    counts: dict[str, int] = {}
    shown: list[Shown] = []


class NoteSignals(msgspec.Struct, frozen=True, omit_defaults=True):
    """A packed note as a result lists it: every signal that ranked it (the contract's
    ``notes`` fields, in order), then its ``metadata`` when it has some, ``stands_for``,
    ``updates`` and ``passage`` when set."""

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
    metadata: dict[str, str | int | float | bool] | None = None
    """The note's metadata (omitted when it has none)."""
    stands_for: list[str] = []
    """Near-identical notes this one stands for (``RankingConfig.near_identical``): they are
    not packed beside it."""
    updates: list[str] = []
    """Older versions of the same fact this newer note won over (``RankingConfig.updates``):
    its score is at least theirs."""
    passage: Passage | None = None
    """A passage of a long note (``RankingConfig.passage_tokens``): its place in the note;
    ``text`` and ``tokens`` are the passage's, the rest the note's (``used`` of ``note_id``
    counts for the note). Omitted for a whole note."""

    def signals(self) -> NoteSignals:
        """Just the contract's ``notes`` fields (drops ``chosen`` from a candidate)."""
        return NoteSignals(self.note_id, self.text, self.tokens, self.cost, self.score,
                           self.relevance, self.recency, self.tier, self.uses, self.age_days,
                           self.created_at, self.metadata, self.stands_for, self.updates,
                           self.passage)


class ScoredNote(NoteSignals, frozen=True, kw_only=True):
    """A candidate: the signals plus whether the packer chose it (``candidates`` fields)."""

    chosen: bool | None = None
    """Whether the packer chose it (always set; None only as the default that lets it
    follow ``metadata``)."""


class TimeWindowShown(msgspec.Struct, frozen=True):
    """A time window the question named (``projections.ranking.timewords``), as ``explain``
    shows it: the words, the window (the named days widened by the tolerance), the logit
    its notes gained (``calibration.time_window_weight``; 0: the signal is off) and the
    candidates written in it."""

    words: str
    start: datetime
    end: datetime
    gain: float
    notes: list[str]


class RankResult(msgspec.Struct, frozen=True):
    """The packed notes in context order (their signals, as a result lists them), and every
    candidate with its signals and whether it was packed."""

    used: int
    method: Method
    upper_bound: float
    notes: list[NoteSignals]
    candidates: list[ScoredNote]
    why: Why | None = None
    """The strongest notes left out and why (only when asked for: ``rank_index(why_limit)``)."""
    nothing_relevant: bool = False
    """Calibrated relevance: no note was likely enough to be needed (``calibration.floor``),
    so the context is empty on purpose."""
    unknown_words: list[str] = msgspec.field(default_factory=list)
    """Calibrated relevance with ``unknown_word_factor`` under 1: the query's words that no
    note the asker may see contains (``Columns.unknown_words``), which lowered the
    probability of the notes that match only the rest of the query."""
    time_windows: list[TimeWindowShown] = msgspec.field(default_factory=list)
    """The time windows the question named, with ``explain`` (``TimeWindowShown``)."""
