"""Relevance in [0, 1]: the words (``tokenize``), the IDF, and the rules of lexical BM25.

One BM25 implementation in the product: ``projections.ranking.columns.Columns.bm25`` (numpy
over the columnar index), which ``projections.ranking.index.NamespaceIndex.relevance`` runs
(adding the cosine, in numpy). The tests check it bit for bit against the dict-based
``scores_over`` and against a textbook BM25, both kept in ``tests/support/reference.py`` and
never imported by the product.

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

_WORD = re.compile(r"\w+")


def tokenize(text: str) -> list[str]:
    """Words of ``text``: NFKC-normalised, casefolded, split on Unicode word characters.

    Punctuation and whitespace separate words and are dropped; ``_`` and digits are word
    characters (``snake_case`` and ``v2`` stay whole). ``"Ｃａｆé!"`` -> ``["café"]``.
    """
    if text.isascii():  # the same words, ~4x faster (see ``_ASCII_NON_WORD``)
        return text.lower().translate(_ASCII_NON_WORD).split()
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    return _WORD.findall(folded)


_ASCII_NON_WORD = {c: " " for c in range(128) if not (chr(c).isalnum() or chr(c) == "_")}
"""Every ASCII character ``\\w`` does not match, to a space. On ASCII text ``tokenize``'s
general path reduces to this: NFKC leaves ASCII as it is, ``casefold`` is ``lower``, and
``\\w`` matches exactly ``[A-Za-z0-9_]``, so the words are the runs left between spaces
(``str.split`` also splits at the ASCII separators ``\\x1c``-``\\x1f``, which are mapped to
spaces too)."""


def idf(n_docs: int, doc_freq: int) -> float:
    """Lucene's always-positive BM25 IDF: ``log(1 + (N - n + 0.5) / (n + 0.5))``."""
    return math.log(1.0 + (n_docs - doc_freq + 0.5) / (doc_freq + 0.5))
