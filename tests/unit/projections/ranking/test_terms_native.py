"""A term table's lookup in C (``projections/ranking/_terms.c``) against the Python loop it
replaces (``terms.TermTable.lookup``'s reference path, run with ``numpy_path``): the same ids
for terms sealed, added since the last seal, absent, repeated and non-ASCII, through seals and
a snapshot's table; terms under one hash told apart by their bytes; a table whose arrays are
damaged is refused, never read outside them. Without the compiled module these skip on a
laptop and fail under ``CI=true``."""

from __future__ import annotations

from types import ModuleType

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hivemind_memory.projections.ranking import terms
from hivemind_memory.projections.ranking.terms import TermTable
from tests.support import built_native, numpy_path

WORD = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r\t "),
               min_size=1, max_size=8)


@pytest.fixture(scope="module")
def native() -> ModuleType:
    return built_native(terms, "the C term lookup (hivemind_memory.projections.ranking._terms)")


def _both(table: TermTable, asked: list[str]) -> tuple[list[int], list[int]]:
    got = table.lookup(asked)
    with numpy_path(terms):
        want = table.lookup(asked)
    return got, want


@settings(max_examples=150, deadline=None)
@given(first=st.lists(WORD, unique=True, max_size=300), later=st.lists(WORD, max_size=400),
       probes=st.lists(WORD, max_size=40))
def test_c_lookup_gives_the_python_loops_ids(native: ModuleType, first: list[str],
                                             later: list[str], probes: list[str]) -> None:
    table = TermTable(first)
    for t in later:  # crossing seals past SEAL_MIN, and leaving some terms unsealed
        if table.get(t) is None:
            table[t] = len(table)
    ref = {t: i for i, t in enumerate(table)}
    for tab in (table, TermTable.from_joined(table.joined()) if len(table) else table):
        asked = [*probes, *reversed(ref), *probes[:3]]
        got, want = _both(tab, asked)
        assert got == want == [ref.get(t, -1) for t in asked]


def test_unsealed_and_non_ascii_terms(native: ModuleType) -> None:
    table = TermTable(["café", "naïve", "a", "日本"])
    table["zeta"] = len(table)  # stays unsealed (under SEAL_MIN)
    asked = ["日本", "zeta", "cafe", "café", "a", "zeta", "b"]
    got, want = _both(table, asked)
    assert got == want == [3, 4, -1, 0, 2, 4, -1]


def test_terms_under_one_hash_are_told_apart_by_their_bytes(native: ModuleType) -> None:
    # strings cannot be made to collide on purpose: every sealed term is filed under the hash
    # of "beta", "beta" last in the scan (terms of the same length first: "betb" never
    # matches, "beta" only at the last entry)
    table = TermTable(["alpa", "beta", "gama", "zz"])
    table._hash[:] = hash("beta")
    table._ids[:] = [3, 0, 2, 1]
    got, want = _both(table, ["beta", "betb", "zz", "alpa", "beta"])
    assert got == want == [1, -1, -1, -1, 1]  # "zz" and "alpa" are not under their hash


def test_damaged_arrays_are_refused(native: ModuleType) -> None:
    table = TermTable(["one", "two"])
    with pytest.raises(ValueError, match="different lengths"):
        native.lookup(["one"], table._hash, table._ids[:1], table._off, table._buf)
    bad = table._ids.copy()
    bad[:] = 7  # an id past the terms
    with pytest.raises(ValueError, match="outside the terms"):
        native.lookup(["one", "two"], table._hash, bad, table._off, table._buf)
    short = np.array([0, 4, 99], np.int64)  # an offset past the buffer
    with pytest.raises(ValueError, match="outside the terms"):
        native.lookup(["one", "two"], table._hash, table._ids, short, table._buf)
    with pytest.raises(TypeError, match="must be str"):
        native.lookup([1], table._hash, table._ids, table._off, table._buf)
