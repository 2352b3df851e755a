"""Exact cosines in C over the int8 rows (``projections/ranking/_vectors.c``) against the numpy
code they replace (``DerivedVectors.cosines`` / ``rows_cosines`` over float32 or float64: the
reference): the same bits on every input, with the dimension (across the float32 bound of 516
components), the number of slots (across ``COMPACT_MAX_SLOTS``), the queries of a batch, the
rows asked for (repeated, unsorted, none) and zero vectors varying. Without the compiled
module these skip on a laptop and fail under ``CI=true``."""

from __future__ import annotations

import math
from types import ModuleType

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hivemind_memory.projections.ranking import vectors
from hivemind_memory.projections.ranking.vectors import (
    COMPACT_MAX_SLOTS,
    QUERY_LEVELS,
    DerivedVectors,
    quantize,
    query_vector,
)
from tests.support import built_native, numpy_path


@pytest.fixture(scope="module")
def native() -> ModuleType:
    return built_native(vectors, "the C cosines (hivemind_memory.projections.ranking._vectors)")


def _table(n: int, dim: int, seed: int) -> DerivedVectors:
    rng = np.random.default_rng(seed)
    v = rng.standard_normal((n, dim)) * rng.uniform(0.01, 100, (n, 1))
    v[rng.random(n) < 0.1] = 0.0  # texts without a vector
    if n:  # the extremes of both ranges: a component of +-127 against one of +-256
        v[0] = 0.0
        v[0, 0] = -1.0
    d = DerivedVectors("x", dim)
    d.set(np.arange(n), v)
    return d


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 1_500), dim=st.sampled_from([1, 3, 64, 128, 600]),
       k=st.integers(1, 4), seed=st.integers(0, 2**32 - 1))
def test_c_cosines_are_the_numpy_cosines(native: ModuleType, n: int, dim: int, k: int,
                                         seed: int) -> None:
    d = _table(n, dim, seed)
    assert d.mat.dtype == np.int8  # with the kernel the rows stay int8 at every size
    rng = np.random.default_rng(seed + 1)
    queries = rng.standard_normal((k, dim))
    queries[0, 0] = -1e3  # the query's largest component: -256
    got = d.cosines(queries, n)
    with numpy_path(vectors):
        want = d.cosines(queries, n)
    assert got.shape == want.shape == (n, k)
    assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want).tobytes()
    assert not np.isnan(got).any()
    q = query_vector(queries[0])
    slots = rng.integers(0, n, int(rng.integers(0, 2 * n + 1)))  # repeated, unsorted
    rows = d.rows_cosines(q, slots)
    with numpy_path(vectors):
        rows_want = d.rows_cosines(q, slots)
    assert rows.tobytes() == rows_want.tobytes()
    assert rows.tobytes() == got[slots, 0].tobytes()  # a row alone: the bits of the scan


def test_c_cosines_equal_the_exact_integer_cosine(native: ModuleType) -> None:
    d = _table(50, 7, 3)
    queries = np.random.default_rng(4).standard_normal((2, 7))
    got = d.cosines(queries, 50)
    qi, _ = quantize(queries, QUERY_LEVELS)
    for s in range(50):
        a = [int(x) for x in d.mat[s]]
        for j in range(2):
            b = [int(x) for x in qi[j]]
            dot = sum(x * y for x, y in zip(a, b, strict=True))
            den = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
            assert got[s, j] == (dot / den if den > 0 else 0.0)
    assert (got[d.norm[:50] == 0] == 0).all() and (d.norm[:50] == 0).any()


def test_without_the_kernel_a_large_table_is_float32(native: ModuleType) -> None:
    with numpy_path(vectors):
        big = _table(COMPACT_MAX_SLOTS + 1, 4, 1)
        small = _table(COMPACT_MAX_SLOTS, 4, 1)
    assert big.mat.dtype == np.float32 and small.mat.dtype == np.int8
    assert _table(COMPACT_MAX_SLOTS + 1, 4, 1).mat.dtype == np.int8
    q = np.array([[1.0, -2.0, 0.5, 0.0]])
    # a float32 table (built without the kernel) is multiplied by BLAS: the same bits
    assert big.cosines(q, COMPACT_MAX_SLOTS + 1).tobytes() == \
        _table(COMPACT_MAX_SLOTS + 1, 4, 1).cosines(q, COMPACT_MAX_SLOTS + 1).tobytes()


def test_bad_arrays_are_refused_with_the_function_named(native: ModuleType) -> None:
    mat = np.zeros((4, 3), np.int8)
    q = np.ones((1, 3), np.int16)
    qn, norm = np.ones(1), np.ones(4)
    none = np.zeros(0, np.int64)
    with pytest.raises(ValueError, match="cosines: a slot outside the matrix"):
        native.cosines(mat, 3, np.array([4], np.int64), q, qn, norm, np.empty(1))
    with pytest.raises(ValueError, match="cosines: a slot outside the matrix"):
        native.cosines(mat, 3, np.array([-1], np.int64), q, qn, norm, np.empty(1))
    with pytest.raises(ValueError, match="cosines: arrays of different lengths"):
        native.cosines(mat, 3, none, q, qn, norm, np.empty(5))  # more rows than the matrix
    with pytest.raises(ValueError, match="cosines: arrays of different lengths"):
        native.cosines(mat, 3, none, np.ones((1, 2), np.int16), qn, norm, np.empty(4))
    with pytest.raises(ValueError, match="cosines: arrays of different lengths"):
        native.cosines(mat, 3, none, q, qn, np.ones(3), np.empty(4))  # norms of 3 rows
    with pytest.raises(ValueError, match="cosines: arrays of different lengths"):
        native.cosines(mat, 3, np.array([0, 1], np.int64), q, qn, norm, np.empty(3))
    out = np.empty(4)
    native.cosines(mat, 3, none, q, qn, norm, out)
    assert out.tolist() == [0.0] * 4  # zero rows: no dot product, cosine 0
