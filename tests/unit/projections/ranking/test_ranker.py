"""The ranking pipeline: filters, tier, recency, score, cost, packing, order, output shape.

Every test runs the product's ranking (``rank_index`` over a columnar index, through
``tests.support.rank_notes``); ``test_visible`` checks the reference's visibility rule, which
``tests/unit/projections/ranking/test_columns.py`` compares the product with."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hivemind_memory.projections.ranking.config import (
    DEFAULT,
    RankingConfig,
    TierDecay,
    with_overrides,
)
from hivemind_memory.projections.ranking.index import build_index
from hivemind_memory.projections.ranking.rank_result import NoteSignals, RankResult, ScoredNote
from hivemind_memory.projections.state import NoteState
from tests.support import rank_notes
from tests.support.reference import LEXICAL, visible

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def mk(
    note_id: str,
    *,
    tokens: int = 100,
    age: float = 0.0,
    uses: int = 0,
    kind: str = "note",
    scope: str = "shared",
    agent: str = "alice",
    forgotten: bool = False,
    text: str | None = None,
) -> NoteState:
    return NoteState(
        note_id=note_id,
        agent=agent,
        scope=scope,  # type: ignore[arg-type]
        kind=kind,  # type: ignore[arg-type]
        text=text if text is not None else f"text of {note_id}",
        tokens=tokens,
        created_at=NOW - timedelta(days=age),
        uses=uses,
        forgotten=forgotten,
    )


RULES_OFF = with_overrides(DEFAULT, {"near_identical": 0.0, "updates": {"margin": 0.0},
                                     "passage_tokens": 0})
"""The defaults without the near-identical and updated-facts rules (``test_updates``) and
without passages (``test_passages``): the whole-note rules these tests restate."""


def run(
    notes: list[NoteState],
    rel: dict[str, float],
    budget: int = 10_000,
    agent: str = "alice",
    cfg: RankingConfig | None = None,
) -> RankResult:
    return rank_notes(notes, rel, agent=agent, now=NOW, budget=budget,
                      cfg=RULES_OFF if cfg is None else cfg)


def by_id(res: RankResult) -> dict[str, ScoredNote]:
    return {c.note_id: c for c in res.candidates}


def test_scored_note_has_exactly_the_contract_fields_in_order() -> None:
    assert ScoredNote.__struct_fields__ == (
        "note_id", "text", "tokens", "cost", "score", "relevance", "recency", "tier", "uses",
        "age_days", "created_at", "metadata", "stands_for", "updates", "passage", "chosen",
    )
    assert RankResult.__struct_fields__ == ("used", "method", "upper_bound", "notes", "candidates",
                                            "why", "nothing_relevant", "unknown_words",
                                            "time_windows")


def test_signals_combine_into_score() -> None:
    notes = [
        mk("fresh", age=0.0),
        mk("half-year", age=180.0),
        mk("year", age=365.0),
        mk("scratch-3d", age=3.0, kind="scratch"),
        mk("old-but-used", age=400.0, uses=5),
        mk("used-4", age=180.0, uses=4),
    ]
    rel = {"fresh": 0.5, "half-year": 0.8, "year": 1.0, "scratch-3d": 0.6,
           "old-but-used": 0.3, "used-4": 0.8}
    c = by_id(run(notes, rel))
    assert c["fresh"].recency == 1.0 and c["fresh"].score == 0.5
    assert c["half-year"].recency == 0.675 and c["half-year"].score == pytest.approx(0.54)
    year = 0.35 + 0.65 * 0.5 ** (365 / 180)
    assert c["year"].recency == round(year, 6) and c["year"].score == round(year, 6)
    assert c["scratch-3d"].tier == "scratch" and c["scratch-3d"].recency == 0.5
    assert c["scratch-3d"].score == pytest.approx(0.3)
    assert c["old-but-used"].tier == "longterm" and c["old-but-used"].recency == 1.0
    assert c["used-4"].tier == "short" and c["used-4"].score == c["half-year"].score
    assert c["year"].age_days == 365.0 and c["scratch-3d"].age_days == 3.0


@pytest.mark.parametrize(
    ("uses", "kind", "tier"),
    [(0, "note", "short"), (4, "note", "short"), (5, "note", "longterm"), (9, "note", "longterm"),
     (4, "scratch", "scratch"), (5, "scratch", "longterm")],
)
def test_tier_is_computed_from_uses_and_kind(uses: int, kind: str, tier: str) -> None:
    res = run([mk("n", uses=uses, kind=kind, age=60.0)], {"n": 1.0})
    assert res.candidates[0].tier == tier
    assert res.candidates[0].uses == uses
    assert (res.candidates[0].recency == 1.0) == (tier == "longterm")


def test_longterm_threshold_comes_from_config() -> None:
    cfg = RankingConfig(passage_tokens=0, longterm_uses=2)
    res = run([mk("n", uses=2, age=90.0)], {"n": 1.0}, cfg=cfg)
    assert res.candidates[0].tier == "longterm"
    assert run([mk("n", uses=2, age=90.0)], {"n": 1.0}).candidates[0].tier == "short"


def test_filters() -> None:
    notes = [
        mk("shared-b", agent="bob"),
        mk("private-a", scope="private", agent="alice"),
        mk("private-b", scope="private", agent="bob"),
        mk("gone", forgotten=True),
        mk("gone-private-a", forgotten=True, scope="private"),
        mk("irrelevant"),
        mk("no-entry"),
        mk("weak"),
    ]
    rel = {n.note_id: 0.5 for n in notes}
    rel["irrelevant"] = 0.0
    del rel["no-entry"]
    rel["weak"] = 0.05
    alice = {c.note_id for c in run(notes, rel, agent="alice").candidates}
    assert alice == {"shared-b", "private-a", "weak"}
    bob = {c.note_id for c in run(notes, rel, agent="bob").candidates}
    assert bob == {"shared-b", "private-b", "weak"}
    cfg = RankingConfig(passage_tokens=0, min_relevance=0.1)
    assert {c.note_id for c in run(notes, rel, cfg=cfg).candidates} == {"shared-b", "private-a"}
    exactly = RankingConfig(passage_tokens=0, min_relevance=0.05)
    assert "weak" in {c.note_id for c in run(notes, rel, cfg=exactly).candidates}


def test_visible() -> None:
    assert visible(mk("x", scope="private", agent="a"), "a")
    assert not visible(mk("x", scope="private", agent="a"), "b")
    assert visible(mk("x", agent="a"), "b")
    assert not visible(mk("x", agent="a", forgotten=True), "a")


def test_cost_includes_per_note_overhead() -> None:
    notes = [mk("a", tokens=40), mk("b", tokens=60)]
    res = run(notes, {"a": 0.9, "b": 0.8}, budget=100)
    assert res.used == 100 and len(res.notes) == 2
    assert by_id(res)["a"].cost == 40
    cfg = RankingConfig(passage_tokens=0, per_note_overhead_tokens=5)
    res = run(notes, {"a": 0.9, "b": 0.8}, budget=100, cfg=cfg)
    assert by_id(res)["a"].cost == 45 and by_id(res)["a"].tokens == 40
    assert [n.note_id for n in res.notes] == ["a"] and res.used == 45


def test_twenty_small_notes_beat_one_big_one_in_both_methods() -> None:
    notes = [mk("big", tokens=2000)] + [mk(f"s{i:02d}", tokens=100) for i in range(20)]
    rel = {"big": 0.9} | {f"s{i:02d}": 0.85 for i in range(20)}
    for cells, method in ((4_000_000, "exact"), (0, "greedy+swap")):
        res = run(notes, rel, budget=2000,
                  cfg=RankingConfig(passage_tokens=0, exact_max_cells=cells))
        assert res.method == method
        assert {n.note_id for n in res.notes} == {f"s{i:02d}" for i in range(20)}
        assert res.used == 2000
        assert sum(n.score for n in res.notes) == pytest.approx(17.0)
        assert not by_id(res)["big"].chosen


def test_length_matters_short_note_fits_where_long_does_not() -> None:
    notes = [mk("long", tokens=3000), mk("short", tokens=30)]
    res = run(notes, {"long": 1.0, "short": 0.2}, budget=1000)
    assert [n.note_id for n in res.notes] == ["short"]
    res = run(notes, {"long": 1.0, "short": 0.2}, budget=3030)
    assert {n.note_id for n in res.notes} == {"long", "short"}


def test_recency_decides_between_equally_relevant_notes() -> None:
    notes = [mk("old", age=365.0), mk("new", age=1.0)]
    res = run(notes, {"old": 0.7, "new": 0.7}, budget=100)
    assert [n.note_id for n in res.notes] == ["new"]
    # ... unless the old one earned permanence
    notes = [mk("old", age=365.0, uses=5), mk("new", age=1.0)]
    res = run(notes, {"old": 0.7, "new": 0.7}, budget=100)
    assert [n.note_id for n in res.notes] == ["old"]


def test_custom_half_life_changes_the_result() -> None:
    notes = [mk("n", age=30.0)]
    default = run(notes, {"n": 1.0}).candidates[0].recency
    fast = run(notes, {"n": 1.0},
               cfg=RankingConfig(passage_tokens=0, short=TierDecay(30.0, 0.0))).candidates[0]
    assert fast.recency == 0.5 != default


def test_order_follows_config_and_candidates_are_sorted() -> None:
    notes = [mk(k, age=float(i * 10)) for i, k in enumerate("abcde")]
    rel = {"a": 0.3, "b": 0.9, "c": 0.5, "d": 0.7, "e": 0.1}
    res = run(notes, rel)
    assert [c.note_id for c in res.candidates] == ["b", "d", "c", "a", "e"]
    assert [n.note_id for n in res.notes] == ["b", "c", "e", "a", "d"]
    score = run(notes, rel, cfg=RankingConfig(passage_tokens=0, order="score"))
    assert [n.note_id for n in score.notes] == ["b", "d", "c", "a", "e"]
    chrono = run(notes, rel, cfg=RankingConfig(passage_tokens=0, order="chronological"))
    assert [n.note_id for n in chrono.notes] == ["e", "d", "c", "b", "a"]


def test_candidates_mark_chosen_and_notes_are_the_chosen_ones() -> None:
    notes = [mk("a", tokens=60), mk("b", tokens=60), mk("c", tokens=30)]
    res = run(notes, {"a": 0.9, "b": 0.8, "c": 0.1}, budget=100)
    assert {c.note_id: c.chosen for c in res.candidates} == {"a": True, "b": False, "c": True}
    assert [n.note_id for n in res.notes] == ["a", "c"]
    assert [type(n) for n in res.notes] == [NoteSignals, NoteSignals]  # no ``chosen`` field
    assert res.used == 90 and res.method == "exact"
    assert res.upper_bound == pytest.approx(1.0)


def test_score_ties_break_by_note_id() -> None:
    notes = [mk(k) for k in ("n3", "n1", "n2")]
    res = run(notes, dict.fromkeys(("n1", "n2", "n3"), 0.5), budget=200)
    assert [c.note_id for c in res.candidates] == ["n1", "n2", "n3"]
    assert {n.note_id for n in res.notes} == {"n1", "n2"}


def test_future_notes_have_age_zero() -> None:
    res = run([mk("future", age=-2.0)], {"future": 0.4})
    assert res.candidates[0].age_days == 0.0 and res.candidates[0].recency == 1.0


def test_floats_are_rounded_and_json_is_stable() -> None:
    notes = [mk("a", age=1 / 3), mk("b", age=123.456789123, kind="scratch")]
    rel = {"a": 1 / 3, "b": 2 / 3}
    res = run(notes, rel)
    for c in res.candidates:
        for v in (c.score, c.relevance, c.recency, c.age_days):
            assert v == round(v, 6)
    assert by_id(res)["a"].relevance == 0.333333
    a = msgspec.json.encode(res)
    b = msgspec.json.encode(run(list(reversed(notes)), dict(reversed(rel.items()))))
    assert a == b
    assert b'"note_id":"a","text":"text of a","tokens":100,"cost":100,' in a


def test_empty_inputs() -> None:
    res = run([], {})
    assert res == RankResult(used=0, method="exact", upper_bound=0.0, notes=[], candidates=[],
                             nothing_relevant=True)


def test_end_to_end_with_the_index_relevance() -> None:
    """Lexical relevance (``relevance = "bm25"``): BM25, or the caller's cosine."""
    notes = [
        mk("redis", text="Redis streams hold the event log", age=10.0),
        mk("redis-old", text="Redis streams hold the event log", age=400.0),
        mk("lunch", text="Lunch is at noon"),
        mk("vec", text="nothing lexical", age=5.0),
    ]
    notes[3] = msgspec.structs.replace(notes[3], embedding=[1.0, 0.0])
    rel = build_index("t", {n.note_id: n for n in notes}).relevance(
        "redis event log", [1.0, 0.0], LEXICAL)
    res = run(notes, rel, budget=250)
    c = by_id(res)
    assert set(c) == {"redis", "redis-old", "vec"}
    assert c["redis"].relevance == c["redis-old"].relevance
    assert c["redis"].score > c["redis-old"].score
    assert c["vec"].relevance == 1.0
    assert {n.note_id for n in res.notes} == {"vec", "redis"}


AGENTS = st.sampled_from(["alice", "bob", "carol"])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(AGENTS, st.sampled_from(["shared", "private"]), st.booleans(),
                  st.floats(0.0, 1.0), st.integers(1, 500)),
        max_size=15,
    ),
    AGENTS,
    st.integers(1, 2000),
)
def test_private_and_forgotten_notes_never_leak(
    specs: list[tuple[str, str, bool, float, int]], agent: str, budget: int
) -> None:
    notes = [
        mk(f"n{i}", agent=a, scope=s, forgotten=f, tokens=t)
        for i, (a, s, f, _, t) in enumerate(specs)
    ]
    rel = {f"n{i}": r for i, (*_, r, _) in enumerate(specs)}
    res = run(notes, rel, budget=budget, agent=agent)
    meta = {n.note_id: n for n in notes}
    for c in res.candidates:
        n = meta[c.note_id]
        assert not n.forgotten
        assert n.scope == "shared" or n.agent == agent
        assert c.relevance > 0
    assert res.used <= budget
    assert res.used == sum(n.cost for n in res.notes)
    assert sorted(n.note_id for n in res.notes) == sorted(
        c.note_id for c in res.candidates if c.chosen
    )


def test_relevance_that_prints_as_zero_is_not_a_candidate() -> None:
    res = run([mk("tiny"), mk("small")], {"tiny": 4e-7, "small": 6e-7})
    assert [c.note_id for c in res.candidates] == ["small"]
    assert res.candidates[0].relevance == 0.000001


def test_age_and_upper_bound_are_rounded_floats() -> None:
    notes = [mk("a", age=1 / 3, tokens=60), mk("b", age=2.0, tokens=60)]
    res = run(notes, {"a": 0.7, "b": 0.6}, budget=100,
              cfg=RankingConfig(passage_tokens=0, exact_max_cells=0))
    assert res.method == "greedy+swap"
    a = by_id(res)["a"]
    assert a.age_days == 0.333333 and isinstance(a.age_days, float)
    bound = 0.7 * (0.35 + 0.65 * 0.5 ** ((1 / 3) / 180)) + 0.6 * (
        0.35 + 0.65 * 0.5 ** (2 / 180)
    ) * 40 / 60
    assert res.upper_bound == round(bound, 6)
    assert b'"age_days":0.333333,' in msgspec.json.encode(res)
    whole = run([mk("w", age=365.0)], {"w": 1.0})
    assert b'"age_days":365.0,' in msgspec.json.encode(whole)


def test_explain_false_skips_candidates_but_not_notes() -> None:
    notes = [mk("a", tokens=60, age=3.0), mk("b", tokens=60), mk("c", tokens=30, uses=5)]
    rel = {"a": 0.9, "b": 0.8, "c": 0.1}
    full = run(notes, rel, budget=100)
    lean = rank_notes(notes, rel, agent="alice", now=NOW, budget=100, cfg=RULES_OFF,
                      explain=False)
    assert lean.candidates == []
    assert lean.notes == full.notes and [n.note_id for n in lean.notes] == ["a", "c"]
    assert (lean.used, lean.method, lean.upper_bound) == (full.used, full.method, full.upper_bound)


def test_packed_notes_carry_their_cost_with_overhead() -> None:
    res = run([mk("a", tokens=40)], {"a": 0.9}, budget=100,
              cfg=RankingConfig(passage_tokens=0, per_note_overhead_tokens=5))
    assert [(n.note_id, n.tokens, n.cost) for n in res.notes] == [("a", 40, 45)]


def test_the_zero_at_print_boundary_is_exact() -> None:
    import math

    from hivemind_memory.projections.ranking.rank_result import PRINTS_AS_ZERO

    edge, above = PRINTS_AS_ZERO, math.nextafter(PRINTS_AS_ZERO, 1.0)
    assert round(edge, 6) == 0.0 and round(above, 6) == 0.000001
    res = run([mk("edge"), mk("above")], {"edge": edge, "above": above})
    assert [(c.note_id, c.relevance) for c in res.candidates] == [("above", 0.000001)]


def test_signals_drop_only_chosen() -> None:
    from hivemind_memory.projections.ranking.rank_result import NoteSignals, ScoredNote

    fields = {f: i for i, f in enumerate(NoteSignals.__struct_fields__)}
    s = ScoredNote(note_id="n", text="t", tokens=3, cost=5, score=0.25, relevance=0.5,
                   recency=0.5, tier="short", uses=2, age_days=1.5,
                   created_at=datetime(2026, 1, 1, tzinfo=UTC), chosen=True)
    out = s.signals()
    assert type(out) is NoteSignals and list(fields) == [*ScoredNote.__struct_fields__][:-1]
    assert all(getattr(out, f) == getattr(s, f) for f in fields)
