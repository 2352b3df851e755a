"""Shared word counts of note pairs in C (``projections/ranking/_pairs.c``), for the
near-identical rule, against the set intersections they replace (``updates._shared``'s
reference path): the same counts on word ids of every size (empty, one word, disjoint, equal,
interleaved runs) and pairs repeated, reversed and unsorted; and the rule's groups from a
worker's kept word ids (``ranker.KeptTexts``) equal the rule computed pair by pair, with and
without the kernel. Without the compiled module these skip on a laptop and fail under
``CI=true``."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hivemind_memory.projections.ranking import updates
from hivemind_memory.projections.ranking.bm25_rules import tokenize
from hivemind_memory.projections.ranking.config import DEFAULT, with_overrides
from hivemind_memory.projections.ranking.updates import WordSet, adjust
from tests.support import built_native, numpy_path
from tests.unit.projections.ranking.test_updates import VOCAB, _near_identical_plainly


@pytest.fixture(scope="module")
def native() -> ModuleType:
    return built_native(updates, "the C pair counts (hivemind_memory.projections.ranking._pairs)")


def _ids(words: list[int]) -> WordSet:
    return np.array(sorted(set(words)), np.int32)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 40), max_size=30), min_size=2, max_size=12),
       st.data())
def test_c_pair_counts_are_the_set_intersections(native: ModuleType, notes: list[list[int]],
                                                 data: Any) -> None:
    words = [_ids(w) for w in notes]
    n = len(words)
    pairs = data.draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)),
                               min_size=1, max_size=40))
    ii = np.array([a for a, _ in pairs], np.int64)
    jj = np.array([b for _, b in pairs], np.int64)
    size = np.array([len(w) for w in words], np.int64)
    got = updates._shared(words, size, ii, jj)
    with numpy_path(updates):
        want = updates._shared(words, size, ii, jj)
    plain = [len(set(notes[a]) & set(notes[b])) for a, b in pairs]
    assert got.tolist() == want.tolist() == plain


def test_c_pair_counts_refuse_offsets_and_pairs_outside_their_arrays(native: ModuleType) -> None:
    ids = np.array([1, 2, 3, 2, 3], np.int32)
    out = np.zeros(1, np.int64)
    one = np.zeros(1, np.int64)
    native.shared(ids, np.array([0, 3, 5], np.int64), one, one + 1, out)
    assert out.tolist() == [2]
    with pytest.raises(ValueError, match="outside the ids"):
        native.shared(ids, np.array([0, 3, 6], np.int64), one, one + 1, out)
    with pytest.raises(ValueError, match="not ascending"):
        native.shared(ids, np.array([0, 4, 3], np.int64), one, one + 1, out)
    with pytest.raises(ValueError, match="names no note"):
        native.shared(ids, np.array([0, 3, 5], np.int64), one, one + 2, out)
    with pytest.raises(ValueError, match="different lengths"):
        native.shared(ids, np.array([0, 3, 5], np.int64), one, one + 1, np.zeros(2, np.int64))


@settings(max_examples=90, deadline=None)
@given(st.lists(st.lists(st.sampled_from(VOCAB), min_size=0, max_size=14), min_size=2,
                max_size=9),
       st.sampled_from([0.5, 0.6, 0.75, 0.8, 0.9, 1.0]), st.randoms(use_true_random=False))
def test_near_identical_groups_from_word_ids_equal_the_rule_computed_pair_by_pair(
        bags: list[list[str]], threshold: float, rnd: Any) -> None:
    """The rule fed each note's words as ids (as a worker's ``KeptTexts`` keeps them), with
    the kernel where it is built and without it: the groups of every pair's Jaccard."""
    texts = [" ".join(b) for b in bags]
    texts += [texts[rnd.randrange(len(texts))] for _ in range(rnd.randrange(3))]
    n = len(texts)
    score = [rnd.choice([0.1, 0.2, 0.3]) for _ in range(n)]
    created = [rnd.randrange(3) for _ in range(n)]
    vocab: dict[str, int] = {}
    ids = [_ids([vocab.setdefault(w, len(vocab)) for w in rnd.sample(
        sorted(set(tokenize(t))), len(set(tokenize(t))))]) for t in texts]
    cfg = with_overrides(DEFAULT, {"near_identical": threshold, "updates": {"margin": 0.0}})
    keep, stands = _near_identical_plainly(texts, score, created, threshold)
    for use_native in (True, False):
        saved = updates.native
        if not use_native:
            updates.native = None
        try:
            got = adjust([f"n{p:03d}" for p in range(n)], np.array(score), np.array(score),
                         np.array(created, np.int64), np.zeros(n, np.bool_), None, None,
                         lambda p: texts[p], cfg, None, lambda p: ids[p])
        finally:
            updates.native = saved
        assert got.keep.tolist() == keep
        assert got.stands_for == stands
