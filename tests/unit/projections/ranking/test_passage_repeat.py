"""A long note's passages after its best one count less (``RankingConfig.passage_repeat``):
each passage's rank among its note's candidate passages by their own match, the score
multiplied by ``passage_repeat ** rank`` unless the note holds the query's best candidate
(the lead), the packer then taking another note's evidence over the long note's second
passage, the rank shown, and configs filed before the key (off)."""

from __future__ import annotations

import math
from typing import Any

import msgspec
import pytest

from hivemind_memory.api_stub.protocol.messages import QueryRequest
from hivemind_memory.projections.ranking.config import (
    DEFAULT,
    LEGACY,
    RankingConfig,
    config_from_json,
    legacy_form,
    with_overrides,
)
from hivemind_memory.projections.ranking.index import build_index
from hivemind_memory.projections.ranking.rank_result import PRINTS_AS_ZERO, Passage
from hivemind_memory.projections.ranking.ranker import repeat_ranks
from hivemind_memory.projections.state import NoteState
from hivemind_memory.worker.engine import run_rank, to_result
from tests.unit.projections.ranking.test_passages import EMBEDDER, NOW, note

QUESTION = "which dentist appointment did I book for my daughter Lena?"
FILLER = " ".join(["the", "weather", "was", "mild", "and", "we", "walked", "along", "river",
                   "path"] * 3)
LONG = ("I booked a dentist appointment for my daughter Lena at the clinic on Elm street. "
        + FILLER + " Lena's dentist appointment is booked for Tuesday morning at nine. "
        + FILLER + " My daughter Lena dislikes the dentist.")
"""125 tokens: three passages of the default 48, each holding some of the question's words
(the first the most)."""
OTHER = ("We took Lena to the dentist last spring; the waiting room had fish and a big window, "
         "and we read two books while we waited for our turn with the nurse and the doctor.")
"""Another note, 40 days older, that holds fewer of the question's words than the long
note's second passage."""
LEAD = "I booked Lena's dentist appointment; my daughter goes on Tuesday."
"""A short note that matches best of all (the query's lead candidate)."""
OFF = with_overrides(DEFAULT, {"passage_repeat": 1.0})


def notes(lead: bool) -> list[NoteState]:
    got = [note("long", LONG, 2), note("other", OTHER, 40),
           note("walk", "We walked along the river path on Sunday.", 3)]
    return [*got, note("lead", LEAD, 1)] if lead else got


def ranked(cfg: RankingConfig, budget: int = 110, lead: bool = True) -> Any:
    idx = build_index("t", {n.note_id: n for n in notes(lead)}, EMBEDDER)
    req = QueryRequest(ns="t", text=QUESTION, budget=budget, explain=True)
    return run_rank(idx, req, cfg, NOW, embedder=EMBEDDER), req


def _items(res: Any) -> list[tuple[str, int]]:
    return [(n.note_id, -1 if n.passage is None else n.passage.index) for n in res.notes]


def test_the_long_notes_second_passage_gives_way_to_another_notes_evidence() -> None:
    """Budget 110 fits the lead note (17 tokens) and two of the long note's 43-token
    passages, or one and the other note (42 tokens): without the rule the long note's two
    best passages are packed (each a share of its probability); with it, its best passage
    and the other note."""
    assert note("long", LONG, 2).tokens == 125
    on, _ = ranked(DEFAULT)
    off, _ = ranked(OFF)
    assert sorted(_items(off)) == [("lead", -1), ("long", 0), ("long", 1)]
    assert sorted(_items(on)) == [("lead", -1), ("long", 0), ("other", -1)]
    assert on.used <= 110 and on.method == "exact"


def test_the_passages_of_the_note_holding_the_best_candidate_keep_their_share() -> None:
    """Without the lead note the long note's best passage is the query's best candidate: its
    passages are the likeliest place of the whole answer, so none is lowered (no rank set,
    the same scores and packing as with the rule off: its two best passages at budget 90)."""
    on, _ = ranked(DEFAULT, 90, lead=False)
    off, _ = ranked(OFF, 90, lead=False)
    assert on.candidates[0].note_id == "long"
    assert sorted(_items(on)) == sorted(_items(off)) == [("long", 0), ("long", 1)]
    assert [c.score for c in on.candidates] == [c.score for c in off.candidates]
    assert all(c.passage is None or c.passage.rank == 0 for c in on.candidates)


def test_each_passages_score_is_its_shared_score_times_the_weight_to_its_rank() -> None:
    """The candidates' scores, passage by passage, against the rule off: rank 0 keeps its
    score, rank k is multiplied by ``passage_repeat ** k`` (two weights and three ranks, so a
    weight applied once per rank, or to the rank plus one, fails); the relevance and a whole
    note's score do not move, and each passage names its rank."""
    for w in (0.1, 0.5):
        on, _ = ranked(with_overrides(DEFAULT, {"passage_repeat": w}))
        off, _ = ranked(OFF)
        base = {(c.note_id, c.passage.index if c.passage else -1): c for c in off.candidates}
        ranks = []
        for c in on.candidates:
            was = base[(c.note_id, c.passage.index if c.passage else -1)]
            assert c.relevance == was.relevance
            if c.passage is None:
                assert c.score == was.score
                continue
            ranks.append((c.passage.index, c.passage.rank))
            assert c.score == pytest.approx(was.score * w ** c.passage.rank, abs=2e-6)
            assert was.passage is not None and was.passage.rank == 0  # off: never set
        assert sorted(ranks) == [(0, 0), (1, 1), (2, 2)]  # the first holds the most


def test_repeat_ranks_order_a_notes_passages_by_match_then_place() -> None:
    assert repeat_ranks([0.1, 0.3, 0.2]) == [2, 0, 1]
    assert repeat_ranks([0.2, 0.2, 0.3]) == [1, 2, 0]  # a tie: the earlier passage first
    # a passage without a match is no candidate: it takes no rank from the others
    assert repeat_ranks([0.0, 0.2, PRINTS_AS_ZERO, 0.1]) == [0, 0, 0, 1]
    assert repeat_ranks([]) == []


def test_the_rank_is_in_the_answers_json_only_after_the_best_passage() -> None:
    on, req = ranked(DEFAULT, 200)
    out = msgspec.json.decode(msgspec.json.encode(to_result("q", req, NOW, on)))
    places = {n["passage"]["index"]: n["passage"] for n in out["notes"] if n.get("passage")}
    assert "rank" not in places[0] and places[1]["rank"] == 1 and places[2]["rank"] == 2
    assert msgspec.json.encode(Passage(3, 5, 10, 20)) == (
        b'{"index":3,"count":5,"start":10,"end":20}')  # as before the field, at rank 0
    off, req = ranked(OFF, 200)
    assert all("rank" not in n["passage"] for n in msgspec.json.decode(
        msgspec.json.encode(to_result("q", req, NOW, off)))["notes"] if n.get("passage"))


def test_a_config_filed_before_the_key_reads_it_as_off_and_keeps_its_fingerprint() -> None:
    old = msgspec.json.encode({k: v for k, v in msgspec.to_builtins(DEFAULT).items()
                               if k != "passage_repeat"})
    assert config_from_json(old).passage_repeat == 1.0 == LEGACY["passage_repeat"]
    assert DEFAULT.passage_repeat == 0.1
    assert OFF.digest() != DEFAULT.digest()  # it answers differently
    assert OFF.digest() == with_overrides(OFF, {}).digest()
    # a config at the key's old meaning hashes as it did before the key existed
    assert "passage_repeat" not in legacy_form(msgspec.to_builtins(OFF))
    assert "passage_repeat" in legacy_form(msgspec.to_builtins(DEFAULT))


@pytest.mark.parametrize("bad", [0.0, -0.1, 1.5, math.inf, math.nan])
def test_a_bad_weight_is_refused_by_name(bad: float) -> None:
    with pytest.raises(msgspec.ValidationError, match="passage_repeat"):
        with_overrides(DEFAULT, {"passage_repeat": bad})
