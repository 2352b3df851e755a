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
    RankingConfig,
    with_overrides,
)
from hivemind_memory.projections.ranking.updates import (
    US_PER_DAY,
    Adjusted,
    QueryWords,
    adjust,
)
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


@pytest.mark.parametrize(("share", "version"), [(1.0, False), (0.5, True)])
def test_a_newer_note_missing_one_of_the_older_notes_query_words(share: float,
                                                                 version: bool) -> None:
    """Without "species" the newer restates the rest of the older's match (birds, seen,
    local, park): a version at the default ``restated_share`` (0.5), lifted to that share of
    the older's score, which stays ahead at a budget for one (the older is the better match
    by the missing word); no version when every word must be held."""
    notes = [*FILLER, note("old", OLD, 30),
             note("new", "Now 32 birds seen in the local park", 20)]
    cfg = with_overrides(DEFAULT, {"updates": {"restated_share": share}})
    res = ranked(notes, Q, 30, cfg)
    assert [n.note_id for n in res.notes] == ["old"]
    c = {x.note_id: x for x in res.candidates}
    assert c["new"].updates == (["old"] if version else [])
    assert all(not x.updates for x in res.candidates if x.note_id != "new")
    old_score = c["old"].relevance * c["old"].recency
    assert (c["new"].score > c["new"].relevance * c["new"].recency * 1.1) == version
    if version:  # the share of the older's words' weight the newer holds: 4 of 5 words
        assert 0.6 * old_score < c["new"].score < old_score


def _words(held: list[list[bool]]) -> QueryWords:
    """Query words of equal weight; ``held[k]``: which of them candidate ``k`` holds."""
    return QueryWords(np.array(held), np.ones(len(held[0])))


def _adjust(held: list[list[bool]], days: list[float],
            cfg: RankingConfig = DEFAULT) -> Adjusted:
    m = len(held)
    score = np.array([0.5] + [0.1] * (m - 1))
    return adjust([f"n{k}" for k in range(m)], score, score.copy(),
                  np.array([int(d * US_PER_DAY) for d in days]), np.zeros(m, np.bool_),
                  None, None, lambda p: f"note number {p}", cfg, words=_words(held))


ALL = [True, True, True, True]


@pytest.mark.parametrize(("newer", "lift"), [
    ([True, True, True, True], 1.0),    # every word: exactly the older's score
    ([True, True, True, False], 0.75),  # three of four words' weight
    ([False, True, False, True], 0.5),  # half: at the default ``restated_share``
    ([True, False, False, False], None),  # a quarter: no version
])
def test_the_newer_is_lifted_to_the_share_of_the_older_match_it_restates(
        newer: list[bool], lift: float | None) -> None:
    got = _adjust([ALL, newer], [0, 2])
    assert got.updates == ({} if lift is None else {1: [0]})
    want = 0.1 if lift is None else 0.5 * lift
    assert got.score[1] == pytest.approx(want, rel=1e-12)
    assert got.score[0] == pytest.approx(
        0.5 if lift is None else 0.5 * UPDATES_ON.older_weight)


def test_an_older_fact_has_one_partial_version_the_one_restating_most_then_newest() -> None:
    """Three later notes each restate part of the older's match (six query words of equal
    weight; each later one holds under ``query_words_share`` of them, so none is an older
    itself): only the one restating the most is its version (of two restating as much, the
    newer); a note restating every word is a version besides, whatever the others do."""
    held = [[True] * 6,
            [True, True, True, True, False, False],   # 4 of 6, day 2
            [True, True, True, False, False, False],  # 3 of 6, day 3
            [False, False, True, True, True, True],   # 4 of 6, day 4: ties with n1, newer
            [True] * 6]                               # every word, day 5
    got = _adjust(held, [0, 2, 3, 4, 5])
    assert got.updates == {3: [0], 4: [0]}
    assert list(got.score[1:]) == pytest.approx(
        [0.1, 0.1, 0.5 * 4 / 6, 0.5])
    alone = _adjust(held[:3], [0, 2, 3])  # without them n1 restates the most
    assert alone.updates == {1: [0]}


@pytest.mark.parametrize(("longest", "tokens", "version"), [
    (None, 84, True), (None, 300, False), (48, 84, False), (0, 84, False), (400, 300, True)])
def test_a_newer_note_longer_than_newer_max_tokens_is_no_version_by_the_words(
        longest: int | None, tokens: int, version: bool) -> None:
    """An 84-token turn (two passages of the default 48) that holds every word of the
    older's fact is one statement: a version under the default limit (128 tokens); a
    300-token note is not, nor the 84-token one under a limit of 48 or of 0 (the passage
    size, the limit before the setting existed)."""
    newer = NEW + " " + " ".join(["and then we went home for lunch"] * (tokens // 10))
    notes = [*FILLER, note("old", OLD, 30), aged_note("new", newer, 20, tokens=tokens)]
    cfg = DEFAULT if longest is None else with_overrides(
        DEFAULT, {"updates": {"newer_max_tokens": longest}})
    res = ranked(notes, Q, 400, cfg)
    news = [x for x in res.candidates if x.note_id == "new"]
    assert news and all((x.updates == ["old"]) == version for x in news)


BIRDS_OLD = ("I've been keeping track of the species I've seen in my local park, and I've "
             "managed to spot 27 different species of birds so far")
BIRDS_NEW = ("I just saw a Northern Flicker in my local park last weekend, which brings my "
             "total species count to 32")
BIRDS_Q = "How many different species of birds have I seen in my local park?"
BIRD_FILLER = [note(f"b{i}", t, 10 + i) for i, t in enumerate([
    "Which birds visit a feeder with sunflower seeds in winter?",
    "The birds were loud at dawn, and I have seen a heron twice",
    "Different feeders attract different birds, the shop said",
    "I have seen many birds on the coast this summer",
])]


@pytest.mark.parametrize(("share", "packed"), [(1.0, False), (0.5, True)])
def test_a_fact_restated_in_other_words_is_packed_beside_the_older(share: float,
                                                                   packed: bool) -> None:
    """The newer count restates the subject's rarest words (species, local park) but not
    "different", "birds" or "seen", which notes about other birds hold: by every word it
    is no version and the bird notes take the second place of a budget for two; as a
    partial restatement it is the older's version and takes it."""
    notes = [*FILLER, *BIRD_FILLER, note("old", BIRDS_OLD, 40), note("new", BIRDS_NEW, 35)]
    cfg = with_overrides(DEFAULT, {"updates": {"restated_share": share}})
    res = ranked(notes, BIRDS_Q, 60, cfg)
    got = [n.note_id for n in res.notes]
    assert "old" in got and ("new" in got) == packed
    c = {x.note_id: x for x in res.candidates}
    assert c["new"].updates == (["old"] if packed else [])


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


@pytest.mark.parametrize(("passage_tokens", "longest", "lifted"), [
    (128, None, False), (0, None, False), (0, 0, True), (0, 400, True)])
def test_a_long_note_holding_the_words_apart_does_not_update_a_short_fact(
        passage_tokens: int, longest: int | None, lifted: bool) -> None:
    """The long newer note (300 tokens) holds the words of the short older fact only far
    apart: it is no version of it (``newer_max_tokens``, 128 by default, passages on or
    off), and the fact keeps its score and its place in the budget. With passages off and
    ``newer_max_tokens`` 0 (the passage size: no limit without passages, what a config
    written before the setting meant) or above its length, the rule lifts it."""
    notes = [*FILLER, note("old", OLD, 30), aged_note("long", LONG, 20, tokens=300)]
    over: dict[str, object] = {"passage_tokens": passage_tokens}
    if longest is not None:
        over["updates"] = {"newer_max_tokens": longest}
    res = ranked(notes, Q, 400, with_overrides(DEFAULT, over))
    c = {x.note_id: x for x in res.candidates}
    longs = [x for x in res.candidates if x.note_id == "long"]
    assert longs and all((x.updates == ["old"]) == lifted for x in longs)
    assert (c["old"].score < c["old"].relevance * c["old"].recency * 0.95) == lifted
    assert (len(longs) > 1) == (passage_tokens > 0)


@pytest.mark.parametrize("words", [1, 5, 63, 64, 70])
def test_which_candidate_holds_every_word_of_another_is_the_word_by_word_answer(
        words: int) -> None:
    """``_holds_every`` (a candidate's query words as the bits of one integer, up to 63
    words; word by word past that) against the definition: ``every[i, j]`` when no word of
    ``i`` is missing from ``j``; random holdings with subsets, equal rows, empty rows and the
    highest bit set."""
    from hivemind_memory.projections.ranking.updates import _holds_every

    rng = np.random.default_rng(words)
    m = 40
    held = rng.random((m, words)) < 0.6
    held[1] = held[0] & (rng.random(words) < 0.7)  # a subset of row 0
    held[2] = held[0]
    held[3] = False
    held[4, -1] = True  # the highest word
    held[5] = held[4]
    held[5, -1] = False
    got = _holds_every(held)
    want = np.array([[not (held[i] & ~held[j]).any() for j in range(m)] for i in range(m)])
    assert got.tolist() == want.tolist()
    assert want.any() and not want.all()


def test_an_older_facts_partial_version_is_chosen_among_the_notes_written_after_it() -> None:
    """The one partial version of an older fact is the later note restating the most of it:
    a note written before the fact that restates more of its words is no version of it (it
    is older) and must not hide the later one that is."""
    held = [[True] * 6,
            [True, True, True, True, False, False],   # 4 of 6, day 0: before the fact
            [False, False, False, True, True, True]]  # 3 of 6, day 7: after it
    got = _adjust(held, [5, 0, 7])
    assert got.updates == {2: [0]}
    assert got.score[2] == pytest.approx(0.5 * 3 / 6, rel=1e-12)
    assert got.score[0] == pytest.approx(0.5 * UPDATES_ON.older_weight)


def test_a_note_is_never_its_own_older_version_at_a_gap_of_zero_days() -> None:
    """``min_gap_days = 0`` (allowed) makes every note written at the same time or later a
    possible newer; a note itself is not one: only the later note names the older."""
    cfg = with_overrides(DEFAULT, {"updates": {"min_gap_days": 0.0}})
    got = _adjust([ALL, [True, True, True, False]], [0, 2], cfg)
    assert got.updates == {1: [0]}
    assert got.score[1] == pytest.approx(0.5 * 0.75, rel=1e-12)


@pytest.mark.parametrize(("held", "updates"), [
    ([[True, True, True, False], [True, True, True, False]], {1: [0]}),  # both at 0.75
    ([[True, True, False, False], [True, True, False, False]], {}),  # both at 0.5
    # one weak candidate beside two strong ones: the strong ones are still compared
    ([[True, True, True, False], [True, True, True, False], [True, False, False, False]],
     {1: [0]}),
])
def test_no_matrices_when_no_candidate_carries_the_query_words_share(
        held: list[list[bool]], updates: dict[int, list[int]]) -> None:
    """``_restated`` builds its matrices only when some candidate's words carry
    ``query_words_share`` (0.7) of the query's weight: none (every credit 0) when no
    candidate can be an older version by its words; the rule's answer is the same."""
    from hivemind_memory.projections.ranking.updates import _restated

    m = len(held)
    days = [0, 2, 3][:m]
    at = np.arange(m)
    created = np.array([int(d * US_PER_DAY) for d in days])
    credit = _restated(_words(held), at, created, DEFAULT.updates)
    strong = [sum(h) / 4 >= DEFAULT.updates.query_words_share for h in held]
    assert (credit is None) == (not any(strong))
    if credit is not None:
        assert credit[0, 1] == 1.0  # the later one holds every word the first holds
    assert _adjust(held, days).updates == updates
