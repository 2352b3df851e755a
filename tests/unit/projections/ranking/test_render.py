"""The rendered context: each packed note under ``[note_id | date]``, the header counted in
the note's cost, so the context never exceeds the budget; the header's cost varies with the
id, and the packer sees it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hivemind_memory.events.schema import token_estimate
from hivemind_memory.projections.ranking.config import DEFAULT, with_overrides
from hivemind_memory.projections.ranking.index import build_index
from hivemind_memory.projections.ranking.rank_result import RankResult
from hivemind_memory.projections.ranking.ranker import rank_index
from hivemind_memory.projections.ranking.render import header, header_tokens, render
from hivemind_memory.projections.state import NoteState

RULES_OFF = with_overrides(DEFAULT, {"near_identical": 0.0, "updates": {"margin": 0.0},
                                     "passage_tokens": 0})
"""Two notes of one text are under test here, not the near-identical rule; whole notes (a
passage's header is tested in test_passages)."""
NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def _note(nid: str, text: str, age: float, tokens: int | None = None) -> NoteState:
    return NoteState(note_id=nid, agent="a", scope="shared", kind="note", text=text,
                     tokens=token_estimate(text) if tokens is None else tokens,
                     created_at=NOW - timedelta(days=age))


def _rank(notes: list[NoteState], rel: list[float], budget: int,
          rendered: bool = True) -> RankResult:
    idx = build_index("t", {n.note_id: n for n in notes})
    slots = np.array([idx.cols.slot[n.note_id] for n in notes], np.int64)
    return rank_index(idx, slots, np.array(rel, np.float64), agent="a", now=NOW,
                      budget=budget, cfg=RULES_OFF, explain=True, rendered=rendered)


def test_a_header_names_the_note_and_its_date_and_costs_its_bytes() -> None:
    at = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    assert header("D1:3", at) == "[D1:3 | 2023-05-08]"
    # "[D1:3 | 2023-05-08]" 19 bytes + newline + the blank line before the next note = 22
    assert header_tokens(["D1:3"]).tolist() == [6]
    assert header_tokens(["x" * 40, "y"]).tolist() == [15, 5]  # 58 and 19 bytes
    ctx = render([("a", at, "first"), ("b", at, "second")])
    assert ctx == "[a | 2023-05-08]\nfirst\n\n[b | 2023-05-08]\nsecond"


def test_the_header_cost_is_in_the_note_cost_and_the_packer_sees_it() -> None:
    """Two notes alike but for their ids: where only one fits with its header, the one with
    the short id does; without rendering both fit."""
    text = "deploys happen on tuesdays"  # 26 bytes: 7 tokens
    long_id = "n-" + "x" * 60
    notes = [_note("s", text, 1), _note(long_id, text, 1)]
    short_cost = 7 + int(header_tokens(["s"])[0])
    plain = _rank(notes, [0.5, 0.5001], budget=14, rendered=False)
    assert {n.note_id for n in plain.notes} == {"s", long_id}
    got = _rank(notes, [0.5, 0.5001], budget=short_cost)
    assert [n.note_id for n in got.notes] == ["s"]
    assert got.notes[0].cost == short_cost == got.used


@settings(max_examples=150, deadline=None)
@given(notes=st.lists(st.tuples(st.text("abcdefghij:-_.", min_size=1, max_size=40),
                                st.text(min_size=1, max_size=300),
                                st.floats(0, 900), st.floats(0.001, 1.0)),
                      min_size=1, max_size=25, unique_by=lambda x: x[0]),
       budget=st.integers(1, 2000))
def test_the_rendered_context_never_exceeds_the_budget(
        notes: list[tuple[str, str, float, float]], budget: int) -> None:
    states = [_note(f"n{nid}", text, age) for nid, text, age, _ in notes]
    res = _rank(states, [r for *_, r in notes], budget)
    ctx = render((n.note_id, n.created_at, n.text) for n in res.notes)
    assert res.used == sum(n.cost for n in res.notes) <= budget
    assert token_estimate(ctx) <= budget or not res.notes
    for n in res.notes:  # each note under its own header, in context order
        assert f"{header(n.note_id, n.created_at)}\n{n.text}" in ctx
    starts = [ctx.index(header(n.note_id, n.created_at)) for n in res.notes]
    assert starts == sorted(starts)
