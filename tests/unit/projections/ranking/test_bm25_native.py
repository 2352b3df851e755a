"""BM25's per-note sums in C (``projections/ranking/_bm25.c``) against the numpy code they
replace on the query path (``Columns.bm25``'s bincount: the reference): the same slots and the
same bits on every input, with the words, their frequencies, the notes' lengths, the audience,
both analyzers and ``k1``/``b`` varying (up to a ``k1`` that makes every part subnormal), and
the rule for parts that underflow to 0 (the slots with a posting are kept). Without the
compiled module these skip on a laptop and fail under ``CI=true``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hivemind_memory.projections.ranking import columns
from hivemind_memory.projections.ranking.config import RankingConfig
from hivemind_memory.projections.ranking.index import NamespaceIndex, build_index
from hivemind_memory.projections.state import NoteState
from tests.support import built_native, numpy_path

NOW = datetime(2026, 6, 1, tzinfo=UTC)
WORDS = ["deploy", "deploys", "deployed", "kiwi", "plum", "the", "a", "ship", "shipping", "x"]
AGENTS = ["ann", "bob"]


@pytest.fixture(scope="module")
def native() -> ModuleType:
    return built_native(columns,
                        "BM25's C sums (hivemind_memory.projections.ranking._bm25)")


def _both(idx: NamespaceIndex, text: str, cfg: RankingConfig, agent: str
          ) -> tuple[tuple[list[int], bytes], tuple[list[int], bytes]]:
    """``Columns.bm25`` with the C sums, then with numpy: (slots, value bytes)."""
    def run() -> tuple[list[int], bytes]:
        slots, values = idx.cols.bm25(text, cfg, agent)
        assert slots.dtype == np.int64 and values.dtype == np.float64
        return slots.tolist(), values.tobytes()

    got = run()
    with numpy_path(columns):
        want = run()
    return got, want


def _index(notes: list[Any]) -> NamespaceIndex:
    states = [NoteState(note_id=f"n{i:02d}", agent=who, scope="private" if private else "shared",
                        kind="note", text=" ".join(words), tokens=len(words),
                        created_at=NOW - timedelta(minutes=i))
              for i, (words, who, private) in enumerate(notes)]
    return build_index("t", {n.note_id: n for n in states}, None)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(notes=st.lists(st.tuples(st.lists(st.sampled_from(WORDS), min_size=1, max_size=12),
                                st.sampled_from(AGENTS), st.booleans()),
                      min_size=1, max_size=30),
       query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=5),
       agent=st.sampled_from(["", *AGENTS]), analyzer=st.sampled_from(["plain", "english"]),
       k1=st.sampled_from([0.0, 0.5, 1.2, 3.0, 1e308]), b=st.sampled_from([0.0, 0.75, 1.0]))
def test_c_sums_are_the_numpy_sums(native: ModuleType, notes: list[Any], query: list[str],
                                   agent: str, analyzer: str, k1: float, b: float) -> None:
    idx = _index(notes)
    cfg = RankingConfig(relevance="bm25", analyzer=analyzer, bm25_k1=k1, bm25_b=b)
    got, want = _both(idx, " ".join(query), cfg, agent)
    assert got == want


def test_every_word_and_note_counts_in_the_sums(native: ModuleType) -> None:
    """Several words per note, added in word order; a note with one word only; notes the
    asker may not see left out; each word shown to move the sums."""
    idx = _index([(["kiwi", "plum", "plum"], "ann", False), (["plum"], "bob", False),
                  (["kiwi", "ship"], "bob", True), (["ship", "the", "a", "x"], "ann", False)])
    cfg = RankingConfig(relevance="bm25")
    got, want = _both(idx, "kiwi plum ship", cfg, "ann")
    assert got == want
    slots = got[0]
    ids = [idx.cols.ids[s] for s in slots]
    assert ids == ["n00", "n01", "n03"]  # n02 is bob's private note
    for fewer in ("plum ship", "kiwi ship", "kiwi plum"):
        other, _ = _both(idx, fewer, cfg, "ann")
        assert other != got


def test_parts_that_underflow_keep_the_notes_with_a_posting(native: ModuleType) -> None:
    # Columns.bm25 asks for this (keep_zero) when a weighted part underflowed to 0: the numpy
    # code then lists every slot with a posting, whatever its sum
    every = np.array([4, 1, 4, 7, 1], np.int64)
    parts = np.array([0.0, 0.25, 0.0, 5e-324, 0.5])
    slots, values = np.empty(5, np.int64), np.empty(5)
    k = native.accumulate(every, parts, 9, 2.0, True, slots, values)
    acc = np.bincount(every, weights=parts, minlength=9)
    want = np.bincount(every, minlength=9).nonzero()[0]
    assert slots[:k].tolist() == want.tolist() == [1, 4, 7]
    assert values[:k].tobytes() == (acc[want] / 2.0).tobytes()
    k = native.accumulate(every, parts, 9, 2.0, False, slots, values)  # without: sums > 0
    assert slots[:k].tolist() == (acc > 0.0).nonzero()[0].tolist() == [1, 7]


def test_bad_arrays_are_refused_with_the_function_named(native: ModuleType) -> None:
    ev, f = np.array([0, 3], np.int64), np.ones(2)
    out_s, out_v = np.empty(2, np.int64), np.empty(2)
    with pytest.raises(ValueError, match="accumulate: arrays of different lengths"):
        native.accumulate(ev, f[:1], 4, 1.0, False, out_s, out_v)
    with pytest.raises(ValueError, match="accumulate: a slot outside the table"):
        native.accumulate(ev, f, 3, 1.0, False, out_s, out_v)
    # a refused call leaves nothing behind: the next sums start from zero
    assert native.accumulate(ev, f, 4, 2.0, False, out_s, out_v) == 2
    assert out_s.tolist() == [0, 3] and out_v.tolist() == [0.5, 0.5]
