"""Derived vectors: quantized so the cosine is exact, whatever the slot and the BLAS."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hivemind_memory.projections.ranking.vectors import (
    NOTE_LEVELS,
    QUERY_LEVELS,
    DerivedVectors,
    quantize,
)


def exact_cosine(a: list[int], b: list[int]) -> float:
    """The cosine of two integer vectors, in Python integers then one rounding each."""
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    na, nb = math.sqrt(sum(x * x for x in a)), math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na * nb > 0 else 0.0


def test_quantize_scales_each_row_to_its_levels() -> None:
    q, norm = quantize(np.array([[0.5, -1.0, 0.25], [0.0, 0.0, 0.0], [np.nan, 2.0, -2.0]]),
                       NOTE_LEVELS)
    assert q.tolist() == [[64.0, -127.0, 32.0], [0.0, 0.0, 0.0], [0.0, 127.0, -127.0]]
    assert norm[1] == 0.0 and norm[0] == math.sqrt(64**2 + 127**2 + 32**2)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 300), st.integers(0, 2**32 - 1), st.sampled_from([3, 64, 128, 256]))
def test_cosines_are_exact_and_the_same_in_any_slot(n: int, seed: int, dim: int) -> None:
    rng = np.random.default_rng(seed)
    vecs = rng.standard_normal((n, dim)) * rng.uniform(0.01, 100, (n, 1))
    vecs[rng.random(n) < 0.1] = 0.0  # some texts without a vector
    queries = rng.standard_normal((3, dim))
    d = DerivedVectors("x", dim)
    d.set(np.arange(n), vecs)
    got = d.cosines(queries, n)
    qi, _ = quantize(queries, QUERY_LEVELS)
    for s in {0, n - 1, n // 2}:
        for j in range(3):
            want = exact_cosine([int(v) for v in d.mat[s]], [int(v) for v in qi[j]])
            assert got[s, j] == want  # to the bit
    # the same vector alone, or at another slot of a bigger table: the same bits
    s = n // 2
    alone = DerivedVectors("x", dim)
    alone.set(np.array([7]), vecs[s:s + 1])
    assert (alone.cosines(queries, 8)[7] == got[s]).all()
    assert (d.cosines(queries[1:2], n)[:, 0] == got[:, 1]).all()  # alone or in a batch


def test_growth_keeps_rows_and_done_flags() -> None:
    d = DerivedVectors("x", 4)
    d.set(np.array([0, 2]), np.array([[1.0, 0, 0, 0], [0, 0, 0, 0]]))
    assert d.done(3).tolist() == [True, False, True]  # a zero vector is done, no vector
    d.set(np.array([5000]), np.array([[0, 1.0, 0, 0]]))
    assert d.done(5001)[[0, 1, 2, 5000]].tolist() == [True, False, True, True]
    assert d.norm[0] == 127.0 and d.norm[2] == 0.0 and d.mat[5000, 1] == 127.0
    ints = d.ints(5001)
    again = DerivedVectors("x", 4)
    again.load(ints, d.done(5001), 5001)
    assert (again.mat[:5001] == d.mat[:5001]).all() and (again.norm[:5001] == d.norm[:5001]).all()
