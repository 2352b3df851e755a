"""Relevance in [0, 1]: lexical BM25 over an incrementally maintained index, or cosine.

One BM25 implementation, ``scores_over``: the worker runs it through
``projections.index.NamespaceIndex.relevance`` (which adds the cosine, in numpy) and
``LexicalIndex.scores`` is ``scores_over`` over that one index. The tests check it against an
independent textbook BM25 (``tests/reference.py``), never against a second copy in here.

Normalisation (documented choice): a note's BM25 score is divided by the query's *maximum
attainable* BM25, ``sum(idf(t) * (k1 + 1))`` over the distinct query terms ``t``. Each term's
contribution ``idf * tf * (k1 + 1) / (tf + k1 * norm)`` is at most ``idf * (k1 + 1)`` (equality
only when ``k1 == 0``), so the ratio lies in (0, 1]; it also holds in floating point, with no
clamp, because a note's sum adds a subset of the same terms, each scaled by a factor <= 1, in
the same order as the divisor (rounding is monotone). The divisor depends on the query and the
corpus statistics only, never on which other notes matched, so identical texts always get
identical relevance and a note's relevance does not jump because a rival appeared.
Query terms absent from the index still count in the divisor (with ``n = 0``): a note that
matches half of a query's weight scores about half.

Query terms are *distinct* terms: repeating a word in a query does not weigh it more.

Reproducibility, exactly: BM25 is plain IEEE double arithmetic in a fixed order. The corpus
statistics are integers; each note's score adds its matching terms in the query's term order
(first occurrence), whatever order the notes were indexed in and however the notes are split
over indexes; the divisor adds the same terms in the same order. So the same notes and query
give the same bits on any IEEE-754 machine whose ``math.log`` (the platform's libm, used for
the IDF) returns the same bits. The worker's cosine is numpy (``einsum`` and ``dot``), whose
summation order depends on the CPU's vector width and the numpy/BLAS build: it may differ in
the last bit across machines. Results are printed rounded to 6 decimals, which hides such a
difference except when a value falls exactly on a rounding boundary.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence

from hivemind_memory.projections.config import RankingConfig

_WORD = re.compile(r"\w+")


def tokenize(text: str) -> list[str]:
    """Words of ``text``: NFKC-normalised, casefolded, split on Unicode word characters.

    Punctuation and whitespace separate words and are dropped; ``_`` and digits are word
    characters (``snake_case`` and ``v2`` stay whole). ``"Ｃａｆé!"`` -> ``["café"]``.
    """
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    return _WORD.findall(folded)


def idf(n_docs: int, doc_freq: int) -> float:
    """Lucene's always-positive BM25 IDF: ``log(1 + (N - n + 0.5) / (n + 0.5))``."""
    return math.log(1.0 + (n_docs - doc_freq + 0.5) / (doc_freq + 0.5))


class LexicalIndex:
    """An inverted index for BM25, maintained note by note; a query never re-reads texts.

    ``add`` of a key already present replaces its text. Keys are note ids.
    """

    __slots__ = ("_doc_len", "_doc_terms", "_postings", "_total_len")

    def __init__(self) -> None:
        self._postings: dict[str, dict[str, int]] = {}
        self._doc_len: dict[str, int] = {}
        self._doc_terms: dict[str, tuple[str, ...]] = {}
        self._total_len = 0

    def add(self, key: str, text: str) -> None:
        """Index ``text`` under ``key`` (replacing any earlier text of ``key``)."""
        if key in self._doc_len:
            self.remove(key)
        counts = Counter(tokenize(text))
        for term, tf in counts.items():
            posting = self._postings.get(term)
            if posting is None:
                self._postings[term] = {key: tf}
            else:
                posting[key] = tf
        length = sum(counts.values())
        self._doc_len[key] = length
        self._doc_terms[key] = tuple(counts)
        self._total_len += length

    def remove(self, key: str) -> None:
        """Drop ``key`` from the index; a key never added is ignored."""
        terms = self._doc_terms.pop(key, None)
        if terms is None:
            return
        for term in terms:
            posting = self._postings[term]
            del posting[key]
            if not posting:
                del self._postings[term]
        self._total_len -= self._doc_len.pop(key)

    def __contains__(self, key: object) -> bool:
        return key in self._doc_len

    def __len__(self) -> int:
        return len(self._doc_len)

    def doc_freq(self, term: str) -> int:
        """How many indexed notes contain ``term`` (already tokenized)."""
        return len(self._postings.get(term, ()))

    def scores(self, query: str, cfg: RankingConfig) -> dict[str, float]:
        """Relevance in (0, 1] of every indexed key sharing a term with ``query``: exactly
        ``scores_over([self], query, cfg)``.

        Keys with relevance 0 are absent. Only the postings of the query's terms are read.
        """
        return scores_over([self], query, cfg)


def scores_over(indexes: Sequence[LexicalIndex], query: str,
                cfg: RankingConfig) -> dict[str, float]:
    """BM25 relevance in (0, 1] of every key of the disjoint ``indexes`` that shares a term with
    ``query`` (keys at 0 are absent), with the corpus statistics (note count, average length,
    document frequencies) of their union only. Only the postings of the query's terms are read.

    The worker keeps shared notes and each agent's private notes in separate indexes and
    scores a query over ``[shared, private[agent]]``, so one agent's private notes never shift
    another agent's scores. Splitting notes over indexes does not change a single bit: a key
    lives in one index and its sum runs over the query's terms in order.
    """
    total_len = sum(ix._total_len for ix in indexes)
    if total_len == 0:  # nothing indexed has a single word
        return {}
    k1, b = cfg.bm25_k1, cfg.bm25_b
    n_docs = sum(len(ix._doc_len) for ix in indexes)
    # Denominator of one term: tf + k1 * (1 - b + b * dl / avgdl) = tf + base + slope * dl
    base = k1 * (1.0 - b)
    slope = k1 * b * n_docs / total_len
    weighted = [(t, idf(n_docs, sum(ix.doc_freq(t) for ix in indexes)))
                for t in dict.fromkeys(tokenize(query))]
    # Each note sums a subset of these weights, each times a factor <= 1, in the same order,
    # so (rounding being monotone) its sum never exceeds max_score: the ratio stays <= 1.
    # (The textbook (k1 + 1) factor cancels between a note's sum and the divisor.)
    max_score = 0.0
    for _, w in weighted:
        max_score += w
    acc: dict[str, float] = {}
    get = acc.get
    for term, w in weighted:
        for ix in indexes:
            doc_len = ix._doc_len
            for key, tf in ix._postings.get(term, {}).items():
                acc[key] = get(key, 0.0) + w * (tf / (tf + base + slope * doc_len[key]))
    return {key: s / max_score for key, s in acc.items()}
