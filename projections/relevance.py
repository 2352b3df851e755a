"""Relevance in [0, 1]: lexical BM25 over an incrementally maintained index, or cosine.

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

Reproducibility: every sum runs in a fixed order in plain IEEE double arithmetic; cosine uses
``math.fsum`` (correctly rounded), so results do not depend on BLAS or CPU vector width.
"""

from __future__ import annotations

import math
import operator
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence

from hivemind_memory.projections.config import RankingConfig
from hivemind_memory.projections.state import NoteState

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
        """Relevance in (0, 1] of every indexed key sharing a term with ``query``.

        Keys with relevance 0 are absent. Only the postings of the query's terms are read.
        """
        if self._total_len == 0:  # nothing indexed has a single word
            return {}
        k1, b = cfg.bm25_k1, cfg.bm25_b
        n_docs = len(self._doc_len)
        # Denominator of one term: tf + k1 * (1 - b + b * dl / avgdl) = tf + base + slope * dl
        base = k1 * (1.0 - b)
        slope = k1 * b * n_docs / self._total_len
        weighted = [(t, idf(n_docs, self.doc_freq(t))) for t in dict.fromkeys(tokenize(query))]
        # Each note sums a subset of these weights, each times a factor <= 1, in the same order,
        # so (rounding being monotone) its sum never exceeds max_score: the ratio stays <= 1.
        max_score = 0.0
        for _, w in weighted:
            max_score += w
        doc_len = self._doc_len
        acc: dict[str, float] = {}
        get = acc.get
        for term, w in weighted:
            for key, tf in self._postings.get(term, {}).items():
                acc[key] = get(key, 0.0) + w * (tf / (tf + base + slope * doc_len[key]))
        return {key: s / max_score for key, s in acc.items()}


def scores_over(indexes: Sequence[LexicalIndex], query: str,
                cfg: RankingConfig) -> dict[str, float]:
    """``LexicalIndex.scores`` over the union of disjoint indexes, with the corpus statistics
    (note count, average length, document frequencies) of that union only.

    The worker keeps shared notes and each agent's private notes in separate indexes and
    scores a query over ``[shared, private[agent]]``, so one agent's private notes never shift
    another agent's scores. With one index this is exactly ``index.scores``.
    """
    total_len = sum(ix._total_len for ix in indexes)
    if total_len == 0:
        return {}
    k1, b = cfg.bm25_k1, cfg.bm25_b
    n_docs = sum(len(ix._doc_len) for ix in indexes)
    base = k1 * (1.0 - b)
    slope = k1 * b * n_docs / total_len
    weighted = [(t, idf(n_docs, sum(ix.doc_freq(t) for ix in indexes)))
                for t in dict.fromkeys(tokenize(query))]
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


def _norm(v: Sequence[float]) -> float:
    return math.sqrt(math.fsum(map(operator.mul, v, v)))


def _cosine(a: Sequence[float], b: Sequence[float], norm_b: float) -> float:
    norm_a = _norm(a)
    if norm_a == 0.0 or norm_b == 0.0:
        return 0.0
    dot = math.fsum(map(operator.mul, a, b))
    return max(0.0, min(1.0, dot / (norm_a * norm_b)))


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity clamped to [0, 1]: opposite or orthogonal -> 0, a zero vector -> 0.

    Vectors of different lengths come from different models and are not comparable: that is
    a ``ValueError`` (``relevance_for`` falls back to lexical relevance instead of calling this).
    Sums are ``math.fsum`` (correctly rounded): the same inputs give the same bits everywhere.
    """
    if len(a) != len(b):
        raise ValueError(f"cosine of vectors of different dimensions: {len(a)} != {len(b)}")
    return _cosine(a, b, _norm(b))


def relevance_for(
    notes: Iterable[NoteState],
    query_text: str,
    query_embedding: Sequence[float] | None,
    lexical: LexicalIndex,
    cfg: RankingConfig,
) -> dict[str, float]:
    """Relevance of each of ``notes`` to a query; notes with relevance 0 are left out.

    Cosine where the note and the query both carry an embedding of the same dimension;
    lexical BM25 (from ``lexical``, keyed by note id) otherwise.
    """
    lex = lexical.scores(query_text, cfg)
    if query_embedding is None:
        return {n.note_id: lex[n.note_id] for n in notes if n.note_id in lex}
    out: dict[str, float] = {}
    dim = len(query_embedding)
    q_norm = _norm(query_embedding)
    for n in notes:
        if n.embedding is not None and len(n.embedding) == dim:
            r = _cosine(n.embedding, query_embedding, q_norm)
        else:
            r = lex.get(n.note_id, 0.0)
        if r > 0.0:
            out[n.note_id] = r
    return out
