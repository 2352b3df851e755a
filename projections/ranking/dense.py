"""The dense candidate stage: an approximate-nearest-neighbour index (HNSW, from ``usearch``)
over a namespace's derived vectors (``projections.ranking.vectors``), so a query of a large
namespace finds the notes nearest to it in meaning without a cosine per note. Pure: no Redis,
no clock; built by whoever holds the index (the worker, off the query's path).

It only proposes slots: every cosine a ranking reads is computed exactly from the vectors
(``DerivedVectors.rows_cosines``), so the index changes which notes are looked at, never a
value. Deterministic for the same vectors added in the same order: one thread to add, one to
search (``usearch`` draws a node's level from a generator of fixed seed), so two workers that
built it from the same slots give the same proposals. A slot added once stays in it; a note
that died or that the asker may not see is dropped by the caller (the proposals are
over-fetched by the dead share).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from hivemind_memory.projections.ranking.config import Candidates

IntArray = npt.NDArray[np.int64]


class DenseIndex:
    """HNSW over int8 vectors keyed by slot; ``covered``: the slots ``[0, covered)`` were
    offered to it (those with a vector are in it)."""

    def __init__(self, dim: int, settings: Candidates, digest: str) -> None:
        from usearch.index import Index  # imported when a large namespace first needs it

        self.settings = settings
        self.digest = digest
        """The embedder digest of the vectors it holds."""
        self.dim = dim
        self._index: Any = Index(ndim=dim, metric="cos", dtype="i8",
                                 connectivity=settings.connectivity,
                                 expansion_add=settings.expansion_add,
                                 expansion_search=settings.expansion_search)
        self.covered = 0
        self.size = 0

    def serves(self, settings: Candidates) -> bool:
        """Whether a query under ``settings`` may use this index: the ones it was built and
        searches with agree (``connectivity``, ``expansion_add``, ``expansion_search``); how
        many proposals a query keeps, its lexical cap and ``scan_max_notes`` are the
        query's own."""
        mine = self.settings
        return (mine.connectivity, mine.expansion_add, mine.expansion_search) == (
            settings.connectivity, settings.expansion_add, settings.expansion_search)

    def add(self, start: int, ints: npt.NDArray[np.int8], has: npt.NDArray[np.bool_]) -> None:
        """Offer slots ``[start, start + len(ints))`` (``ints``: their int8 rows; ``has``:
        which have a vector and are live); only slots past ``covered`` are added."""
        skip = max(0, self.covered - start)
        rows = ints[skip:]
        keep = has[skip:].nonzero()[0]
        if len(keep):
            self._index.add((keep + start + skip).astype(np.uint64),
                            np.ascontiguousarray(rows[keep]), threads=1)
            self.size += len(keep)
        self.covered = max(self.covered, start + len(ints))

    def search(self, query: npt.NDArray[np.floating[Any]], k: int) -> IntArray:
        """Up to ``k`` slots nearest to ``query`` (one quantized query vector) by cosine,
        nearest first."""
        if not self.size or k <= 0:
            return np.zeros(0, np.int64)
        q = np.clip(np.rint(query), -127, 127).astype(np.int8)
        got = self._index.search(q, min(k, self.size), threads=1)
        keys: IntArray = np.asarray(got.keys, np.int64)
        return keys


def build_dense(ints: npt.NDArray[np.int8], has: npt.NDArray[np.bool_], settings: Candidates,
                digest: str, chunk: int = 4_096) -> DenseIndex:
    """A ``DenseIndex`` of the rows ``ints`` (slots ``0..len - 1``; ``has``: which to add),
    added in slot order a ``chunk`` at a time (the GIL is released while ``usearch`` adds)."""
    d = DenseIndex(ints.shape[1], settings, digest)
    for a in range(0, len(ints), chunk):
        d.add(a, ints[a:a + chunk], has[a:a + chunk])
    return d
