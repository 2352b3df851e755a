"""Calibrated relevance (the default): every feature varies here, against a note-by-note
restatement (``tests.support.reference.calibrated``), the candidate rules, determinism over
slot layouts, and the seed's cases through the product's ranking path."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hivemind_memory.api_stub.protocol.messages import QueryRequest, encode
from hivemind_memory.projections.ranking.calibrated import FEATURES, candidates, limit_for
from hivemind_memory.projections.ranking.config import (
    DEFAULT,
    Calibration,
    RankingConfig,
    with_overrides,
)
from hivemind_memory.projections.ranking.embedders import embedder_for
from hivemind_memory.projections.ranking.index import NamespaceIndex, build_index
from hivemind_memory.projections.state import NoteState
from hivemind_memory.worker.engine import run_rank
from tests.support import reference

NOW = datetime(2026, 6, 1, tzinfo=UTC)
EMBEDDER = embedder_for("wordllama")
assert EMBEDDER is not None


def note(nid: str, text: str, *, agent: str = "ann", minutes: float = 0.0, tokens: int = 20,
         **kw: Any) -> NoteState:
    return NoteState(note_id=nid, agent=agent, scope=kw.pop("scope", "shared"),
                     kind=kw.pop("kind", "note"), text=text, tokens=tokens,
                     created_at=NOW - timedelta(days=30) + timedelta(minutes=minutes), **kw)


def index(notes: list[NoteState], embedder: Any = EMBEDDER) -> NamespaceIndex:
    return build_index("t", {n.note_id: n for n in notes}, embedder)


def relevance(idx: NamespaceIndex, text: str, cfg: RankingConfig = DEFAULT, agent: str = "",
              embedding: list[float] | None = None) -> dict[str, float]:
    cos = idx.query_cosines(EMBEDDER.embed([text]))
    slots, rel = idx.calibrated_slots(text, embedding, cfg, agent,
                                      cosine=None if cos is None else cos[:, 0])
    ids = idx.cols.ids
    return {ids[s]: float(v) for s, v in zip(slots.tolist(), rel.tolist(), strict=True)}


def features_of(idx: NamespaceIndex, text: str, cfg: RankingConfig = DEFAULT,
                agent: str = "") -> dict[str, dict[str, float]]:
    cos = idx.query_cosines(EMBEDDER.embed([text]))
    seq, cols = idx.feature_columns(text, None, cfg, agent, None,
                                    None if cos is None else cos[:, 0])
    ids = idx.cols.ids
    return {ids[s]: {f: float(c[i]) for f, c in zip(FEATURES, cols, strict=True)}
            for i, s in enumerate(seq.tolist())}


WORDS = ["redis", "stream", "deploy", "canary", "rollback", "lunch", "menu", "pottery",
         "painting", "adoption", "agency", "the", "a", "of"]
AGENTS = ["ann", "bob", "carol", "agent-7"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.lists(st.sampled_from(WORDS), min_size=1, max_size=12),
                          st.sampled_from(AGENTS), st.sampled_from([0.0, 1.0, 2.0, 30.0, 61.0,
                                                                    600.0, 3000.0]),
                          st.sampled_from([1, 5, 20, 127, 128, 500, 3000]), st.booleans(),
                          st.booleans()),
                min_size=1, max_size=14),
       st.lists(st.sampled_from([*WORDS, "carol", "agent", "7", "bob"]), min_size=1,
                max_size=5),
       st.sampled_from(["", "bob", "carol"]),
       st.sampled_from([0, 1, 2, 3]), st.sampled_from([0.0, 1.5, 60.0]))
def test_features_and_probability_match_the_note_by_note_restatement(
        rows: list[tuple[list[str], str, float, int, bool, bool]], q: list[str], agent: str,
        context_notes: int, context_minutes: float) -> None:
    notes = []
    t = 0.0
    for i, (words, author, step, tokens, private, gone) in enumerate(rows):
        t += step  # gaps inside and outside the context window; equal times too
        notes.append(note(f"n{i}", " ".join(words), agent=author, minutes=t, tokens=tokens,
                          scope="private" if private else "shared", forgotten=gone))
    # nearest off: the restatement is the model's probability, before the candidate rules
    # (a small namespace's nearest notes by meaning alone are re-ordered by their cosine:
    # test_updates.test_by_meaning_shares_the_best_probability_in_proportion_to_cosine)
    cal = msgspec.structs.replace(DEFAULT.calibration, context_notes=context_notes,
                                  context_minutes=context_minutes, nearest=0)
    cfg = msgspec.structs.replace(DEFAULT, calibration=cal)
    query = " ".join(q)
    idx = index(notes)
    got = features_of(idx, query, cfg, agent)
    slots, lex = idx.cols.bm25(query, cfg, agent)
    lexical = {idx.cols.ids[s]: v for s, v in zip(slots.tolist(), lex.tolist(), strict=True)}
    cos = idx.query_cosines(EMBEDDER.embed([query]))
    assert cos is not None
    cosine = {n.note_id: float(cos[idx.cols.slot[n.note_id], 0]) for n in notes}
    want = reference.calibrated(notes, query, lexical, cosine, cfg, agent)
    assert set(got) == set(want)  # visible live notes only
    for nid, (f, _) in want.items():
        assert [got[nid][k] for k in FEATURES] == pytest.approx(f, rel=1e-12, abs=1e-15)
    rel = relevance(idx, query, cfg, agent)
    for nid, p in rel.items():
        assert p == pytest.approx(want[nid][1], rel=1e-12)
        assert 0.0 < p <= 1.0


def test_context_is_the_best_match_among_close_neighbours_in_creation_order() -> None:
    base = [note("q", "what agency did you call about adoption", minutes=0),
            note("answer", "called them on monday, lovely people", minutes=1),
            note("far", "called them on monday, lovely people", minutes=200),
            note("mid", "nothing here", minutes=2.5)]
    f = features_of(index(base), "adoption agency")
    assert f["answer"]["context_bm25"] == 1.0  # the question right before it
    assert f["far"]["context_bm25"] == 0.0  # written 200 minutes later
    assert f["mid"]["context_bm25"] == 1.0  # two notes on, still within the hour
    one = msgspec.structs.replace(DEFAULT, calibration=msgspec.structs.replace(
        DEFAULT.calibration, context_notes=1))
    assert features_of(index(base), "adoption agency", one)["mid"]["context_bm25"] == 0.0
    rel = relevance(index(base), "adoption agency")
    # context raises a candidate's probability, it makes none ("answer" shares no word)
    assert "answer" not in rel and "q" in rel


def test_a_neighbour_match_raises_a_candidate() -> None:
    near = [note("q", "adoption agency", minutes=0), note("a", "called the agency", minutes=1)]
    far = [note("q", "adoption agency", minutes=0), note("a", "called the agency", minutes=300)]
    assert relevance(index(near), "adoption agency")["a"] > \
        relevance(index(far), "adoption agency")["a"]


def test_author_named_means_the_agents_words_in_order() -> None:
    notes = [note("c", "pottery class", agent="carol"), note("a", "pottery class", agent="ann"),
             note("x", "pottery class", agent="agent-7", minutes=300)]
    f = features_of(index(notes), "what did carol do at the pottery class")
    assert f["c"]["author_named"] == 1.0 and f["a"]["author_named"] == 0.0
    assert features_of(index(notes), "pottery agent 7")["x"]["author_named"] == 1.0
    assert features_of(index(notes), "pottery 7 agent")["x"]["author_named"] == 0.0
    rel = relevance(index(notes), "what did carol do at the pottery class")
    assert rel["c"] > rel["a"]  # same text, the named author's note is likelier


def test_length_counts_up_to_max_tokens() -> None:
    """Up to ``max_tokens`` (64 by default: few of the fit's notes are longer) a longer note
    is likelier; beyond it every length counts as ``max_tokens``."""
    assert DEFAULT.calibration.max_tokens == 64
    notes = [note(f"t{k}", "redis stream checkpoint", tokens=k, minutes=300 * i)
             for i, k in enumerate((5, 40, 63, 64, 65, 128, 2000))]
    f = features_of(index(notes), "redis checkpoint")
    assert f["t5"]["log_tokens"] == pytest.approx(math.log(5))
    assert f["t63"]["log_tokens"] == pytest.approx(math.log(63))
    assert f["t64"]["log_tokens"] == pytest.approx(math.log(64))
    assert (f["t64"]["log_tokens"] == f["t65"]["log_tokens"] == f["t128"]["log_tokens"]
            == f["t2000"]["log_tokens"])
    # the length features favour length up to the cap, not beyond (long-note term off)
    flat = msgspec.structs.replace(DEFAULT, calibration=msgspec.structs.replace(
        DEFAULT.calibration, long_note_log_tokens=0.0))
    rel = relevance(index(notes), "redis checkpoint", flat)
    assert rel["t5"] < rel["t40"] < rel["t63"] < rel["t64"] == rel["t128"] == rel["t2000"]


def logit(p: float) -> float:
    return math.log(p / (1.0 - p))


def test_a_note_longer_than_long_note_tokens_loses_odds_in_proportion_to_its_log_length(
        ) -> None:
    """The long-note term: past ``long_note_tokens`` (192) a note's logit gains
    ``long_note_log_tokens`` (-0.5) times ``ln(tokens / 192)``; up to it nothing. The notes
    hold the same words (the same BM25 and cosine) and are hours apart (no context)."""
    cal = DEFAULT.calibration
    assert (cal.long_note_tokens, cal.long_note_log_tokens) == (192, -0.5)
    sizes = (64, 150, 192, 193, 384, 512, 1536)
    notes = [note(f"t{k}", "redis stream checkpoint", tokens=k, minutes=300 * i)
             for i, k in enumerate(sizes)]
    rel = relevance(index(notes), "redis checkpoint")
    assert rel["t64"] == rel["t150"] == rel["t192"]  # at most 192: no term
    for k in (193, 384, 512, 1536):
        assert logit(rel[f"t{k}"]) - logit(rel["t192"]) == pytest.approx(
            -0.5 * math.log(k / 192), rel=1e-9, abs=1e-12)
    assert rel["t1536"] < rel["t384"] < rel["t193"] < rel["t192"]
    # the knot and the coefficient are the config's
    moved = with_overrides(DEFAULT, {"calibration": {"long_note_tokens": 384,
                                                     "long_note_log_tokens": -2.0}})
    rel = relevance(index(notes), "redis checkpoint", moved)
    assert rel["t192"] == rel["t384"]
    assert logit(rel["t1536"]) - logit(rel["t384"]) == pytest.approx(-2.0 * math.log(4),
                                                                    rel=1e-9)
    off = with_overrides(DEFAULT, {"calibration": {"long_note_log_tokens": 0.0}})
    rel = relevance(index(notes), "redis checkpoint", off)
    assert rel["t64"] == rel["t1536"]


def test_a_long_note_holding_the_only_match_is_still_served() -> None:
    """A long note is less likely than a short one with the same match, not out: when it
    alone holds the query's words its passage is packed."""
    filler = " ".join(f"item{i} was checked and logged" for i in range(300))
    long_text = f"{filler} the staging database password rotates every ninety days {filler}"
    notes = [note("long", long_text, tokens=len(long_text.encode()) // 4),
             note("other", "lunch menu pasta on fridays", minutes=300)]
    assert notes[0].tokens > 10 * DEFAULT.calibration.long_note_tokens
    res = run_rank(index(notes), QueryRequest(ns="t", text="staging database password",
                                              budget=200, as_of=NOW), DEFAULT, NOW,
                   embedder=EMBEDDER)
    assert [n.note_id for n in res.notes] == ["long"]
    assert res.notes[0].passage is not None and "staging database password" in res.notes[0].text


@pytest.mark.parametrize("bad", [{"long_note_tokens": 0}, {"long_note_log_tokens": math.inf},
                                 {"long_note_log_tokens": 2e6}])
def test_a_bad_long_note_setting_is_refused_by_name(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=f"calibration.{next(iter(bad))}"):
        Calibration(**bad)  # type: ignore[arg-type]


def test_bm25_normalises_length_in_full_by_default() -> None:
    """``bm25_b`` is 1 by default: a note's BM25 falls in full proportion to its length over
    the average, so a long note that holds the query's word once weighs less against a short
    one than at 0.75 (a short turn stating a fact against a long reply mentioning it)."""
    assert DEFAULT.bm25_b == 1.0
    filler = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike"
    notes = [note("short", "redis crash"), note("long", f"redis {filler} november", minutes=300),
             note("other", "lunch menu pasta", minutes=600)]
    avg = (2 + 15 + 3) / 3  # words as BM25 counts them

    def ratio(b: float) -> float:  # the long note's BM25 over the short one's (same idf)
        k1 = DEFAULT.bm25_k1
        return (1 + k1 * (1 - b + b * 2 / avg)) / (1 + k1 * (1 - b + b * 15 / avg))

    f = features_of(index(notes), "redis")
    assert f["short"]["bm25"] == 1.0
    assert f["long"]["bm25"] == pytest.approx(ratio(1.0), rel=1e-9)
    assert ratio(1.0) < ratio(0.75) - 0.1  # the inputs tell the two settings apart
    old = features_of(index(notes), "redis", msgspec.structs.replace(DEFAULT, bm25_b=0.75))
    assert old["long"]["bm25"] == pytest.approx(ratio(0.75), rel=1e-9)


def test_bm25_is_relative_to_the_best_visible_match() -> None:
    weak = note("weak", "redis lunch menu pottery painting", minutes=0)
    strong = note("strong", "redis stream", agent="bob", scope="private", minutes=300)
    both = index([weak, strong])
    assert features_of(both, "redis stream")["weak"]["bm25"] == 1.0  # bob's note unseen
    assert features_of(both, "redis stream", agent="bob")["weak"]["bm25"] < 0.5
    assert features_of(both, "redis stream", agent="bob")["strong"]["bm25"] == 1.0


def test_caller_embeddings_take_precedence_for_notes_that_carry_one() -> None:
    notes = [note("mine", "lunch menu", embedding=[1.0, 0.0]),
             note("other", "lunch menu", minutes=300)]
    idx = index(notes)
    cos = idx.query_cosines(EMBEDDER.embed(["lunch menu"]))
    assert cos is not None
    seq, cols = idx.feature_columns("lunch menu", [0.6, 0.8], DEFAULT, "", None, cos[:, 0])
    at = {idx.cols.ids[s]: i for i, s in enumerate(seq.tolist())}
    c = cols[FEATURES.index("cosine")]
    assert c[at["mine"]] == pytest.approx(0.6)  # the caller's vectors
    assert c[at["other"]] == pytest.approx(1.0, abs=0.01)  # the bundled embedder's


def test_without_an_embedder_relevance_is_lexical_features_only() -> None:
    notes = [note("a", "redis stream"), note("b", "lunch menu", minutes=300)]
    idx = index(notes, embedder=None)
    assert idx.derived is None and idx.query_cosines(np.zeros((1, 128))) is None
    slots, _ = idx.calibrated_slots("redis", None, DEFAULT)
    assert [idx.cols.ids[s] for s in slots.tolist()] == ["a"]


def test_candidates_need_evidence_of_their_own() -> None:
    notes = [note("lex", "redis stream checkpoint"),
             note("sem", "fixing my car at the garage", minutes=300),
             note("none", "spreadsheet formula", minutes=600)]
    # nearest off: in a namespace this small the nearest notes are candidates anyway
    # (test_updates.test_the_nearest_rule_finds_a_paraphrase_that_shares_no_word)
    plain = msgspec.structs.replace(DEFAULT, calibration=msgspec.structs.replace(
        DEFAULT.calibration, nearest=0))
    rel = relevance(index(notes), "automobile repair redis", plain)
    assert set(rel) == {"lex", "sem"}  # a close meaning counts, an unrelated note never
    strict = msgspec.structs.replace(DEFAULT, calibration=msgspec.structs.replace(
        DEFAULT.calibration, min_cosine=0.99, nearest=0))
    assert set(relevance(index(notes), "automobile repair redis", strict)) == {"lex"}
    floor = msgspec.structs.replace(DEFAULT, calibration=msgspec.structs.replace(
        DEFAULT.calibration, floor=0.999, nearest=0, tail_notes=0))
    assert relevance(index(notes), "automobile repair redis", floor) == {}


def test_top_candidates_include_every_tie_and_grow_with_the_budget() -> None:
    p = np.array([0.1, 0.5, 0.3, 0.5, 0.2])
    assert candidates(p, 2).tolist() == [1, 3]
    assert candidates(p, 1).tolist() == [1, 3]  # tied at the cut: both
    assert candidates(p, 3).tolist() == [1, 2, 3]
    assert candidates(p, 9).tolist() == [0, 1, 2, 3, 4]
    cfg = msgspec.structs.replace(DEFAULT, max_candidates=3)
    assert limit_for(cfg, 20) == 3 and limit_for(cfg, 100) == 10
    notes = [note(f"n{i}", "redis " + "x " * i, tokens=10 + i, minutes=300 * i)
             for i in range(8)]
    rel = relevance(index(notes), "redis", cfg)
    assert len(rel) == 3 and min(rel.values()) >= max(
        v for k, v in relevance(index(notes), "redis").items() if k not in rel)


def test_calibration_keys_are_validated() -> None:
    for bad in ({"bm25": float("nan")}, {"intercept": 2e6}, {"context_notes": 17},
                {"context_minutes": -1.0}, {"max_tokens": 0}, {"min_cosine": 1.5},
                {"floor": 1.5}):
        with pytest.raises(ValueError, match="calibration"):
            Calibration(**bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_candidates"):
        RankingConfig(max_candidates=0)
    with pytest.raises(ValueError, match="embedder"):
        RankingConfig(embedder="os.system")


# -- determinism and the seed's cases, through the product's ranking path -------------------

RULES_OFF = with_overrides(DEFAULT, {"near_identical": 0.0, "updates": {"margin": 0.0}})
"""The defaults without the near-identical and updated-facts rules (``test_updates``)."""


def ranked(notes: list[NoteState], text: str, budget: int, cfg: RankingConfig = DEFAULT,
           now: datetime = NOW) -> Any:
    req = QueryRequest(ns="t", text=text, budget=budget, explain=True)
    return run_rank(index(notes), req, cfg, now, embedder=EMBEDDER)


def test_same_notes_same_bytes_whatever_the_slot_layout() -> None:
    rnd = random.Random(5)
    notes = [note(f"n{i:02d}", " ".join(rnd.choices(WORDS, k=rnd.randint(2, 9))),
                  agent=rnd.choice(AGENTS), minutes=rnd.choice([0, 1, 2, 90]) * i,
                  tokens=rnd.choice([3, 20, 90, 400]), uses=rnd.choice([0, 5]),
                  kind=rnd.choice(["note", "scratch"])) for i in range(40)]
    req = QueryRequest(ns="t", text="redis deploy pottery carol", budget=300, explain=True)
    bulk = run_rank(index(notes), req, DEFAULT, NOW, embedder=EMBEDDER)
    inc = NamespaceIndex("t")
    for n in rnd.sample(notes, len(notes)):  # another arrival order: other slots
        inc.put(n)
        inc.embed_missing(EMBEDDER)
    again = run_rank(inc, req, DEFAULT, NOW, embedder=EMBEDDER)
    assert encode(again) == encode(bulk)
    assert bulk.candidates and {c.note_id for c in bulk.candidates} != {n.note_id for n in notes}


def test_a_year_old_best_match_still_wins() -> None:
    notes = [note("old", "the redis stream checkpoint is written after each batch",
                  tokens=30),
             note("new", "stream of consciousness about lunch", tokens=30, minutes=43_000)]
    old = msgspec.structs.replace(notes[0], created_at=NOW - timedelta(days=365))
    res = ranked([old, notes[1]], "redis stream checkpoint", 30)
    assert [n.note_id for n in res.notes] == ["old"]
    c = {x.note_id: x for x in res.candidates}
    assert c["old"].recency < c["new"].recency and c["old"].score > c["new"].score


def test_longterm_notes_do_not_decay_and_scratch_notes_fade() -> None:
    old = NOW - timedelta(days=700)
    notes = [msgspec.structs.replace(note("kept", "redis stream checkpoint", uses=5),
                                     created_at=old),
             msgspec.structs.replace(note("short", "redis stream checkpoint", uses=4,
                                          minutes=300), created_at=old),
             msgspec.structs.replace(note("scratch", "redis stream checkpoint", kind="scratch",
                                          minutes=600), created_at=NOW - timedelta(days=10)),
             msgspec.structs.replace(note("fresh", "redis stream checkpoint", minutes=900),
                                     created_at=NOW - timedelta(days=10))]
    # one text four times: the decay, not the near-identical rule, is under test here
    c = {x.note_id: x for x in ranked(notes, "redis stream checkpoint", 1000,
                                      RULES_OFF).candidates}
    assert c["kept"].tier == "longterm" and c["kept"].recency == 1.0
    assert c["short"].tier == "short" and 0.35 <= c["short"].recency < 0.4
    assert c["scratch"].recency < 0.1 < c["fresh"].recency
    assert c["kept"].relevance == c["short"].relevance  # same text, same neighbours' match
    assert c["kept"].score > c["fresh"].score > c["scratch"].score


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 60), st.integers(0, 2**32 - 1), st.integers(0, 4))
def test_context_from_the_few_hits_equals_the_dense_context(n: int, seed: int, k: int) -> None:
    from hivemind_memory.projections.ranking.calibrated import context, sparse_context

    rng = np.random.default_rng(seed)
    values = np.where(rng.random(n) < 0.2, rng.random(n), 0.0)
    near = tuple(rng.random(n - j) < 0.7 for j in range(1, min(k, n - 1) + 1))
    at = values.nonzero()[0]
    assert (sparse_context(at, values[at], near, n) == context(values, near)).all()
