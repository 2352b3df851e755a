"""Updated facts by the query's words (issue 35, on by default): two candidates written
days apart, the newer holding every query word the older holds and those words carrying
most of the query's weight, are an older and a newer version of a fact; the newer takes the
older's score. Each condition on both sides of its boundary, through the query path."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

from hivemind_memory.projections.ranking.config import (
    DEFAULT,
    UPDATES_ON,
    with_overrides,
)
from hivemind_memory.projections.ranking.updates import US_PER_DAY, QueryWords, adjust
from tests.support.ranked import note as aged_note
from tests.support.ranked import ranked

OFF = with_overrides(DEFAULT, {"updates": {"margin": 0.0}})
note = partial(aged_note, tokens=30)
"""The notes here are 30 tokens long."""


FILLER = [note(f"f{i}", t, 50 + i) for i, t in enumerate([
    "The boiler was serviced and the plumber left a receipt",
    "We planted tomatoes and basil on the balcony",
    "The quarterly report is due on the first Monday",
    "I walked the dog around the lake before dinner",
    "My sister visited and we cooked a curry together",
    "The bike chain needed oil after the rain",
])]
OLD = "27 species of birds seen in the local park: birds, birds"
NEW = ("Now 32 species of birds seen in the local park, after a long morning walk with the "
       "kids around the ponds, the meadow and the old orchard behind the library")
Q = "the species of birds I have seen in the local park"


def test_the_newer_version_wins_a_budget_that_fits_one() -> None:
    """The older is the stronger match (it says "birds" three times) and without the rule
    it is packed; with it, the newer takes the older's score and is packed instead."""
    notes = [*FILLER, note("old", OLD, 30), note("new", NEW, 20)]
    off = ranked(notes, Q, 30, OFF)
    assert [n.note_id for n in off.notes] == ["old"]
    on = ranked(notes, Q, 30)
    assert [n.note_id for n in on.notes] == ["new"]
    c = {x.note_id: x for x in on.candidates}
    assert c["new"].updates == ["old"] and c["old"].updates == []
    assert c["new"].score == pytest.approx(c["old"].relevance * c["old"].recency, rel=1e-3)
    assert c["old"].score == pytest.approx(
        c["old"].relevance * c["old"].recency * UPDATES_ON.older_weight, rel=1e-3)
    both = ranked(notes, Q, 60)  # a budget for both keeps the older's evidence too
    assert {n.note_id for n in both.notes} >= {"old", "new"}


def test_a_newer_note_missing_one_of_the_older_notes_query_words_is_no_version() -> None:
    """Without "species" the newer is about something else: the older stays ahead."""
    notes = [*FILLER, note("old", OLD, 30),
             note("new", "Now 32 birds seen in the local park", 20)]
    res = ranked(notes, Q, 30)
    assert [n.note_id for n in res.notes] == ["old"]
    assert all(not x.updates for x in res.candidates)


@pytest.mark.parametrize(("share", "applies"), [(0.7, True), (0.9, False)])
def test_the_shared_words_must_carry_the_querys_weight(share: float, applies: bool) -> None:
    """The question also asks about "dinner" (one filler note holds it): the two notes'
    words carry 0.78 of the query's IDF weight (5 x 1.28 of 5 x 1.28 + 1.79), versions at
    0.7, not at 0.9."""
    notes = [*FILLER, note("old", OLD, 30), note("new", NEW, 20)]
    cfg = with_overrides(DEFAULT, {"updates": {"query_words_share": share}})
    res = ranked(notes, Q + " before dinner", 30, cfg)
    assert ([n.note_id for n in res.notes] == ["new"]) == applies


@pytest.mark.parametrize(("gap_days", "applies"), [(0.5, False), (2.0, True)])
def test_notes_of_one_exchange_are_not_versions(gap_days: float, applies: bool) -> None:
    words = QueryWords(np.array([[True, True], [True, True]]), np.array([1.0, 1.0]))
    got = adjust(["a", "b"], np.array([0.5, 0.1]), np.array([0.5, 0.1]),
                 np.array([0, int(gap_days * US_PER_DAY)]), np.array([False, False]), None,
                 None, lambda p: ["x y", "z w"][p], DEFAULT, words=words)
    assert (got.updates == {1: [0]}) == applies
    assert (got.score[1] == 0.5) == applies


def test_a_longterm_note_is_never_the_older() -> None:
    """Earned permanence: the longterm older keeps its score (no decay, no demotion) and
    the newer is not lifted."""
    notes = [*FILLER, note("old", OLD, 400, uses=5), note("new", NEW, 20)]
    res = ranked(notes, Q, 30)
    c = {x.note_id: x for x in res.candidates}
    assert c["old"].tier == "longterm" and c["new"].updates == []
    assert c["old"].score == c["old"].relevance
    assert [n.note_id for n in res.notes] == ["old"]


def test_a_year_old_note_that_is_the_only_match_still_wins() -> None:
    res = ranked([*FILLER, note("old", OLD, 365)], Q, 30)
    assert [n.note_id for n in res.notes] == ["old"] and not res.nothing_relevant
