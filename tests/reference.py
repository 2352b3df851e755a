"""An independent reference for relevance, written for clarity, used ONLY by differential tests.

Textbook BM25 recomputed from scratch (every text re-read, nothing incremental, the ``(k1 + 1)``
factor kept, the normaliser written out) and cosine with ``math.fsum``. The product has one
implementation (``projections.relevance.scores_over`` and ``NamespaceIndex.relevance``); the
tests check that it equals this within a tight tolerance. Only ``tokenize`` and the relevance
rule (cosine where dimensions match, BM25 over the notes the agent may see otherwise) are shared
with the product, by design: they are the specification, not the arithmetic.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

from hivemind_memory.projections.config import RankingConfig
from hivemind_memory.projections.relevance import tokenize
from hivemind_memory.projections.state import NoteState


def bm25(docs: dict[str, str], query: str, cfg: RankingConfig) -> dict[str, float]:
    """BM25 of every doc sharing a term with ``query``, divided by the query's maximum
    ``sum(idf(t) * (k1 + 1))`` over its distinct terms; docs at 0 are left out."""
    toks = {k: tokenize(t) for k, t in docs.items()}
    n_docs = len(docs)
    if n_docs == 0:
        return {}
    avgdl = sum(len(t) for t in toks.values()) / n_docs or 1.0
    terms = list(dict.fromkeys(tokenize(query)))
    if not terms:
        return {}
    k1, b = cfg.bm25_k1, cfg.bm25_b
    weights = {}
    for t in terms:
        n = sum(1 for d in toks.values() if t in d)
        weights[t] = math.log(1 + (n_docs - n + 0.5) / (n + 0.5))  # Lucene's IDF
    max_score = sum(w * (k1 + 1) for w in weights.values())
    out = {}
    for k, d in toks.items():
        tf = Counter(d)
        s = 0.0
        for t in terms:
            if tf[t]:
                norm = 1 - b + b * len(d) / avgdl
                s += weights[t] * tf[t] * (k1 + 1) / (tf[t] + k1 * norm)
        if s > 0:
            out[k] = s / max_score
    return out


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity clamped to [0, 1]; 0 when either vector is zero."""
    assert len(a) == len(b), "the reference only compares vectors of one dimension"
    norm_a = math.sqrt(math.fsum(x * x for x in a))
    norm_b = math.sqrt(math.fsum(x * x for x in b))
    if norm_a == 0.0 or norm_b == 0.0:
        return 0.0
    dot = math.fsum(x * y for x, y in zip(a, b, strict=True))
    return max(0.0, min(1.0, dot / (norm_a * norm_b)))


def may_see(note: NoteState, agent: str) -> bool:
    """Shared notes, and ``agent``'s own private ones (an empty agent sees shared only)."""
    return note.scope != "private" or (agent != "" and note.agent == agent)


def relevance(notes: Iterable[NoteState], text: str, embedding: Sequence[float] | None,
              cfg: RankingConfig, agent: str = "") -> dict[str, float]:
    """Relevance of each live note (notes at 0 left out): cosine where the note and the query
    carry embeddings of the same dimension; otherwise BM25 over the live notes ``agent`` may
    see (other agents' private notes get no lexical score)."""
    live = [n for n in notes if not n.forgotten]
    lexical = bm25({n.note_id: n.text for n in live if may_see(n, agent)}, text, cfg)
    out = {}
    for n in live:
        if embedding is not None and n.embedding is not None \
                and len(n.embedding) == len(embedding):
            r = cosine(n.embedding, embedding)
        else:
            r = lexical.get(n.note_id, 0.0)
        if r > 0.0:
            out[n.note_id] = r
    return out
