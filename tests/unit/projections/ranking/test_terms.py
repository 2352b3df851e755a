"""The compact term dictionary reads exactly like the ``dict[str, int]`` it replaced, and costs a
fraction of it."""

from __future__ import annotations

import sys

import hypothesis.strategies as st
from hypothesis import given, settings

from hivemind_memory.projections.ranking.footprint import index_bytes
from hivemind_memory.projections.ranking.terms import SEAL_MIN, StemIndex, TermTable

WORD = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r\t "),
               min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(first=st.lists(WORD, unique=True, max_size=40),
       later=st.lists(WORD, max_size=600), probes=st.lists(WORD, max_size=30))
def test_reads_like_a_dict_through_seals_and_snapshots(first: list[str], later: list[str],
                                                        probes: list[str]) -> None:
    ref = {t: i for i, t in enumerate(first)}
    table = TermTable(first)
    for t in later:  # put's way: look up, add when missing (crossing seals past SEAL_MIN)
        if table.get(t) is None:
            table[t] = len(table)
            ref[t] = len(ref)
    again = TermTable.from_joined(table.joined())
    for tab in (table, again):
        assert len(tab) == len(ref) and list(tab) == list(ref)
        for t in [*ref, *probes]:
            assert tab.get(t) == ref.get(t) and (t in tab) == (t in ref)
        asked = [*probes, *reversed(ref)]
        assert tab.lookup(asked) == [ref.get(t, -1) for t in asked]  # one search for all
        for t, i in ref.items():
            assert tab[t] == i and tab.term(i) == t
        assert list(tab.iter_from(len(ref) // 2)) == list(ref)[len(ref) // 2:]


def test_terms_under_one_hash_are_told_apart_by_their_bytes() -> None:
    # strings cannot be made to collide on purpose: the hash array is made to, every term
    # under the hash of "beta", "beta" last in the scan
    table = TermTable(["alpha", "beta", "gamma"])
    table._hash[:] = hash("beta")
    table._ids[:] = [2, 0, 1]
    assert table.get("beta") == 1
    assert table.get("betb") is None
    assert table.lookup(["beta", "betb", "beta"]) == [1, -1, 1]


def test_a_term_added_twice_or_out_of_order_is_refused() -> None:
    table = TermTable(["a"])
    for term, t in (("a", 1), ("b", 5)):
        try:
            table[term] = t
        except ValueError:
            continue
        raise AssertionError(f"{term!r} -> {t} was accepted")


def test_stems_list_their_terms_in_id_order_across_rebuilds() -> None:
    idx = StemIndex()
    ref: dict[str, list[int]] = {}
    stops: list[int] = []
    t = 0
    for chunk in range(5):
        stems = [None if (t + k) % 7 == 0 else f"s{(t + k) % (13 + chunk)}"
                 for k in range(SEAL_MIN // 2 + chunk * 90)]
        idx.add(stems)
        for s in stems:
            if s is None:
                stops.append(t)
            else:
                ref.setdefault(s, []).append(t)
            t += 1
        assert len(idx) == t
        assert {s: idx.get(s) for s in ref} == ref
        assert idx.stop_terms().tolist() == stops
    assert idx.get("nope") == []


def test_a_table_costs_a_fraction_of_the_dict() -> None:
    terms = [f"term{i}x{i % 97}" for i in range(12_571)]
    as_dict = {t: i for i, t in enumerate(terms)}
    dict_bytes = sys.getsizeof(as_dict) + sum(map(sys.getsizeof, terms)) + sum(
        map(sys.getsizeof, as_dict.values()))
    table = TermTable(terms)
    assert index_bytes(table) * 3 < dict_bytes
