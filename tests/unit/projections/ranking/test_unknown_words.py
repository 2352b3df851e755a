"""A question about something the memory was never told (issue 35, a budget that is a
ceiling): a query word that no note the asker may see contains lowers the probability of
every candidate that matches only the rest of the question (``unknown_word_factor``), and
the result names the words. Each case on both sides of its boundary."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hivemind_memory.api_stub.protocol.messages import QueryRequest
from hivemind_memory.projections.ranking.config import DEFAULT, RankingConfig, with_overrides
from hivemind_memory.projections.ranking.embedders import embedder_for
from hivemind_memory.projections.ranking.index import build_index
from hivemind_memory.projections.state import NoteState
from hivemind_memory.worker.engine import run_rank, to_result

NOW = datetime(2026, 6, 1, tzinfo=UTC)
EMBEDDER = embedder_for("wordllama")
ON = with_overrides(DEFAULT, {"unknown_word_factor": 0.0})
"""The rule at its strongest (the default, 1, is off)."""


def note(nid: str, text: str, days: float, *, agent: str = "ann",
         scope: str = "shared") -> NoteState:
    return NoteState(note_id=nid, agent=agent, scope=scope, kind="note", text=text,
                     tokens=20, created_at=NOW - timedelta(days=days))


def ranked(notes: list[NoteState], text: str, cfg: RankingConfig, agent: str = "ann",
           budget: int = 1000) -> Any:
    idx = build_index("t", {n.note_id: n for n in notes}, EMBEDDER)
    req = QueryRequest(ns="t", text=text, budget=budget, explain=True, agent=agent)
    return run_rank(idx, req, cfg, NOW, embedder=EMBEDDER)


BAKING = [note("tarts", "I baked egg tarts for the office party on Friday", 3),
          note("bread", "Sunday I baked sourdough bread with my sister", 9),
          note("trip", "We drove to the coast for a long weekend", 20)]


@pytest.mark.parametrize(("question", "unknown"), [
    ("what did I bake for the office party", []),  # every word is in a note
    ("what did I bake for my uncle's birthday party", ["uncl", "birthday"]),
])
def test_a_word_no_note_holds_empties_the_context_only_when_there_is_one(
        question: str, unknown: list[str]) -> None:
    res = ranked(BAKING, question, ON)
    assert res.unknown_words == unknown
    assert res.nothing_relevant == bool(unknown)
    assert ("tarts" in {n.note_id for n in res.notes}) == (not unknown)


def test_off_by_default_and_a_factor_between_scales_the_lexical_matches() -> None:
    q = "what did I bake for my uncle's birthday party"
    off = ranked(BAKING, q, DEFAULT)
    assert off.unknown_words == [] and "tarts" in {n.note_id for n in off.notes}
    half = ranked(BAKING, q, with_overrides(DEFAULT, {"unknown_word_factor": 0.5}))
    rel_off = {c.note_id: c.relevance for c in off.candidates}
    rel_half = {c.note_id: c.relevance for c in half.candidates}
    # two unknown words: 0.5 ** 2 of each probability (rounded as results print them)
    assert rel_half["tarts"] == pytest.approx(rel_off["tarts"] * 0.25, rel=1e-3)
    assert half.unknown_words == ["uncl", "birthday"]


def test_another_agents_private_note_does_not_make_a_word_known() -> None:
    """bob's private note holds "uncle": for ann the word is unknown (her answer must not
    depend on what bob keeps to himself); for bob it is known."""
    notes = [*BAKING, note("secret", "My uncle loves lemon cake", 1, agent="bob",
                           scope="private")]
    q = "what did I bake for my uncle's party"
    assert ranked(notes, q, ON, agent="ann").unknown_words == ["uncl"]
    bob = ranked(notes, q, ON, agent="bob")
    assert bob.unknown_words == [] and not bob.nothing_relevant


def test_a_note_close_in_meaning_keeps_its_probability() -> None:
    """A paraphrase shares no word: "vehicle" is in no note, but the car note is near the
    question in meaning (cosine above ``calibration.min_cosine``), so it stays; with
    ``min_cosine`` above every cosine it goes."""
    notes = [note("car", "The car needs new winter tyres", 2),
             note("bike", "The bike needs a new chain", 5)]
    q = "vehicle tyres"
    kept = ranked(notes, q, ON)
    assert kept.unknown_words == ["vehicl"]
    assert "car" in {n.note_id for n in kept.notes}
    strict = with_overrides(ON, {"calibration": {"min_cosine": 0.99}})
    assert ranked(notes, q, strict).notes == []


def test_the_result_object_says_which_words() -> None:
    res = ranked(BAKING, "what did I bake for my uncle's birthday party", ON)
    req = QueryRequest(ns="t", text="q", budget=1000)
    out = to_result("q1", req, NOW, res)
    assert out.unknown_words == ["uncl", "birthday"] and out.nothing_relevant
    none = to_result("q2", req, NOW, ranked(BAKING, "egg tarts", ON))
    assert none.unknown_words is None and not none.nothing_relevant


def test_config_rejects_a_factor_outside_zero_to_one() -> None:
    with pytest.raises(Exception, match="unknown_word_factor"):
        with_overrides(DEFAULT, {"unknown_word_factor": 1.5})


@pytest.mark.parametrize(("author", "unknown"), [("rachel", []), ("ann", ["rachel"])])
def test_an_authors_name_is_a_known_word(author: str, unknown: list[str]) -> None:
    """A note seldom names its writer: "rachel" is known when an agent is called so."""
    notes = [*BAKING, note("r", "I baked a lemon cake for the office", 2, agent=author)]
    res = ranked(notes, "what did rachel bake for the office", ON)
    assert res.unknown_words == unknown
    assert "r" in {n.note_id for n in res.notes}  # close in meaning, either way


@pytest.mark.parametrize(("question", "found"), [
    ("hobbies", True),  # every word unknown: a paraphrase, its nearest notes stay
    ("hobbies on weekends", False),  # "weekend" is known: the guitar note matches only it
])
def test_a_question_of_unknown_words_only_is_a_paraphrase(question: str, found: bool) -> None:
    notes = [note("lunch", "We are having tacos and a green salad in the cafeteria at noon", 1),
             note("food", "I am vegetarian and I really dislike spicy dishes", 2),
             note("fun", "On weekends I play guitar and go rock climbing", 3)]
    res = ranked(notes, question, ON, budget=100)
    assert res.unknown_words == ["hobbi"]
    assert ("fun" in {n.note_id for n in res.notes}) == found
