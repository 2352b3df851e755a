"""Derived embeddings of an index's notes, quantized so that every cosine is exact. Pure.

A note's vector (from the index's ``Embedder``, see ``projections.ranking.embedders``) is
scaled so its largest component is +-``NOTE_LEVELS`` and rounded: integers in [-127, 127],
held as int8 (one byte each, in memory and in a snapshot). A query's vector is rounded the
same way to +-``QUERY_LEVELS``. Every product of two components is then at most 127 * 256 in
magnitude, so a dot product is an exact integer however it is summed:

* where the C kernel was built (``_vectors.c``, ``native``), it multiplies the int8 rows
  by the query's int16 components and sums in int32 (exact while ``dim * 127 * 256 < 2**31``);
* otherwise (the reference), the rows are widened to float32 for BLAS: a dot product over up
  to 516 components is at most ``dim * 127 * 256 < 2**24``, an integer float32 holds exactly,
  so ``M @ q`` (any blocking, any CPU) is exact; beyond that the product is computed in
  float64 (exact to 2**53). Without the kernel a large namespace keeps its rows as float32
  (``COMPACT_MAX_SLOTS``), which BLAS multiplies in place.

The cosine ``dot / (|n| |q|)`` (norms from the integers, in float64) is then the same bits on
every path and everywhere, whichever slot a note sits in.

Rounding to 127 levels moves a cosine by about 0.005; it changed no LoCoMo figure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


class NativeCosines(Protocol):
    """What this module calls of the C kernel (checked against ``_vectors.pyi``)."""

    def cosines(self, mat: npt.NDArray[np.int8], dim: int, slots: IntArray,
                q: npt.NDArray[np.int16], qn: FloatArray, norm: FloatArray,
                out: FloatArray) -> None: ...


_built: NativeCosines | None
try:
    from hivemind_memory.projections.ranking import _vectors as _built
except ImportError:  # pragma: no cover - an install without a C compiler
    _built = None

native: NativeCosines | None = _built
"""The cosines in C over the int8 rows (``projections/ranking/_vectors.c``), when it was
built; otherwise (or set to None) the numpy code below (the reference: the tests run both and
require the same bits)."""
_ALL = np.zeros(0, np.int64)

NOTE_LEVELS = 127
"""A note's largest component becomes +-127 (an int8)."""
QUERY_LEVELS = 256
"""A query's largest component becomes +-256."""
EXACT_F32 = 1 << 24
"""float32 holds every integer below this exactly."""
EXACT_I32 = 1 << 31
"""The C kernel's int32 sums hold every integer below this exactly."""
COMPACT_MAX_SLOTS = 1_024
"""Without the C kernel: up to this many slots the vectors are held as int8 (what they are)
and widened for each product; past it as float32 (or float64), which BLAS multiplies in
place (the widening costs a product +6 us at 100 notes and +28 us at 1,000, +125 us at
2,048, hence the bound). With the kernel they are int8 at every size: a quarter of the
memory (12.5 MiB at 100k notes and 128 components instead of 50), and a product reads a
quarter of the bytes (10k notes: 76 us instead of 160 for BLAS over float32; 3,000 given
rows: 34 instead of 185, one run on the shared VM)."""


def quantize(v: npt.NDArray[np.floating[Any]], levels: int) -> tuple[FloatArray, FloatArray]:
    """Rows of ``v`` as integers scaled to +-``levels`` (zero rows stay zero, non-finite
    components count as 0), and their exact norms."""
    x = np.asarray(v, np.float64)
    if not np.isfinite(x).all():  # (the check alone: nan_to_num costs ~20 us a query)
        x = np.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0)
    top = np.abs(x).max(axis=1) if x.size else np.zeros(len(x))
    scale = np.divide(levels, top, out=np.zeros_like(top), where=top > 0)
    q = np.rint(x * scale[:, None])
    return q, np.sqrt(np.einsum("ij,ij->i", q, q))


@dataclass(frozen=True)
class QueryVector:
    """One query's vector, quantized for exact cosines (``q``, its norm) and for the dense
    candidate stage (``near``: to +-``NOTE_LEVELS``, an int8's range)."""

    q: FloatArray
    norm: float
    near: FloatArray


def query_vector(v: npt.NDArray[np.floating[Any]]) -> QueryVector:
    """``QueryVector`` of one unquantized query vector."""
    row = np.asarray(v, np.float64).reshape(1, -1)
    q, qn = quantize(row, QUERY_LEVELS)
    near, _ = quantize(row, NOTE_LEVELS)
    return QueryVector(q[0], float(qn[0]), near[0])


class DerivedVectors:
    """One quantized vector per slot of a ``Columns`` table (``norm`` 0: none yet), all from
    one embedder (``digest``)."""

    def __init__(self, digest: str, dim: int) -> None:
        self.digest = digest
        self.dim = dim
        self.exact_f32 = dim * NOTE_LEVELS * QUERY_LEVELS < EXACT_F32
        self.exact_i32 = dim * NOTE_LEVELS * QUERY_LEVELS < EXACT_I32
        self._dtype = np.float32 if self.exact_f32 else np.float64
        self.mat: npt.NDArray[Any] = np.zeros((0, dim), np.int8)
        """The integers: int8 (with the C kernel, or up to ``COMPACT_MAX_SLOTS`` rows), else
        ``_dtype``."""
        self.norm: FloatArray = np.zeros(0, np.float64)
        self._done: BoolArray = np.zeros(0, np.bool_)
        self.n = 0
        """Slots covered (the table may have grown since)."""

    def ensure(self, n: int) -> None:
        """Room for slots ``[0, n)`` (new rows are zero: no vector)."""
        if n <= self.n:
            return
        if n > len(self.mat):
            cap = max(n, len(self.mat) + len(self.mat) // 8 + 16)  # small namespaces: small
            small = cap <= COMPACT_MAX_SLOTS or (native is not None and self.exact_i32)
            mat = np.zeros((cap, self.dim), np.int8 if small else self._dtype)
            mat[:self.n] = self.mat[:self.n]
            norm = np.zeros(cap, np.float64)
            norm[:self.n] = self.norm[:self.n]
            done = np.zeros(cap, np.bool_)
            done[:self.n] = self._done[:self.n]
            self.mat, self.norm, self._done = mat, norm, done
        self.n = n

    def done(self, n: int) -> BoolArray:
        """Which of slots ``[0, n)`` were embedded (a text without words gets a zero
        vector: done, but no vector)."""
        self.ensure(n)
        return self._done[:n]

    def set(self, slots: IntArray, vectors: npt.NDArray[np.floating[Any]]) -> None:
        """Store the (unquantized) vectors of ``slots``; a zero vector counts as none."""
        if not len(slots):
            return
        self.ensure(int(slots.max()) + 1)
        q, norm = quantize(vectors, NOTE_LEVELS)
        self.mat[slots] = q
        self.norm[slots] = norm
        self._done[slots] = True

    def load(self, ints: npt.NDArray[np.int8], done: BoolArray, n: int) -> None:
        """Fill slots ``[0, n)`` from their stored integers and done flags (a snapshot's)."""
        self.ensure(n)
        block = self.mat[:n]
        block[...] = ints.reshape(n, self.dim)
        self.norm[:n] = np.sqrt(np.einsum("ij,ij->i", block, block, dtype=np.float64))
        self._done[:n] = done

    def ints(self, n: int) -> npt.NDArray[np.int8]:
        """Slots ``[0, n)`` as int8 (what a snapshot stores)."""
        self.ensure(n)
        return self.mat[:n].astype(np.int8)

    def rows(self, slots: IntArray) -> npt.NDArray[np.floating[Any]]:
        """The integers of ``slots`` in the type their products are exact in (float32 where
        ``exact_f32``: a note-note product is at most ``dim * 127 * 127``, below a query's
        bound): ``updates``' pairwise cosines multiply them as they come."""
        return self.mat[slots].astype(self._dtype, copy=False)

    def cosines(self, queries: npt.NDArray[np.floating[Any]], n: int) -> FloatArray:
        """The cosine of every slot ``[0, n)`` with each query vector (columns, one per
        query): one matrix product for the batch; 0 where a note or a query has no vector.
        Computed a query per row (each query's cosines contiguous: the transpose is a view),
        with the same bits either way (exact products; ``|n| |q|`` is ``|q| |n|``)."""
        q, qn = quantize(np.asarray(queries).reshape(-1, self.dim), QUERY_LEVELS)
        self.ensure(n)
        kernel = native
        if kernel is not None and self.exact_i32 and self.mat.dtype == np.int8:
            got = np.empty((len(q), n), np.float64)
            kernel.cosines(self.mat, self.dim, _ALL, q.astype(np.int16), qn, self.norm, got)
            return got.T
        dots = (q.astype(self._dtype) @ self.mat[:n].T.astype(self._dtype, copy=False)
                ).astype(np.float64)
        denom = qn[:, None] * self.norm[None, :n]
        out: FloatArray = np.divide(dots, denom, out=np.zeros_like(dots), where=denom > 0)
        return out.T

    def rows_cosines(self, query: QueryVector, slots: IntArray) -> FloatArray:
        """The cosine of ``slots`` with one query: the same bits as ``cosines`` gives them
        (exact integer dot products, then the same division)."""
        kernel = native
        if kernel is not None and self.exact_i32 and self.mat.dtype == np.int8:
            got = np.empty(len(slots), np.float64)
            kernel.cosines(self.mat, self.dim, np.ascontiguousarray(slots, np.int64),
                           query.q.astype(np.int16), np.array([query.norm]), self.norm, got)
            return got
        # a matrix-vector product (BLAS): exact integers in any order of summation
        dots = (self.mat[slots].astype(self._dtype, copy=False)
                @ query.q.astype(self._dtype)).astype(np.float64)
        denom = query.norm * self.norm[slots]
        out: FloatArray = np.divide(dots, denom, out=np.zeros_like(dots), where=denom > 0)
        return out
