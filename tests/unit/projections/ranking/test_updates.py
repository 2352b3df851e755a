"""Updated facts, near-identical notes, the probability ceiling and paraphrases (issue 35):
each rule with inputs on both sides of its boundary, through the query path and the SDK."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hivemind_memory.api_stub.protocol.messages import QueryRequest
from hivemind_memory.api_stub.sdk import Memory
from hivemind_memory.events.schema import token_estimate
from hivemind_memory.projections.ranking.bm25_rules import tokenize
from hivemind_memory.projections.ranking.calibrated import by_meaning
from hivemind_memory.projections.ranking.config import DEFAULT as BASE
from hivemind_memory.projections.ranking.config import with_overrides
from hivemind_memory.projections.ranking.index import build_index
from hivemind_memory.projections.ranking.updates import US_PER_DAY, adjust
from hivemind_memory.projections.state import NoteState
from hivemind_memory.worker.engine import run_rank
from tests.support.ranked import EMBEDDER, NOW, note, ranked

DEFAULT = with_overrides(BASE, {"updates": {"margin": 2.0, "same_subject_cosine": 0.6,
                                            "older_weight": 0.5, "query_words_share": 0.0}})
"""The defaults with the updated-facts rule's cosine signal on alone (the default config has
the query-words signal instead: ``test_updates_by_query_words``)."""

GYM_OLD = "My gym membership at FitLife costs 40 dollars a month"
GYM_NEW = "My gym membership at FitLife costs 55 dollars a month now"
GYM_Q = "how much does my FitLife gym membership cost a month"


def test_the_newer_version_of_a_fact_wins_where_age_alone_would_not() -> None:
    """Both fit only one at a time: the newer (60 days old) beats the older (120 days),
    though the older is as good a match; without the rule recency alone decides less."""
    notes = [note("old", GYM_OLD, 120), note("new", GYM_NEW, 60)]
    res = ranked(notes, GYM_Q, 20, DEFAULT)
    assert [n.note_id for n in res.notes] == ["new"]
    c = {x.note_id: x for x in res.candidates}
    assert c["new"].updates == ["old"] and c["old"].updates == []
    assert c["new"].score >= c["old"].score / DEFAULT.updates.older_weight * 0.999
    assert c["old"].score < c["old"].relevance * c["old"].recency  # demoted


@pytest.mark.parametrize(("margin", "winner"), [(0.9, "old"), (1.2, "new")])
def test_the_older_wins_only_by_a_clear_margin(margin: float, winner: str) -> None:
    """The pure rule: the older's relevance is 1.05 x the newer's, on either side of the
    margin."""
    cfg = with_overrides(DEFAULT, {"updates": {"margin": margin, "same_subject_cosine": 0.5}})
    vec = np.array([[10.0, 1.0], [10.0, 2.0]])
    got = adjust(["old", "new"], np.array([0.42, 0.40]), np.array([0.42, 0.40]),
                 np.array([0, 30 * US_PER_DAY]), np.array([False, False]), vec,
                 np.sqrt((vec * vec).sum(axis=1)), lambda p: ["a b", "c d"][p], cfg)
    assert (int(np.argmax(got.score)) == 1) == (winner == "new")
    assert (got.updates == {1: [0]}) == (winner == "new")


@pytest.mark.parametrize(("gap_days", "applies"), [(0.5, False), (1.5, True)])
def test_notes_of_one_exchange_are_not_versions(gap_days: float, applies: bool) -> None:
    vec = np.array([[10.0, 1.0], [10.0, 2.0]])
    got = adjust(["a", "b"], np.array([0.5, 0.4]), np.array([0.5, 0.4]),
                 np.array([0, int(gap_days * US_PER_DAY)]), np.array([False, False]), vec,
                 np.sqrt((vec * vec).sum(axis=1)), lambda p: ["x y", "z w"][p], DEFAULT)
    assert bool(got.updates) == applies


@pytest.mark.parametrize(("cos_pair", "applies"), [((10.0, 9.0), False), ((10.0, 2.0), True)])
def test_notes_on_other_subjects_are_not_versions(cos_pair: tuple[float, float],
                                                  applies: bool) -> None:
    vec = np.array([[10.0, 0.0], list(cos_pair)])  # cosine 0.74 / 0.98 against 0.6...
    if not applies:
        vec = np.array([[10.0, 0.0], [4.0, 9.0]])  # cosine 0.41
    got = adjust(["a", "b"], np.array([0.5, 0.4]), np.array([0.5, 0.4]),
                 np.array([0, 30 * US_PER_DAY]), np.array([False, False]), vec,
                 np.sqrt((vec * vec).sum(axis=1)), lambda p: ["x y", "z w"][p], DEFAULT)
    assert bool(got.updates) == applies


def test_a_longterm_note_is_never_the_older_and_a_lone_old_match_still_wins() -> None:
    notes = [note("old", GYM_OLD, 400, uses=5), note("new", GYM_NEW, 60)]
    c = {x.note_id: x for x in ranked(notes, GYM_Q, 20, DEFAULT).candidates}
    assert c["old"].tier == "longterm" and c["new"].updates == []
    assert c["old"].score == c["old"].relevance  # no decay, no demotion
    lone = ranked([note("old", GYM_OLD, 365), note("x", "the boiler was serviced", 1)],
                  GYM_Q, 20, DEFAULT)
    assert [n.note_id for n in lone.notes] == ["old"]


def test_near_identical_notes_are_packed_once_and_the_one_names_the_others() -> None:
    text = "Redis persistence uses AOF with fsync every second on the projector"
    notes = [note("a", text, 3), note("b", text, 2), note("c", text + ".", 1),
             note("d", "Redis persistence does not use AOF on the projector", 2)]
    res = ranked(notes, "redis persistence aof", 200, DEFAULT)
    ids = [n.note_id for n in res.notes]
    assert "d" in ids  # "not": another statement, whatever its vector
    [one] = [n for n in res.notes if n.note_id in "abc"]
    assert sorted([one.note_id, *one.stands_for]) == ["a", "b", "c"]
    off = ranked(notes, "redis persistence aof", 200, with_overrides(DEFAULT,
                                                                     {"near_identical": 0}))
    assert {"a", "b", "c"} <= {n.note_id for n in off.notes}


def test_a_batch_memo_reads_each_candidates_words_once_and_groups_as_without_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Queries of one batch with other candidate sets (so a note sits at another position in
    each) share one memo of the candidates' words: the answers equal those ranked without
    a memo, near-identical groups included, and each note is split into words once."""
    from hivemind_memory.projections.ranking.ranker import BatchMemo

    text = "Redis persistence uses AOF with fsync every second on the projector"
    notes = [note("a", text, 3), note("b", text, 2), note("c", text + ".", 1),
             note("d", "Redis persistence does not use AOF on the projector", 2),
             note("e", "the projector folds events every second", 4),
             note("f", "the projector folds events every second!", 5),
             note("g", "fsync every second costs little on the projector", 6)]
    idx = build_index("t", {n.note_id: n for n in notes}, EMBEDDER)
    memo = BatchMemo()
    split: list[str] = []
    from hivemind_memory.projections.ranking import ranker

    def counted(t: str) -> list[str]:
        split.append(t)
        return tokenize(t)

    monkeypatch.setattr(ranker, "tokenize", counted)
    queries = ["redis persistence aof", "projector folds events", "fsync every second",
               "projector", "redis aof projector every second"]
    grouped = 0
    for text_q in queries:
        req = QueryRequest(ns="t", text=text_q, budget=200, explain=True)
        got = run_rank(idx, req, DEFAULT, NOW, memo, embedder=EMBEDDER)
        want = run_rank(idx, req, DEFAULT, NOW, embedder=EMBEDDER)
        assert got == want
        grouped += sum(len(n.stands_for) for n in got.notes)
    assert grouped >= 4  # both groups formed, in more than one query
    held = [slot for slot, size, _ in memo.kept.keys(idx.cols) if size == 0]
    assert len(split) == len(held) >= 5  # each note's text split once for the whole batch
    assert {idx.cols.ids[k] for k in held} <= set("abcdefg") and len(held) == len(set(held))
    assert {k: memo.kept.spelled(idx.cols, memo.kept.words(idx.cols, k)) for k in held} == {
        k: frozenset(tokenize(idx.cols.texts.get(k))) for k in held}
    assert len(split) == len(held)  # read from what was kept


@pytest.mark.parametrize(("threshold", "merged"), [(0.9, True), (0.95, False)])
def test_near_identical_threshold(threshold: float, merged: bool) -> None:
    """Ten words against the same ten plus one: overlap 10/11 = 0.909."""
    base = "alpha bravo charlie delta echo foxtrot golf hotel india juliet"
    vec = np.array([[10.0, 1.0], [10.0, 1.0]])
    got = adjust(["a", "b"], np.array([0.5, 0.4]), np.array([0.5, 0.4]),
                 np.array([0, 0]), np.array([False, False]), vec,
                 np.sqrt((vec * vec).sum(axis=1)), lambda p: [base, base + " kilo"][p],
                 with_overrides(DEFAULT, {"near_identical": threshold}))
    assert (got.stands_for == {0: [1]}) == merged and bool(got.keep.all()) != merged


@pytest.mark.parametrize(("floor", "packed"), [(0.0, True), (0.999, False)])
def test_the_budget_is_a_ceiling_not_a_quota(floor: float, packed: bool) -> None:
    notes = [note("billing", "Stripe billing runs on the first of the month", 5),
             note("redis", "Redis runs with AOF persistence", 5)]
    # nearest off: in a namespace this small the nearest notes are candidates whatever the
    # floor (test_a_small_namespace_answers_with_its_nearest_notes); the tail off: it takes
    # short notes under any floor (test_the_tail_keeps_a_short_reply_beside_a_strong_match)
    cfg = with_overrides(DEFAULT, {"calibration": {"floor": floor, "nearest": 0,
                                                   "tail_notes": 0}})
    res = ranked(notes, "redis persistence", 1000, cfg)
    assert ("redis" in {n.note_id for n in res.notes}) == packed
    assert res.nothing_relevant == (not packed)
    assert "billing" not in {n.note_id for n in res.notes}


FILLER_TOPICS = ("garden tomatoes watering schedule", "laptop battery replacement options",
                 "marathon training plan for the spring", "bread recipe with sourdough starter",
                 "tax return deadline questions", "hotel booking for the conference",
                 "guitar chords for beginners", "car insurance renewal quotes",
                 "birthday gift ideas for a coworker", "python script to rename files",
                 "moving boxes and packing tips", "yoga poses for back pain")


def _reply_beside_its_match() -> list[NoteState]:
    """480 unrelated questions of a chat history and, ten days ago, a turn naming Rachel's
    relocation followed two minutes later by the short reply that says where she went
    (no word of "Where did Rachel move to" but "move", and 7 tokens)."""
    filler = [note(f"f{i:03d}", f"user: I have a question about "
                                f"{FILLER_TOPICS[i % len(FILLER_TOPICS)]}, can you help with "
                                f"item {i}?", 30 + i * 0.05, tokens=25) for i in range(480)]
    ask = note("ask", "user: My friend Rachel just relocated for a new job at a design agency.",
               10, tokens=18)
    city = NoteState(note_id="city", agent="ann", scope="shared", kind="note",
                     text="user: She moved to Chicago.", tokens=7,
                     created_at=ask.created_at + timedelta(minutes=2))
    return [*filler, ask, city]


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize(("calibration", "found"), [
    ({}, True),  # the default: the tail of 8 (since 2026-12-03)
    ({"tail_notes": 0}, False),  # the floor alone (0.001): the default before
    ({"tail_notes": 8}, True),
    ({"tail_notes": 1}, True),  # the first of the tail
    ({"tail_notes": 8, "tail_floor": 0.0005}, False),  # its probability is under 0.0005
    ({"tail_notes": 8, "tail_max_tokens": 6}, False),  # 7 tokens: too long for this tail
    ({"floor": 0.0003, "tail_notes": 0}, True),  # a lower floor for every note finds it too
    ({"floor": 0.0005, "tail_notes": 0}, False),
    ({"floor": 0.0005}, True),  # under a floor of 0.0005 the tail still takes it
])
def test_the_tail_keeps_a_short_reply_beside_a_strong_match(
        calibration: dict[str, Any], found: bool, native: bool,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The short reply's probability (~0.0004) lies under the floor (0.001): the tail
    (``tail_notes``) makes it a candidate when it is among the tail's most probable, at
    ``tail_floor`` or above and no longer than ``tail_max_tokens``; the unrelated notes
    (~0.0001) stay out whatever the setting: the budget is still a ceiling (most of 1,000
    tokens left unused). ``native``: the C path, else the numpy reference."""
    from hivemind_memory.projections.ranking import calibrated

    if not native:
        monkeypatch.setattr(calibrated, "native", None)
    elif calibrated.native is None:
        pytest.skip("the C kernel is not built")
    cfg = with_overrides(BASE, {"calibration": calibration})
    res = ranked(_reply_beside_its_match(), "Where did Rachel move to after her recent "
                 "relocation?", 1000, cfg)
    packed = {n.note_id for n in res.notes}
    assert "ask" in packed
    assert ("city" in packed) == found
    rel = {c.note_id: c.relevance for c in res.candidates}
    assert ("city" in rel) == found
    if found:
        assert 0.0003 <= rel["city"] < 0.0005
    assert not any(n.startswith("f") for n in rel)
    assert res.used < 100


def test_the_tail_takes_the_most_probable_short_notes() -> None:
    """``tail_kept`` directly: notes at the floor stay; under it, only the ``tail_notes``
    most probable of at most ``tail_max_tokens`` tokens among ``ok`` (ties included), never
    one at 0."""
    from hivemind_memory.projections.ranking.calibrated import lowest_floor, tail_kept

    cal = with_overrides(BASE, {"calibration": {"tail_notes": 2}}).calibration
    off = with_overrides(BASE, {"calibration": {"tail_notes": 0}}).calibration
    assert lowest_floor(cal) == 0.0003 and lowest_floor(off) == 0.001
    assert lowest_floor(BASE.calibration) == 0.0003  # the default keeps a tail of 8
    p = np.array([0.002, 0.0009, 0.0008, 0.0008, 0.0007, 0.0006, 0.0, 0.0004])
    tok = np.array([500, 10, 10, 10, 10, 90, 10, 10])
    assert tail_kept(p, cal, tok).tolist() == [True, True, True, True, False, False, False,
                                               False]  # 0.0008 twice: the tie is kept
    ok = np.array([True, False, True, True, True, True, True, True])
    assert tail_kept(p, cal, tok, ok).tolist() == [True, False, True, True, False, False,
                                                   False, False]
    long = tok.copy()
    long[1:4] = 60  # over 48 tokens: the next short ones are taken
    assert tail_kept(p, cal, long).tolist() == [True, False, False, False, True, False,
                                                False, True]
    none = with_overrides(BASE, {"calibration": {"tail_notes": 0}}).calibration
    assert tail_kept(p, none, tok).tolist() == [True] + [False] * 7


def test_bad_tail_settings_are_refused_by_name() -> None:
    for bad in ({"tail_notes": -1}, {"tail_notes": 1001}, {"tail_floor": 0.0},
                {"tail_floor": 1.5}, {"tail_max_tokens": 0}):
        key = next(iter(bad))
        with pytest.raises(msgspec.ValidationError, match=f"calibration.{key}"):
            with_overrides(BASE, {"calibration": bad})


PARAPHRASES = [
    ("We are having tacos and a green salad in the cafeteria at noon", "lunch menu"),
    ("I am vegetarian and I really dislike spicy dishes", "food preferences"),
    ("On weekends I play guitar and go rock climbing", "hobbies"),
    ("The production database is PostgreSQL 15 on a managed cloud instance",
     "which sql server do we run"),
    ("Deploys go through ArgoCD after the pull request is merged",
     "how do releases reach production"),
    ("My daughter Emma starts kindergarten in September", "when does my kid begin school"),
    ("The office wifi password is taped under the printer", "network login for the office"),
    ("I adopted a beagle puppy named Biscuit last spring", "tell me about my dog"),
    ("Our quarterly planning meeting moved to the first Monday of April",
     "when is the next roadmap session"),
    ("The car needs new winter tyres before December", "vehicle maintenance to do"),
    ("Grandma's birthday dinner is at the Italian restaurant on Friday",
     "family celebration plans"),
    ("I run five kilometres every morning before work", "exercise routine"),
]


SECOND = [
    ("The staging cluster runs on three Kubernetes nodes in Frankfurt",
     "where is our test environment hosted"),
    ("My sister Clara lives in Lisbon with her two cats", "tell me about my sibling"),
    ("I take my coffee black with no sugar", "how do I like my morning drink"),
    ("The invoice for the March consulting work was paid on the 12th",
     "did the client settle the bill"),
    ("Backups of the customer database are taken every night at 2am",
     "how often do we save copies of our data"),
    ("I am allergic to penicillin", "any medication I must avoid"),
    ("The team retrospective happens every second Thursday afternoon",
     "when do we review how the sprint went"),
    ("My flight to Tokyo leaves on the 14th of May from Heathrow", "upcoming travel to Japan"),
    ("We switched the logging stack from ELK to Grafana Loki last quarter",
     "which tool stores our logs"),
    ("I prefer to be contacted by email rather than phone calls", "best way to reach me"),
    ("The apartment lease ends in August and rent goes up to 1900 euros",
     "housing costs next year"),
    ("Our API rate limit is 100 requests per minute per token",
     "how many calls can a client make"),
]
"""A second set, written after the first was fixed (so the rule is not fitted to one set):
work, family, health, travel and home, no content word shared with its note but "client"."""


@pytest.mark.parametrize("pairs", [PARAPHRASES, SECOND], ids=["first", "second"])
def test_paraphrases_find_their_note(tmp_path: Path, pairs: list[tuple[str, str]]) -> None:
    """Through the SDK on the embedded store (default config): each of 12 notes asked in
    other words, at a budget that holds two of them; issue 35's target is 10 of 12 (the
    misses left are notes the bundled embedder puts 5th to 9th by cosine)."""
    with Memory(f"memory://{tmp_path / 'p'}", ns="para", agent="ann") as mem:
        ids = [mem.remember(text) for text, _ in pairs]
        got = [mem.recall(q, budget=60) for _, q in pairs]
    assert all(len(r.notes) == 2 for r in got)  # nothing left empty: the two nearest
    found = sum(nid in r.note_ids for nid, r in zip(ids, got, strict=True))
    assert found >= 10, found


def test_the_nearest_notes_by_meaning_alone_are_packed_nearest_first() -> None:
    """Notes written a second apart (each one's neighbours lift its probability, as turns of
    a conversation) and of different lengths: for "food preferences" the model alone ranks
    the note about lunch above the nearer note about being vegetarian. With no note sharing
    a word with the query, the two packed are the two nearest by cosine."""
    notes = [NoteState(note_id=f"n{i}", agent="ann", scope="shared", kind="note", text=text,
                       tokens=token_estimate(text), created_at=NOW - timedelta(seconds=12 - i))
             for i, (text, _) in enumerate(PARAPHRASES)]
    vec = EMBEDDER.embed([n.text for n in notes] + ["food preferences"])
    unit = vec / np.linalg.norm(vec, axis=1, keepdims=True)
    nearest_two = {f"n{i}" for i in np.argsort(-(unit[:-1] @ unit[-1]))[:2].tolist()}
    res = ranked(notes, "food preferences", 2 * max(n.tokens for n in notes), DEFAULT)
    assert {n.note_id for n in res.notes} == nearest_two == {"n1", "n10"}
    c = {x.note_id: x for x in res.candidates}
    assert c["n1"].relevance > c["n0"].relevance  # n0 is the model's second, third by cosine


@pytest.mark.parametrize(("cos", "want"), [
    ([0.1, 0.2, 0.5], [0.001, 0.002, 0.003]),  # by cosine; a note with evidence keeps its own
    ([0.2, -0.1, 0.5], [0.002, 0.0, 0.003]),  # a cosine under 0: no candidate
])
def test_by_meaning_shares_the_best_probability_in_proportion_to_cosine(
        cos: list[float], want: list[float]) -> None:
    got = by_meaning(np.array([0.002, 0.001, 0.003]), np.array([False, False, True]),
                     np.array(cos))
    assert got.tolist() == pytest.approx(want)


NEAREST = with_overrides(DEFAULT, {"calibration": {"nearest": 3}})
"""The nearest-notes rule on (as by default)."""


def test_a_small_namespace_answers_with_its_nearest_notes() -> None:
    notes = [note(f"n{i}", text, 1 + i) for i, (text, _) in enumerate(PARAPHRASES[:3])]
    for i, (_, q) in enumerate(PARAPHRASES[:3]):
        got = ranked(notes, q, 100, NEAREST)
        assert f"n{i}" in {n.note_id for n in got.notes}, q
        assert not got.nothing_relevant


@pytest.mark.parametrize(("nearest", "found"), [(0, False), (3, True)])
def test_the_nearest_rule_finds_a_paraphrase_that_shares_no_word(nearest: int,
                                                                 found: bool) -> None:
    """"hobbies" against its note: no shared word, cosine 0.09 (under ``min_cosine``)."""
    notes = [note(f"n{i}", text, 1 + i) for i, (text, _) in enumerate(PARAPHRASES[:3])]
    cfg = with_overrides(DEFAULT, {"calibration": {"nearest": nearest}})
    assert ("n2" in {n.note_id for n in ranked(notes, "hobbies", 100, cfg).notes}) == found


def _near_identical_plainly(texts: list[str], score: list[float], created: list[int],
                            threshold: float) -> tuple[list[bool], dict[int, list[int]]]:
    """The rule as stated (every pair's Jaccard, groups joined transitively), no bounds."""
    from hivemind_memory.projections.ranking.bm25_rules import tokenize

    words = [frozenset(tokenize(t)) for t in texts]
    n = len(texts)
    group = list(range(n))
    for a in range(n):
        for b in range(a + 1, n):
            wa, wb = words[a], words[b]
            if wa and wb and len(wa & wb) / len(wa | wb) >= threshold:
                ga, gb = group[a], group[b]
                group = [min(ga, gb) if g in (ga, gb) else g for g in group]
    keep = [True] * n
    stands: dict[int, list[int]] = {}
    for g in sorted(set(group)):
        members = [p for p in range(n) if group[p] == g]
        if len(members) < 2:
            continue
        best = min(members, key=lambda p: (-score[p], -created[p], f"n{p:03d}"))
        rest = [p for p in members if p != best]
        for p in rest:
            keep[p] = False
        stands[best] = rest
    return keep, stands


VOCAB = [f"w{i}" for i in range(14)]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.sampled_from(VOCAB), min_size=0, max_size=14), min_size=2,
                max_size=9),
       st.sampled_from([0.5, 0.6, 0.75, 0.8, 0.9, 1.0]), st.randoms(use_true_random=False))
def test_near_identical_groups_equal_the_rule_computed_pair_by_pair(
        bags: list[list[str]], threshold: float, rnd: Any) -> None:
    """The bounded computation (sizes first, a pair already grouped skipped) groups exactly
    as every pair's Jaccard does, on word sets of every size around the threshold (and with
    texts repeated, so that groups of three and more occur)."""
    texts = [" ".join(b) for b in bags]
    texts += [texts[rnd.randrange(len(texts))] for _ in range(rnd.randrange(3))]
    n = len(texts)
    score = [rnd.choice([0.1, 0.2, 0.3]) for _ in range(n)]
    created = [rnd.randrange(3) for _ in range(n)]
    got = adjust([f"n{p:03d}" for p in range(n)], np.array(score), np.array(score),
                 np.array(created, np.int64), np.zeros(n, np.bool_), None, None,
                 lambda p: texts[p],
                 with_overrides(DEFAULT, {"near_identical": threshold,
                                          "updates": {"margin": 0.0}}))
    keep, stands = _near_identical_plainly(texts, score, created, threshold)
    assert got.keep.tolist() == keep
    assert got.stands_for == stands
    # with each text's word count known (as the index knows it), the same groups, and a
    # text is read only when its size lets it reach the threshold with another's
    from hivemind_memory.projections.ranking.bm25_rules import tokenize

    sizes = np.array([len(set(tokenize(t))) for t in texts], np.int64)
    read: list[int] = []

    def text_of(p: int) -> str:
        read.append(p)
        return texts[p]

    known = adjust([f"n{p:03d}" for p in range(n)], np.array(score), np.array(score),
                   np.array(created, np.int64), np.zeros(n, np.bool_), None, None, text_of,
                   with_overrides(DEFAULT, {"near_identical": threshold,
                                            "updates": {"margin": 0.0}}), sizes)
    assert known.keep.tolist() == keep
    assert known.stands_for == stands
    could = {p for p in range(n) for q in range(n) if p != q and min(sizes[p], sizes[q]) > 0
             and min(sizes[p], sizes[q]) / max(sizes[p], sizes[q]) >= threshold}
    assert set(read) == could


def test_texts_of_notes_whose_sizes_cannot_match_are_not_read() -> None:
    """Three candidates with close vectors: two of 4 words, one of 40. At threshold 0.9 the
    40-word note cannot be near-identical to either (4 / 40 < 0.9): with the sizes known,
    its text is never read, and the two short ones are still merged."""
    texts = ["alpha beta gamma delta", "alpha beta gamma delta",
             " ".join(f"w{i}" for i in range(40))]
    read: list[int] = []

    def text_of(p: int) -> str:
        read.append(p)
        return texts[p]

    vec = np.array([[3.0, 4.0], [3.0, 4.0], [3.0, 4.1]])
    norm = np.sqrt((vec * vec).sum(axis=1))
    got = adjust(["a", "b", "c"], np.array([0.5, 0.4, 0.3]), np.array([0.5, 0.4, 0.3]),
                 np.zeros(3, np.int64), np.zeros(3, np.bool_), vec, norm, text_of,
                 with_overrides(DEFAULT, {"near_identical": 0.9}),
                 np.array([4, 4, 40], np.int64))
    assert got.keep.tolist() == [True, False, True]
    assert got.stands_for == {0: [1]}
    assert sorted(read) == [0, 1]


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 14), st.integers(1, 14), st.integers(0, 2**32 - 1))
def test_the_updated_facts_rule_reads_the_cosines_the_near_identical_rule_worked_out(
        m: int, lim: int, seed: int) -> None:
    """Both rules look at the top candidates' pairwise cosines; the second takes them from
    the first's matrix when it holds its candidates (a near-identical note dropped from the
    top ``max_notes`` brings in others: then they are computed again). Either way the
    answer is the one fresh cosines give."""
    from hivemind_memory.projections.ranking import updates

    rng = np.random.default_rng(seed)
    vec = np.rint(rng.normal(size=(m, 4)) * 30)
    texts = [f"note {i} words {i % 3}" for i in range(m)]
    for i in range(1, m, 3):  # near-identical pairs (same words, close vectors)
        vec[i] = vec[i - 1] + rng.integers(0, 2, 4)
        texts[i] = texts[i - 1]
    norm = np.sqrt((vec * vec).sum(axis=1))
    created = rng.integers(0, 400, m) * US_PER_DAY
    score = np.round(rng.uniform(0.1, 0.9, m), 2)
    cfg = with_overrides(DEFAULT, {"near_identical": 0.9, "updates": {
        "max_notes": lim, "margin": 2.0, "same_subject_cosine": 0.3}})

    def run() -> Any:
        return adjust([f"n{i:02d}" for i in range(m)], score, score, created,
                      np.zeros(m, np.bool_), vec, norm, lambda p: texts[p], cfg)

    got = run()
    fresh = updates._pair_cosines
    try:
        updates._pair_cosines = lambda v, n, at, known: updates._cosines(v[at], n[at])
        want = run()
    finally:
        updates._pair_cosines = fresh
    assert got.keep.tolist() == want.keep.tolist()
    assert got.score.tolist() == want.score.tolist()
    assert got.updates == want.updates


@pytest.mark.parametrize("dim", [64, 128, 256, 515, 1040])
def test_pairwise_cosines_of_float32_rows_are_the_float64_bits(dim: int) -> None:
    """``DerivedVectors.rows`` hands the rules float32 rows where their products are exact
    (every dot product of two notes' integers stays below 2**24): the pairwise cosines are
    the float64 product's bits, extreme components included; past the bound the rows stay
    float64."""
    from hivemind_memory.projections.ranking.updates import _cosines
    from hivemind_memory.projections.ranking.vectors import DerivedVectors

    rng = np.random.default_rng(dim)
    d = DerivedVectors("t", dim)
    raw = rng.normal(size=(60, dim))
    raw[1] = raw[0] * 3.0  # the same direction: cosine 1
    raw[2] = np.sign(raw[2])  # every component at +-127 once quantized
    raw[3] = 0.0  # no vector: cosine 0
    d.set(np.arange(60, dtype=np.int64), raw)
    slots = np.array([5, 0, 1, 2, 3, *range(6, 60)], np.int64)
    rows = d.rows(slots)
    assert rows.dtype == (np.float32 if d.exact_f32 else np.float64)
    assert d.exact_f32 == (dim * 127 * 256 < 2**24)
    got = _cosines(rows, d.norm[slots])
    want = _cosines(d.mat[slots].astype(np.float64), d.norm[slots])
    assert got.dtype == np.float64
    assert got.tobytes() == want.tobytes()
    assert got[1, 2] > 0.999999 and not got[4].any()
    assert 0 < np.abs(got).sum() < got.size
