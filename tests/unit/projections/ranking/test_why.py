"""What a ranking records about the notes it left out: each reason on inputs that differ in
the signal that decides it (cost against the budget, relevance against ``min_relevance``, the
packer's choice), the limit, the counts, the order, and the size of a recorded row."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hivemind_memory.projections.ranking.config import DEFAULT, RankingConfig
from hivemind_memory.projections.ranking.why import LeftOut, Why, strongest
from hivemind_memory.projections.state import NoteState
from tests.support import rank_notes

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
ROW_MAX_BYTES = 200
"""The most one recorded left-out row takes in the audit entry's JSON (docs/ui.md)."""


def mk(note_id: str, tokens: int = 10, age: float = 0.0, uses: int = 0,
       scope: str = "shared", agent: str = "alice") -> NoteState:
    return NoteState(note_id=note_id, agent=agent, scope=scope,  # type: ignore[arg-type]
                     kind="note", text=f"text of {note_id}", tokens=tokens,
                     created_at=NOW - timedelta(days=age), uses=uses)


def why_of(notes: list[NoteState], rel: dict[str, float], budget: int,
           cfg: RankingConfig = DEFAULT, limit: int = 20, agent: str = "alice") -> Why:
    res = rank_notes(notes, rel, agent=agent, now=NOW, budget=budget, cfg=cfg, why_limit=limit)
    assert res.why is not None
    return res.why


def test_each_reason_from_the_signal_that_decides_it() -> None:
    notes = [mk("chosen", tokens=50), mk("huge", tokens=500), mk("squeezed", tokens=60),
             mk("faint", tokens=5), mk("nothing", tokens=5)]
    rel = {"chosen": 0.9, "huge": 0.95, "squeezed": 0.5, "faint": 0.05, "nothing": 0.0}
    cfg = RankingConfig(min_relevance=0.1, passage_tokens=0)  # whole notes (test_passages)
    w = why_of(notes, rel, budget=100, cfg=cfg)
    got = {r.note_id: r.reason for r in w.left_out}
    assert got == {"huge": "over_budget", "squeezed": "packed_out",
                   "faint": "below_min_relevance"}
    assert w.counts == {"over_budget": 1, "packed_out": 1, "below_min_relevance": 1}
    # the same notes with a bigger budget: nothing over budget, nothing squeezed out
    w2 = why_of(notes, rel, budget=1000, cfg=cfg)
    assert {r.note_id: r.reason for r in w2.left_out} == {"faint": "below_min_relevance"}
    # and with the bar at 0, the faint note is a candidate and fits
    w3 = why_of(notes, rel, budget=1000)
    assert w3.left_out == [] and w3.counts == {}


def test_rows_carry_the_signals_the_candidates_show() -> None:
    notes = [mk("old", tokens=80, age=400), mk("new", tokens=80, age=1), mk("used", tokens=80,
             age=400, uses=5)]
    rel = {"old": 0.6, "new": 0.6, "used": 0.6}
    res = rank_notes(notes, rel, agent="alice", now=NOW, budget=100,
                     cfg=RankingConfig(passage_tokens=0), why_limit=5)  # whole notes
    assert res.why is not None
    cands = {c.note_id: c for c in res.candidates}
    assert [n.note_id for n in res.notes] == ["used"]
    for r in res.why.left_out:
        c = cands[r.note_id]
        assert (r.relevance, r.recency, r.score, r.cost) == (c.relevance, c.recency, c.score,
                                                             c.cost)
    # strongest first: the newer note decays less
    assert [r.note_id for r in res.why.left_out] == ["new", "old"]


def test_below_min_relevance_rows_get_recency_and_cost() -> None:
    cfg = RankingConfig(passage_tokens=0, min_relevance=0.5, per_note_overhead_tokens=3)
    w = why_of([mk("a", tokens=7, age=180), mk("b", tokens=7, age=0)],
               {"a": 0.4, "b": 0.3}, budget=100, cfg=cfg)
    rows = {r.note_id: r for r in w.left_out}
    assert rows["a"].recency == pytest.approx(0.675, abs=1e-6)  # half-life 180, floor 0.35
    assert rows["a"].cost == rows["b"].cost == 10
    assert rows["a"].score == pytest.approx(0.4 * 0.675, abs=1e-6)
    assert rows["b"].score == pytest.approx(0.3, abs=1e-6)


def test_other_agents_private_notes_are_not_recorded_by_the_ranking() -> None:
    notes = [mk("mine", scope="private"), mk("theirs", scope="private", agent="bob"),
             mk("shared")]
    cfg = RankingConfig(passage_tokens=0, min_relevance=0.5)
    w = why_of(notes, {"mine": 0.2, "theirs": 0.2, "shared": 0.2}, budget=100, cfg=cfg)
    assert sorted(r.note_id for r in w.left_out) == ["mine", "shared"]


def test_the_limit_keeps_the_strongest_and_counts_keep_all() -> None:
    notes = [mk(f"n{i:02d}", tokens=10) for i in range(30)]
    rel = {f"n{i:02d}": 0.1 + i / 100 for i in range(30)}
    w = why_of(notes, rel, budget=50, limit=4)
    assert w.counts == {"packed_out": 25}
    assert [r.note_id for r in w.left_out] == ["n24", "n23", "n22", "n21"]
    off = rank_notes(notes, rel, agent="alice", now=NOW, budget=50, cfg=DEFAULT, why_limit=0)
    assert off.why is None


def test_ties_break_by_note_id_at_the_limit() -> None:
    notes = [mk(x) for x in ("d", "b", "a", "c", "keep")]
    rel = {"a": 0.5, "b": 0.5, "c": 0.5, "d": 0.5, "keep": 0.9}
    w = why_of(notes, rel, budget=10, limit=2)
    assert [r.note_id for r in w.left_out] == ["a", "b"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 60), st.floats(0.0, 1.0), st.floats(0.0, 900.0)),
                min_size=1, max_size=25),
       st.integers(1, 150), st.floats(0.0, 0.6), st.integers(1, 8))
def test_left_out_is_the_complement_of_the_pack(specs: list[tuple[int, float, float]],
                                               budget: int, bar: float, limit: int) -> None:
    notes = [mk(f"n{i}", tokens=t, age=a) for i, (t, _, a) in enumerate(specs)]
    rel = {f"n{i}": r for i, (_, r, _) in enumerate(specs)}
    cfg = RankingConfig(passage_tokens=0, min_relevance=bar)
    res = rank_notes(notes, rel, agent="alice", now=NOW, budget=budget, cfg=cfg,
                     why_limit=limit)
    assert res.why is not None
    out = [c for c in res.candidates if not c.chosen]
    assert res.why.counts.get("packed_out", 0) == sum(c.cost <= budget for c in out)
    assert res.why.counts.get("over_budget", 0) == sum(c.cost > budget for c in out)
    shown = {n.note_id for n in res.notes}
    assert not shown & {r.note_id for r in res.why.left_out}
    assert len(res.why.left_out) <= limit
    assert res.why.left_out == strongest(res.why.left_out, limit)
    below = {k for k, v in rel.items() if 0.5e-6 < v < bar}
    assert res.why.counts.get("below_min_relevance", 0) == len(below)
    cands = {c.note_id for c in out}
    for r in res.why.left_out:
        assert (r.note_id in below) == (r.reason == "below_min_relevance")
        assert r.note_id in cands or r.note_id in below


def test_a_recorded_row_is_bounded() -> None:
    worst = LeftOut("x" * 128, "below_min_relevance", 0.123456, 0.123456, 0.123456,
                    1_000_000 + 1_000_000)
    assert len(msgspec.json.encode(worst)) <= ROW_MAX_BYTES
    tiny = LeftOut("x", "packed_out", 1.2e-05, 1e-06, 1e-06, 1)
    assert len(msgspec.json.encode(tiny)) <= ROW_MAX_BYTES
