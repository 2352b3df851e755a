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


@pytest.mark.parametrize(("spread", "applies"), [(None, True), ((False, False), True),
                                                 ((False, True), False),
                                                 ((True, False), True)])
def test_a_note_served_as_passages_is_never_the_newer(
        spread: tuple[bool, bool] | None, applies: bool) -> None:
    """The newer (position 1) holds every query word the older holds; it is a version only
    when it is not a note served as passages (``QueryWords.spread``); a long older note can
    still be updated by a short newer one."""
    words = QueryWords(np.array([[True, True], [True, True]]), np.array([1.0, 1.0]),
                       None if spread is None else np.array(spread))
    got = adjust(["a", "b"], np.array([0.5, 0.1]), np.array([0.5, 0.1]),
                 np.array([0, 2 * US_PER_DAY]), np.array([False, False]), None, None,
                 lambda p: ["x y", "z w"][p], DEFAULT, words=words)
    assert (got.updates == {1: [0]}) == applies
    assert got.score[1] == (0.5 if applies else 0.1)
    assert got.score[0] == pytest.approx(0.5 * UPDATES_ON.older_weight if applies else 0.5)


_TOPICS = ("the ferry timetable changed for the winter season and the last boat leaves "
           "early now so plan the return trip before dark",
           "the recipe for the lentil soup needs more cumin and a squeeze of lemon at the "
           "end to lift the flavour of the stock",
           "the new laptop arrived with a cracked hinge and the shop agreed to swap it "
           "for another unit next week at no cost")
LONG = " ".join([
    "I keep a diary of many things.", *(_TOPICS * 3),
    "Some species of moths came to the lamp.", *(_TOPICS * 3),
    "The birds on the feeder were loud.", *(_TOPICS * 3),
    "I have seen a fox near the local park.", *(_TOPICS * 3)])
"""A long note (about 300 tokens: three passages of 128) that holds every word of ``Q``,
each in a different sentence about something else."""


@pytest.mark.parametrize(("passage_tokens", "lifted"), [(128, False), (0, True)])
def test_a_long_note_holding_the_words_apart_does_not_update_a_short_fact(
        passage_tokens: int, lifted: bool) -> None:
    """Served as passages (the default), the long newer note holds the words of the short
    older fact only across passages: it is no version of it, and the fact keeps its score
    and its place in the budget. With passages off it is one note and the rule lifts it."""
    notes = [*FILLER, note("old", OLD, 30), aged_note("long", LONG, 20, tokens=300)]
    cfg = with_overrides(DEFAULT, {"passage_tokens": passage_tokens})
    res = ranked(notes, Q, 400, cfg)
    c = {x.note_id: x for x in res.candidates}
    longs = [x for x in res.candidates if x.note_id == "long"]
    assert longs and all((x.updates == ["old"]) == lifted for x in longs)
    assert (c["old"].score < c["old"].relevance * c["old"].recency * 0.95) == lifted
    assert (len(longs) > 1) == (passage_tokens > 0)


@pytest.mark.parametrize("words", [1, 5, 63, 64, 70])
def test_which_candidate_holds_every_word_of_another_is_the_word_by_word_answer(
        words: int) -> None:
    """``_same_words`` (a candidate's query words as the bits of one integer, up to 63
    words; word by word past that) against the definition: ``same[i, j]`` when no word of
    ``i`` is missing from ``j`` and ``i``'s words carry the share; random holdings with
    subsets, equal rows, empty rows and the high bit set."""
    from hivemind_memory.projections.ranking.updates import _same_words

    rng = np.random.default_rng(words)
    m = 40
    held = rng.random((m, words)) < 0.6
    held[1] = held[0] & (rng.random(words) < 0.7)  # a subset of row 0
    held[2] = held[0]
    held[3] = False
    held[4, -1] = True  # the highest word
    held[5] = held[4]
    held[5, -1] = False
    weight = rng.uniform(0.1, 3.0, words)
    up = UPDATES_ON
    at = np.sort(rng.choice(m, 30, replace=False))
    at = np.unique(np.concatenate((at, np.arange(6))))
    got = _same_words(QueryWords(held, weight), at, up)
    h = held[at]
    share = (h @ weight) / weight.sum() >= up.query_words_share
    want = np.array([[share[i] and not (h[i] & ~h[j]).any() for j in range(len(at))]
                     for i in range(len(at))])
    assert got.tolist() == want.tolist()
    assert want.any() and not want.all()
