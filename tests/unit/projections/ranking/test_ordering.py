"""Context ordering: edges, score, chronological; ties broken by note id."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hivemind_memory.projections.ranking.ordering import order

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class S:
    """A minimal scored object (ordering only needs these three attributes)."""

    def __init__(self, note_id: str, score: float, day: int = 0) -> None:
        self.note_id = note_id
        self.score = score
        self.created_at = T0 + timedelta(days=day)

    def __repr__(self) -> str:
        return f"S({self.note_id!r}, {self.score})"


def ids(xs: list[S]) -> list[str]:
    return [x.note_id for x in xs]


# scores 0.9 > 0.8 > ... ; creation days deliberately not in score order
NOTES = [S("e", 0.5, 1), S("a", 0.9, 30), S("c", 0.7, 2), S("b", 0.8, 10), S("d", 0.6, 0)]


def test_score_order() -> None:
    assert ids(order(NOTES, "score")) == ["a", "b", "c", "d", "e"]


def test_edges_order_puts_weakest_in_the_middle() -> None:
    # strongest first, 2nd last, 3rd second, 4th second to last, weakest in the middle
    assert ids(order(NOTES, "edges")) == ["a", "c", "e", "d", "b"]
    four = [S("a", 0.9), S("b", 0.8), S("c", 0.7), S("d", 0.6)]
    assert ids(order(four, "edges")) == ["a", "c", "d", "b"]
    six = [S(k, 1 - i / 10) for i, k in enumerate("abcdef")]
    assert ids(order(six, "edges")) == ["a", "c", "e", "f", "d", "b"]


@pytest.mark.parametrize("how", ["edges", "score", "chronological"])
def test_small_inputs(how: str) -> None:
    assert order([], how) == []  # type: ignore[arg-type]
    one = [S("x", 0.1)]
    assert ids(order(one, how)) == ["x"]  # type: ignore[arg-type]


def test_edges_two() -> None:
    assert ids(order([S("w", 0.1), S("s", 0.9)], "edges")) == ["s", "w"]


def test_chronological_order() -> None:
    assert ids(order(NOTES, "chronological")) == ["d", "e", "c", "b", "a"]


def test_ties_break_by_note_id() -> None:
    tied = [S("b", 0.5, 3), S("c", 0.5, 3), S("a", 0.5, 3), S("z", 0.9, 3)]
    assert ids(order(tied, "score")) == ["z", "a", "b", "c"]
    assert ids(order(tied, "chronological")) == ["a", "b", "c", "z"]
    assert ids(order(tied, "edges")) == ["z", "b", "c", "a"]


def test_unknown_order_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown order 'random'"):
        order(NOTES, "random")  # type: ignore[arg-type]


def test_accepts_any_iterable() -> None:
    assert ids(order(iter(NOTES), "edges")) == ["a", "c", "e", "d", "b"]


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(
        st.text("abcdefghij", min_size=1, max_size=3),
        st.tuples(st.integers(0, 5).map(lambda v: v / 5), st.integers(0, 9)),
        max_size=12,
    )
)
def test_edges_is_a_permutation_with_the_top_two_at_the_ends(
    d: dict[str, tuple[float, int]],
) -> None:
    notes = [S(k, score, day) for k, (score, day) in d.items()]
    by_score = ids(order(notes, "score"))
    edges = ids(order(notes, "edges"))
    assert sorted(edges) == sorted(by_score) == sorted(d)
    # score descending, ties by note id, whatever order the notes came in
    assert by_score == [k for _, k in sorted((-score, k) for k, (score, _) in d.items())]
    assert ids(order(notes[::-1], "score")) == by_score
    if len(notes) >= 2:
        assert edges[0] == by_score[0]
        assert edges[-1] == by_score[1]
    if len(notes) >= 4:
        assert edges[1] == by_score[2]
        assert edges[-2] == by_score[3]
    # the weakest sits in the middle
    if notes:
        assert by_score[-1] in edges[(len(edges) - 1) // 2 : len(edges) // 2 + 1]
    chrono = order(notes, "chronological")
    assert [(n.created_at, n.note_id) for n in chrono] == sorted(
        (n.created_at, n.note_id) for n in notes
    )
