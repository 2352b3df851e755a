"""The figures ``python -m bench quality --task longmemeval`` prints beside turn recall (the
answer in the packed context, evidence turns packed whole) and its ``--halves``, on small
hand-made questions where each figure varies (no shared data needed)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

import pytest

from bench import quality
from bench.longmemeval import Question, answer_in_evidence, half, normalised
from bench.quality_longmemeval import (
    Figures,
    Packed,
    Run,
    figures,
    hivemind_picker,
    run,
    summarise,
)
from hivemind_memory.projections.ranking.config import DEFAULT
from hivemind_memory.projections.state import NoteState

ASKED = datetime(2024, 5, 1, tzinfo=UTC)
FILLER = ("We walked along the harbour and talked about the weather, the trains and the "
          "price of bread for a long while before anyone noticed the time. ")


def turn(nid: str, text: str, minutes: int = 0) -> NoteState:
    return NoteState(note_id=nid, agent="user", scope="shared", kind="note", text=text,
                     tokens=-(-len(text.encode()) // 4),
                     created_at=ASKED - timedelta(days=1, minutes=-minutes))


def question(qid: str, notes: list[NoteState], evidence: tuple[str, ...], answer: str = "",
             qtype: str = "single-session-user", text: str = "Where did I swim?") -> Question:
    return Question(qid, qtype, text, ASKED, tuple(notes), evidence, evidence[-1:], answer)


def test_the_answer_counts_where_one_packed_text_holds_it_casefolded_and_spaced() -> None:
    q = question("q1", [turn("0.s:0", "user: I swam in the Blue\n  Lagoon."),
                        turn("0.s:1", "user: nothing")], ("0.s:0",), answer="blue lagoon")
    assert normalised("  Blue\n\tLAGOON ") == "blue lagoon"
    assert answer_in_evidence(q)
    held = Packed(frozenset({"0.s:0"}), 9, frozenset(), ("swam in the BLUE   lagoon",))
    cut = Packed(frozenset({"0.s:0"}), 9, frozenset(), ("swam in the blue", "lagoon."))
    assert figures(q, held, True).answer == 1.0
    assert figures(q, cut, True).answer == 0.0  # split between two passages: not held
    assert figures(q, held, False).answer is None  # not counted where it cannot be found
    # a number, or a string the evidence turns do not hold, cannot be checked
    assert not answer_in_evidence(question("q2", [turn("0.s:0", "user: 3 laps")], ("0.s:0",)))
    assert not answer_in_evidence(question("q3", [turn("0.s:0", "user: I swam")],
                                           ("0.s:0",), answer="the sea"))


def test_whole_turns_count_only_evidence_packed_whole() -> None:
    q = question("q1", [turn("0.s:0", "user: a"), turn("0.s:1", "user: b"),
                        turn("1.t:0", "user: c")], ("0.s:0", "0.s:1"))
    both = frozenset({"0.s:0", "0.s:1"})
    got = figures(q, Packed(both, 4, frozenset({"0.s:1", "1.t:0"}), ("a", "b", "c")), False)
    assert (got.recall, got.whole, got.session) == (1.0, 0.5, 1.0)
    assert figures(q, Packed.notes(q.notes[:1]), False).whole == 0.5  # a baseline: whole notes
    assert figures(q, Packed(both, 4, frozenset(), ("a", "b")), False).whole == 0.0


def test_hivemind_serves_a_long_turn_as_a_passage_not_whole() -> None:
    long = turn("0.s:0", "user: " + FILLER * 6 + "Then I swam in the Blue Lagoon at dawn. "
                + FILLER * 6)
    short = turn("0.s:1", "user: I swam in the Blue Lagoon last summer.", minutes=1)
    q = question("q1", [long, short, turn("1.t:0", "user: the trains were late")],
                 ("0.s:0", "0.s:1"), answer="Blue Lagoon", text="Blue Lagoon swim")
    assert long.tokens > 4 * DEFAULT.passage_tokens
    got = hivemind_picker([q], DEFAULT)(0, q, 200)
    assert got.ids >= {"0.s:0", "0.s:1"}
    assert "0.s:1" in got.whole and "0.s:0" not in got.whole
    assert long.text not in got.texts  # the passage's text, not the turn's
    f = figures(q, got, answer_in_evidence(q))
    assert (f.recall, f.whole, f.answer) == (1.0, 0.5, 1.0)


def test_halves_split_by_the_md5_of_the_question_id_and_summarise_each() -> None:
    ids = [f"q{i}" for i in range(8)]
    assert [half(question(x, [turn("0.s:0", "user: a")], ("0.s:0",))) for x in ids] == [
        int(hashlib.md5(x.encode()).hexdigest(), 16) % 2 for x in ids]
    qs = [question(x, [turn("0.s:0", "user: a")], ("0.s:0",)) for x in ids]
    zero = [i for i, q in enumerate(qs) if half(q) == 0]
    one = [i for i, q in enumerate(qs) if half(q) == 1]
    assert zero and one
    # recall 1 on half 0, 0 on half 1; answers only on half 1
    per = {200: [Figures(float(half(q) == 0), 0.0, 1.0, None,
                         1.0 if half(q) else None, None) for q in qs]}
    r = Run("x", per, 0.0)
    assert summarise(r, qs, zero).recall[200] == 1.0
    assert summarise(r, qs, one).recall[200] == 0.0
    assert summarise(r, qs).recall[200] == len(zero) / len(qs)
    assert summarise(r, qs, one).answer[200] == 1.0
    assert summarise(r, qs, zero).answer[200] != summarise(r, qs, zero).answer[200]  # nan


def test_run_prints_every_figure_per_half(capsys: pytest.CaptureFixture[str]) -> None:
    qs = [question(f"q{i}", [turn("0.s:0", "user: I swam in the sea"),
                             turn("0.s:1", "user: the trains were late")], ("0.s:0",),
                   answer="the sea") for i in range(4)]
    assert run(qs, DEFAULT, "hivemind", [], baselines=False, halves=True) == 0
    out = capsys.readouterr().out
    n0 = sum(half(q) == 0 for q in qs)
    assert 0 < n0 < 4
    assert "## half 0 (the md5 of question_id, as an integer, mod 2 = 0)" in out
    assert "## half 1" in out
    assert f"recall, {n0} questions" in out and f"recall, {4 - n0} questions" in out
    assert out.count("| hivemind |") == 6  # all, half 0, half 1: the table and per type
    for head in ("answer B=200", "whole turns B=1000", "recall B=500"):
        assert out.count(head) == 3
    ours = next(ln for ln in out.splitlines() if ln.startswith("| hivemind |"))
    cells = [c.strip() for c in ours.split("|")[2:-1]]
    assert cells[:9] == ["1.000"] * 9  # recall, answer, whole: the short turn fits whole


def test_halves_are_for_longmemeval_only() -> None:
    with pytest.raises(SystemExit):
        quality.main(["--halves"])
