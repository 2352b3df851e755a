"""Relevance: tokenizer, the incremental BM25 index and the worker's relevance (BM25 or numpy
cosine), all through the production code, checked against the textbook reference in
``tests/support/reference.py``."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hivemind_memory.events.schema import Scope
from hivemind_memory.projections.ranking.bm25_rules import idf, tokenize
from hivemind_memory.projections.ranking.config import RankingConfig
from hivemind_memory.projections.ranking.index import build_index
from hivemind_memory.projections.state import NoteState
from tests.support import reference
from tests.support.reference import LEXICAL, LexicalIndex, lexical, scores_over

T0 = datetime(2026, 1, 1, tzinfo=UTC)


# ---------------------------------------------------------------- tokenizer


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("Hello, World!", ["hello", "world"]),
        ("Redis-backed  event_log v2.", ["redis", "backed", "event_log", "v2"]),
        ("Ｆｕｌｌｗｉｄｔｈ ＴＥＸＴ", ["fullwidth", "text"]),
        ("Straße STRASSE", ["strasse", "strasse"]),
        ("Ünïcödé naïve café", ["ünïcödé", "naïve", "café"]),
        ("ﬁle", ["file"]),  # NFKC expands the ligature
        ("...!?", []),
        ("", []),
        ("日本語 テキスト", ["日本語", "テキスト"]),
    ],
)
def test_tokenize(text: str, tokens: list[str]) -> None:
    assert tokenize(text) == tokens


def test_tokenize_composed_and_decomposed_forms_agree() -> None:
    assert tokenize("cafe\u0301") == tokenize("caf\u00e9")


def _tokenize_as_stated(text: str) -> list[str]:
    """The rule as ``tokenize`` states it (NFKC, casefold, ``\\w+``), with no shortcut."""
    import re
    import unicodedata

    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    return re.findall(r"\w+", folded)


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=60)
       | st.text(alphabet="aZ_9 -.\t\n\x1c\x1f\x0b\x7f", max_size=30))
def test_tokenize_takes_the_ascii_shortcut_to_the_same_words(text: str) -> None:
    """ASCII text (every control character, separator and punctuation mark included) gives
    the words of the general path exactly."""
    assert tokenize(text) == _tokenize_as_stated(text)
    assert tokenize(text + "é") == _tokenize_as_stated(text + "é")  # the general path


# ---------------------------------------------------------------- BM25 (vs the reference)


def build(docs: dict[str, str]) -> LexicalIndex:
    ix = LexicalIndex()
    for k, t in docs.items():
        ix.add(k, t)
    return ix


CORPUS = {
    "a": "The deploy pipeline uses Redis streams for events.",
    "b": "Redis is an in-memory store; redis streams keep the event log.",
    "c": "Lunch menu: soup, salad and bread.",
    "d": "The deploy pipeline uses Redis streams for events.",  # same text as a
    "e": "events " * 40 + "redis",
    "f": "Kubernetes deploy notes: rollout, rollback, canary deploy.",
}


def test_idf_is_lucene_and_always_positive() -> None:
    assert idf(10, 2) == pytest.approx(math.log(1 + 8.5 / 2.5))
    assert idf(10, 10) > 0
    assert idf(1, 1) == pytest.approx(math.log(1 + 0.5 / 1.5))
    assert idf(100, 1) > idf(100, 50) > idf(100, 100) > 0


@pytest.mark.parametrize(
    "query",
    ["redis streams", "deploy", "events redis", "soup", "unknown words only", "deploy xyz",
     "xyz deploy redis"],
)
@pytest.mark.parametrize(
    "cfg",
    [LEXICAL, lexical(bm25_k1=2.0, bm25_b=0.3), lexical(bm25_k1=0.0, bm25_b=1.0)],
)
def test_scores_match_reference(query: str, cfg: RankingConfig) -> None:
    got = build(CORPUS).scores(query, cfg)
    want = reference.bm25(CORPUS, query, cfg)
    assert got.keys() == want.keys()
    for k in want:
        assert got[k] == pytest.approx(want[k], rel=1e-12)


def test_identical_texts_get_identical_relevance() -> None:
    s = build(CORPUS).scores("deploy redis events pipeline", LEXICAL)
    assert s["a"] == s["d"]
    assert s["a"] != s["b"]


def test_only_notes_sharing_a_term_are_returned() -> None:
    s = build(CORPUS).scores("soup", LEXICAL)
    assert set(s) == {"c"}
    assert build(CORPUS).scores("!!!", LEXICAL) == {}
    assert LexicalIndex().scores("soup", LEXICAL) == {}


def test_full_match_of_a_short_note_scores_near_one() -> None:
    ix = build({"a": "alpha", "b": "beta gamma delta", "c": "epsilon zeta"})
    s = ix.scores("alpha", lexical(bm25_k1=0.0))
    assert s["a"] == 1.0
    s2 = ix.scores("alpha beta", lexical(bm25_k1=0.0))
    assert s2["a"] + s2["b"] == pytest.approx(1.0)  # each gets its share of the query's idf mass


def test_a_note_matching_every_query_word_scores_exactly_one_without_saturation() -> None:
    docs = {f"d{i}": " ".join(f"w{j}" for j in range(i, i + 7)) for i in range(30)}
    ix = build(docs)
    flat = lexical(bm25_k1=0.0)
    for q in ("w5 w6 w7 w8 w9 w10", "w11 w12 w13", "w20 w26 w21 w25 w22 w24 w23"):
        got = ix.scores(q, flat)
        words = set(tokenize(q))
        full = [k for k, t in docs.items() if words <= set(t.split())]
        assert full and all(got[k] == 1.0 for k in full)
        assert all(v <= 1.0 for v in got.values())


def test_unknown_query_terms_lower_the_score() -> None:
    ix = build(CORPUS)
    assert ix.scores("soup zzzunknown", LEXICAL)["c"] < ix.scores("soup", LEXICAL)["c"]


def test_length_normalisation_and_b() -> None:
    docs = {"short": "redis cache", "long": "redis " + " ".join(f"w{i}" for i in range(200))}
    ix = build(docs)
    s = ix.scores("redis", LEXICAL)
    assert s["short"] > s["long"]
    s0 = ix.scores("redis", lexical(bm25_b=0.0))
    assert s0["short"] == s0["long"]


def test_term_frequency_saturates_with_k1() -> None:
    docs = {"once": "cache x y z", "many": "cache cache cache cache", "other": "misc"}
    ix = build(docs)
    s = ix.scores("cache", lexical(bm25_b=0.0))
    assert s["many"] > s["once"]
    flat = ix.scores("cache", lexical(bm25_k1=0.0))
    assert flat["many"] == flat["once"]


def test_repeated_query_words_count_once() -> None:
    ix = build(CORPUS)
    assert ix.scores("deploy deploy DEPLOY", LEXICAL) == ix.scores("deploy", LEXICAL)


def test_remove_and_replace_keep_statistics_consistent() -> None:
    ix = build(CORPUS)
    assert len(ix) == 6 and "c" in ix
    ix.remove("c")
    ix.remove("c")  # a second remove is a no-op
    ix.remove("never-added")
    assert "c" not in ix and len(ix) == 5
    rest = {k: v for k, v in CORPUS.items() if k != "c"}
    assert ix.scores("soup", LEXICAL) == {}
    assert ix.doc_freq("soup") == 0
    got, want = ix.scores("redis deploy", LEXICAL), reference.bm25(rest, "redis deploy", LEXICAL)
    assert got == pytest.approx(want, rel=1e-12)
    ix.add("a", "now about soup")  # replaces a's text
    assert len(ix) == 5
    rest["a"] = "now about soup"
    for q in ("soup", "deploy pipeline", "redis"):
        assert ix.scores(q, LEXICAL) == pytest.approx(reference.bm25(rest, q, LEXICAL), rel=1e-12)


def test_empty_texts_count_as_documents() -> None:
    ix = build({"empty": "...", "a": "word"})
    assert len(ix) == 2
    assert ix.scores("word", LEXICAL) == pytest.approx(
        reference.bm25({"empty": "...", "a": "word"}, "word", LEXICAL)
    )
    ix.remove("a")
    assert ix.scores("word", LEXICAL) == {}


WORDS = st.sampled_from(["redis", "event", "note", "agent", "token", "budget", "x", "Café", "ÉTÉ"])
TEXTS = st.lists(WORDS, min_size=0, max_size=30).map(" ".join)


@settings(max_examples=60, deadline=None)
@given(
    docs=st.dictionaries(st.text("abcdef", min_size=1, max_size=3), TEXTS, max_size=12),
    query=st.lists(WORDS, min_size=1, max_size=4).map(" ".join),
    k1=st.floats(0.0, 3.0),
    b=st.floats(0.0, 1.0),
    drop=st.sets(st.text("abcdef", min_size=1, max_size=3), max_size=4),
)
def test_incremental_index_equals_reference(
    docs: dict[str, str], query: str, k1: float, b: float, drop: set[str]
) -> None:
    cfg = lexical(bm25_k1=k1, bm25_b=b)
    ix = LexicalIndex()
    for k, t in docs.items():
        ix.add(k, t + " extra")  # then replaced: replacement must fully undo the first add
    for k, t in docs.items():
        ix.add(k, t)
    for k in drop:
        ix.remove(k)
    live = {k: t for k, t in docs.items() if k not in drop}
    got = ix.scores(query, cfg)
    want = reference.bm25(live, query, cfg)
    assert got.keys() == want.keys()
    for k, v in got.items():
        assert 0.0 < v <= 1.0
        assert v == pytest.approx(want[k], rel=1e-9)
    texts: dict[str, list[str]] = {}
    for k, t in live.items():
        texts.setdefault(t, []).append(k)
    for keys in texts.values():
        assert len({got.get(k, 0.0) for k in keys}) == 1


# ---------------------------------------------------------------- cosine (the worker's numpy path)


def note(note_id: str, text: str, embedding: list[float] | None = None, *,
         agent: str = "a1", scope: Scope = "shared") -> NoteState:
    return NoteState(
        note_id=note_id, agent=agent, scope=scope, kind="note", text=text, tokens=10,
        created_at=T0, embedding=embedding,
    )


def worker_cosine(a: list[float], b: list[float]) -> float:
    """The production relevance of a note embedded as ``a`` to a query embedded as ``b`` (no
    word in common, so nothing but the cosine can score it)."""
    idx = build_index("t", {"n": note("n", "unrelated", a)})
    return idx.relevance("query", b, LEXICAL).get("n", 0.0)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ([1.0, 0.0], [1.0, 0.0], 1.0),
        ([1.0, 0.0], [2.0, 0.0], 1.0),
        ([1.0, 0.0], [0.0, 1.0], 0.0),
        ([1.0, 0.0], [-1.0, 0.0], 0.0),
        ([1.0, 1.0], [1.0, 0.0], 1 / math.sqrt(2)),
        ([3.0, 4.0], [4.0, 3.0], 24 / 25),
        ([0.0, 0.0], [1.0, 0.0], 0.0),
        ([1.0, 0.0], [0.0, 0.0], 0.0),
        ([1.0, -2.0, 3.0], [1.0, -2.0, 3.0], 1.0),
    ],
)
def test_cosine(a: list[float], b: list[float], expected: float) -> None:
    assert worker_cosine(a, b) == pytest.approx(expected, abs=1e-15)
    assert reference.cosine(a, b) == pytest.approx(expected, abs=1e-15)  # the reference too


def test_cosine_never_exceeds_one_despite_rounding() -> None:
    v = [0.57, -0.39, -0.05]  # unclamped, dot / (|v| * |v|) is 1.0000000000000002
    assert worker_cosine(v, v) == 1.0


def test_vectors_of_different_dimensions_are_never_compared() -> None:
    # a 3-d note and a 2-d query come from different models: no cosine, the note's BM25 counts
    notes = {"far": note("far", "unrelated", [1.0, 0.0, 0.0]),
             "lex": note("lex", "redis", [1.0, 0.0, 0.0]), "pad": note("pad", "lunch")}
    idx = build_index("t", notes)
    rel = idx.relevance("redis", [1.0, 0.0], LEXICAL)
    assert rel == {"lex": build({k: n.text for k, n in notes.items()}).scores(
        "redis", LEXICAL)["lex"]}


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.floats(-1e3, 1e3), min_size=1, max_size=8).flatmap(
        lambda a: st.tuples(st.just(a), st.lists(st.floats(-1e3, 1e3), min_size=len(a),
                                                 max_size=len(a)))
    )
)
def test_cosine_is_clamped_and_symmetric(ab: tuple[list[float], list[float]]) -> None:
    a, b = ab
    c = worker_cosine(a, b)
    assert 0.0 <= c <= 1.0
    assert c == pytest.approx(reference.cosine(a, b), abs=1e-12)
    # The dot product is bitwise symmetric (same products, same order), so a cosine clamped to
    # 0 is 0 both ways; the norms of note and query go through different numpy kernels (einsum
    # over the matrix, dot for the query), so the quotient may differ in the last bit.
    assert c == pytest.approx(worker_cosine(b, a), rel=1e-15, abs=0.0)


# ---------------------------------------------------------------- NamespaceIndex.relevance


def test_relevance_uses_cosine_when_both_have_embeddings() -> None:
    notes = [
        note("emb", "nothing in common", [1.0, 0.0]),
        note("emb-opp", "redis here", [-1.0, 0.0]),
        note("lex", "redis streams"),
        note("other-dim", "redis", [1.0, 0.0, 0.0]),
        note("none", "unrelated text"),
    ]
    idx = build_index("t", {n.note_id: n for n in notes})
    lex = build({n.note_id: n.text for n in notes}).scores("redis", LEXICAL)
    rel = idx.relevance("redis", [1.0, 1.0], LEXICAL)
    assert rel["emb"] == pytest.approx(1 / math.sqrt(2))
    assert "emb-opp" not in rel  # cosine 0 even though its text matches
    assert rel["lex"] == lex["lex"]
    assert rel["other-dim"] == lex["other-dim"]  # incomparable embedding -> lexical
    assert "none" not in rel
    no_emb = idx.relevance("redis", None, LEXICAL)
    assert no_emb == {k: lex[k] for k in ("emb-opp", "lex", "other-dim")}
    assert build_index("t", {"emb": notes[0]}).relevance("redis", None, LEXICAL) == {}
    for emb in ([1.0, 1.0], None):
        want = reference.relevance(notes, "redis", emb, LEXICAL)
        assert idx.relevance("redis", emb, LEXICAL) == pytest.approx(want, rel=1e-12)


def test_relevance_with_a_zero_query_embedding() -> None:
    notes = [note("emb", "redis", [1.0, 0.0]), note("lex", "redis streams")]
    idx = build_index("t", {n.note_id: n for n in notes})
    rel = idx.relevance("redis", [0.0, 0.0], LEXICAL)
    assert rel == {"lex": build({n.note_id: n.text for n in notes}).scores(
        "redis", LEXICAL)["lex"]}
    assert idx.relevance("redis", [2.0, 0.0], LEXICAL)["emb"] == 1.0


def test_an_agents_private_notes_never_shift_another_agents_scores() -> None:
    shared = {k: note(k, t) for k, t in CORPUS.items()}
    mine = {"p1": note("p1", "redis redis redis", agent="alice", scope="private"),
            "p2": note("p2", "soup deploy", agent="alice", scope="private")}
    idx = build_index("t", {**shared, **mine})
    for q in ("redis streams", "deploy soup"):
        bob = idx.relevance(q, None, LEXICAL, agent="bob")
        assert bob == build_index("t", shared).relevance(q, None, LEXICAL, agent="bob")
        assert not bob.keys() & mine.keys()
        alice = idx.relevance(q, None, LEXICAL, agent="alice")
        assert alice == pytest.approx(
            reference.relevance([*shared.values(), *mine.values()], q, None, LEXICAL, "alice"),
            rel=1e-12)
        assert alice.keys() & mine.keys()
        assert alice != bob


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.lists(st.sampled_from(
    ["alpha", "beta", "gamma", "delta", "é"]), min_size=1, max_size=6)), max_size=12),
    st.lists(st.sampled_from(["alpha", "beta", "zeta", "gamma"]), min_size=1, max_size=3))
def test_scores_over_disjoint_indexes_equal_one_combined_index(
        docs: list[tuple[bool, list[str]]], query: list[str]) -> None:
    a, b, both = LexicalIndex(), LexicalIndex(), LexicalIndex()
    for i, (in_a, words) in enumerate(docs):
        (a if in_a else b).add(f"d{i}", " ".join(words))
        both.add(f"d{i}", " ".join(words))
    q = " ".join(query)
    got = scores_over([a, b], q, LEXICAL)
    assert got == both.scores(q, LEXICAL)  # bit for bit: splitting changes no sum
    want = reference.bm25({f"d{i}": " ".join(w) for i, (_, w) in enumerate(docs)}, q, LEXICAL)
    assert got.keys() == want.keys()
    for k, v in want.items():
        assert got[k] == pytest.approx(v, rel=1e-12)
