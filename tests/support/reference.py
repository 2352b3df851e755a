"""Independent references, written for clarity, used ONLY by differential tests.

``rank`` is the per-note ranking pipeline the product ran before its index went columnar
(filter, tier, age and recency note by note, ``Item``s, ``pack``, order): the product's
``projections.ranking.ranker.rank_index`` must return exactly what it returns
(``tests/unit/projections/ranking/test_columns.py``), so it stays here as the old engine, not
in the product.

Textbook BM25 recomputed from scratch (every text re-read, nothing incremental, the ``(k1 + 1)``
factor kept, the normaliser written out) and cosine with ``math.fsum``; and ``LexicalIndex`` /
``scores_over``, the dict-based BM25 the product used before its index went columnar, kept here
because the product's one implementation (``projections.ranking.columns.Columns.bm25`` behind
``NamespaceIndex.relevance``) must equal it bit for bit
(``tests/unit/projections/ranking/test_columns.py``). The tests
check the product against these; nothing in the product imports this module. Only
``tokenize``, ``idf`` and the relevance rule (cosine where dimensions match, BM25 over the notes
the agent may see otherwise) are shared with the product, by design: they are the
specification, not the arithmetic.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from hivemind_memory.projections.ranking.bm25_rules import idf, tokenize
from hivemind_memory.projections.ranking.config import RankingConfig
from hivemind_memory.projections.ranking.ordering import by_score, order
from hivemind_memory.projections.ranking.packing import Item, pack
from hivemind_memory.projections.ranking.rank_result import (
    DECIMALS,
    PRINTS_AS_ZERO,
    RankResult,
    ScoredNote,
)
from hivemind_memory.projections.ranking.recency import age_days, recency
from hivemind_memory.projections.state import NoteState, Tier, tier_of


def lexical(**kw: Any) -> RankingConfig:
    """A config of the lexical relevance these references restate: ``relevance = "bm25"``,
    ``analyzer = "plain"`` (the defaults they were written for), other keys from ``kw``."""
    return RankingConfig(**{"relevance": "bm25", "analyzer": "plain", **kw})


LEXICAL = lexical()
"""The lexical relevance's config with every other key at its default."""


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


def full_table_dp(costs: Sequence[int], values: Sequence[int], budget: int) -> list[int]:
    """The packer's exact rule on the whole table, cell by cell: 0/1 knapsack over cost,
    items in the given order, an item taken at capacity ``c`` only when it strictly improves
    on the items before it (so ties keep earlier items); the walk back from ``budget`` lists
    the chosen, last first. The packer fills far fewer cells (reduction, core, only the
    capacities that can matter) and must choose exactly the same."""
    n = len(costs)
    best = [0] * (budget + 1)
    take = [[False] * (budget + 1) for _ in range(n)]
    for i in range(n):
        w, v = costs[i], values[i]
        if w == 0:
            take[i] = [True] * (budget + 1)
            continue
        new = best[:]
        for c in range(w, budget + 1):
            if best[c - w] + v > best[c]:
                take[i][c] = True
                new[c] = best[c - w] + v
        best = new
    chosen = []
    c = budget
    for i in range(n - 1, -1, -1):
        if take[i][c]:
            chosen.append(i)
            c -= costs[i]
    return chosen


def pack_full_table(items: Iterable[tuple[str, int, float]], budget: int) -> tuple[str, ...]:
    """What ``pack`` chooses when it packs exactly, from the whole table: the eligible items
    (cost <= budget, value > 0) in canonical order (value descending, then key), values as
    ``round(value * 1e9)`` integers (small totals), ``full_table_dp``; the chosen keys in
    canonical order."""
    eligible = sorted(((k, c, v) for k, c, v in items if c <= budget and v > 0.0),
                      key=lambda it: (-it[2], it[0]))
    total = sum(c for _, c, _ in eligible)
    picked = full_table_dp([c for _, c, _ in eligible],
                           [round(v * 1e9) for _, _, v in eligible], min(budget, total))
    return tuple(eligible[i][0] for i in sorted(picked))


def visible(note: NoteState, agent: str) -> bool:
    """May ``agent`` retrieve ``note``? Never if forgotten; private notes only for their agent."""
    if note.forgotten:
        return False
    return note.scope != "private" or note.agent == agent


class Candidate(NamedTuple):
    """A candidate before rounding: its note and every signal, unrounded."""

    note: NoteState
    relevance: float
    recency: float
    score: float
    tier: Tier
    age_days: float


def _scored(c: Candidate, cost: int, chosen: bool) -> ScoredNote:
    n, rel, rec, score, tier, age = c
    return ScoredNote(
        note_id=n.note_id,
        text=n.text,
        tokens=n.tokens,
        cost=cost,
        score=round(score, DECIMALS),
        relevance=round(rel, DECIMALS),
        recency=round(rec, DECIMALS),
        tier=tier,
        uses=n.uses,
        age_days=round(age, DECIMALS),
        created_at=n.created_at,
        chosen=chosen,
    )


def rank(
    notes: Iterable[NoteState],
    relevance: Mapping[str, float],
    *,
    agent: str,
    now: datetime,
    budget: int,
    cfg: RankingConfig,
    explain: bool = True,
) -> RankResult:
    """The notes that best fill ``budget`` tokens for ``agent`` at ``now``.

    ``relevance`` maps note id -> relevance in [0, 1] (missing = 0). A note is a candidate when
    it is visible to ``agent`` and its relevance is > 0 and >= ``cfg.min_relevance``; "> 0" is
    judged on the relevance as printed (6 decimals), so no candidate ever shows relevance 0.
    score = relevance * recency(tier, age); cost = tokens + ``cfg.per_note_overhead_tokens``.
    ``explain=False`` leaves ``candidates`` empty (cheaper when nobody reads it).
    """
    overhead = cfg.per_note_overhead_tokens
    min_rel = cfg.min_relevance
    get = relevance.get
    raw: list[Candidate] = []
    for note in notes:
        rel = get(note.note_id, 0.0)
        if rel <= PRINTS_AS_ZERO or rel < min_rel or not visible(note, agent):
            continue
        tier = tier_of(note.uses, note.kind, cfg)
        age = age_days(note.created_at, now)
        rec = recency(tier, age, cfg)
        raw.append(Candidate(note, rel, rec, rel * rec, tier, age))
    packed = pack(
        (Item(c.note.note_id, c.note.tokens + overhead, c.score) for c in raw), budget,
        cfg.exact_max_cells,
    )
    chosen = set(packed.chosen)
    picked = [_scored(c, c.note.tokens + overhead, True).signals() for c in raw
              if c.note.note_id in chosen]
    candidates: list[ScoredNote] = []
    if explain:
        candidates = by_score(
            _scored(c, c.note.tokens + overhead, c.note.note_id in chosen) for c in raw
        )
    return RankResult(
        used=packed.total_cost,
        method=packed.method,
        upper_bound=round(packed.upper_bound, DECIMALS),
        notes=order(picked, cfg.order),
        candidates=candidates,
        nothing_relevant=cfg.relevance == "calibrated" and not raw,
    )


def calibrated(notes: Iterable[NoteState], query: str, lexical: Mapping[str, float],
               cosine: Mapping[str, float], cfg: RankingConfig,
               agent: str) -> dict[str, tuple[list[float], float]]:
    """The calibrated relevance restated note by note (``projections.ranking.calibrated``):
    for each note ``agent`` may see, its features (``FEATURES`` order) and its probability
    before the candidate rules. ``lexical``: its BM25 (0 or missing: no shared word);
    ``cosine``: its cosine with the query (missing: 0)."""
    cal = cfg.calibration
    seen = sorted((n for n in notes if visible(n, agent)),
                  key=lambda n: (n.created_at, n.note_id))
    best = max((lexical.get(n.note_id, 0.0) for n in seen), default=0.0)
    words = tokenize(query)
    padded = " " + " ".join(words) + " "

    def named(author: str) -> bool:
        w = tokenize(author)
        return bool(words) and bool(w) and f" {' '.join(w)} " in padded

    b = [lexical.get(n.note_id, 0.0) / best if best > 0 else 0.0 for n in seen]
    c = [cosine.get(n.note_id, 0.0) for n in seen]

    def ctx(values: list[float], i: int) -> float:
        out = 0.0
        for j in range(max(0, i - cal.context_notes), min(len(seen), i + cal.context_notes + 1)):
            gap = abs((seen[j].created_at - seen[i].created_at).total_seconds())
            if j != i and gap <= cal.context_minutes * 60:
                out = max(out, values[j])
        return out

    out: dict[str, tuple[list[float], float]] = {}
    for i, n in enumerate(seen):
        lt = math.log(min(n.tokens, cal.max_tokens))
        f = [b[i], b[i] * lt, c[i], c[i] * lt, lt, lt * lt, ctx(b, i), ctx(c, i),
             1.0 if named(n.agent) else 0.0]
        start = cal.intercept + (math.log(cal.reference_notes / len(seen))
                                 if cal.reference_notes > 0 else 0.0)
        if n.tokens > cal.long_note_tokens:  # the long-note term
            start += cal.long_note_log_tokens * math.log(n.tokens / cal.long_note_tokens)
        logit = start + sum(getattr(cal, k) * v for k, v in zip(
            ("bm25", "bm25_x_log_tokens", "cosine", "cosine_x_log_tokens", "log_tokens",
             "log_tokens_sq", "context_bm25", "context_cosine", "author_named"), f, strict=True))
        out[n.note_id] = (f, 1.0 / (1.0 + math.exp(-logit)))
    return out


# -- a fold of the lifecycle written apart from projections.reduce ---------------------------
def lifecycle_fold(events: Iterable[Mapping[str, Any]], as_of: str | None = None
                   ) -> dict[str, dict[str, Any]]:
    """The contract's fold of events (JSON-like dicts, in log order) written from the rules as
    the README states them, with plain dicts: ids apply once; a created id is never reused; a
    use needs a live note the agent may see; forget and revise need that and the author (or
    ``as_admin``); ``supersedes`` needs live notes of the same author, not already superseded,
    each named once and not the note itself, and carries their uses over; erase needs
    ``as_admin``, applies to forgotten notes too, empties the content, and ends the note.
    ``as_of`` (RFC 3339, ``Z``, whole seconds like the events'): only events dated at or
    before it apply, but a later-dated event's id is taken all the same (a duplicate of it
    further down the log never applies, as in the live projection).
    Returns note id -> the facts a ``NoteState`` holds (``state_facts`` gives the same view)."""
    notes: dict[str, dict[str, Any]] = {}
    seen: set[str] = set()
    for e in events:
        if e["event_id"] in seen:
            continue
        seen.add(e["event_id"])
        if as_of is not None and e["at"] > as_of:
            continue
        t, nid, agent = e["type"], e["note_id"], e["agent"]
        n = notes.get(nid)
        admin = bool(e.get("as_admin"))
        if t == "note.created":
            if n is not None:
                continue
            targets = list(e.get("supersedes", []))
            olds = [notes.get(s) for s in targets]
            if len(set(targets)) != len(targets) or nid in targets or any(
                    o is None or o["erased"] or o["forgotten"] or o["agent"] != agent
                    or o["superseded_by"] is not None for o in olds):
                continue
            lasts = [o["last_used_at"] for o in olds if o and o["last_used_at"] is not None]
            redacted = e.get("redacted") is not None
            notes[nid] = {
                "agent": agent, "scope": e.get("scope", "shared"), "kind": e.get("kind", "note"),
                "text": e["text"], "tokens": e.get("tokens") or max(1, -(-len(
                    e["text"].encode()) // 4)),
                "created_at": e["at"], "uses": sum(o["uses"] for o in olds if o),
                "last_used_at": max(lasts) if lasts else None, "forgotten": False,
                "erased": False, "redacted": redacted, "version": 1, "revised_at": None,
                "superseded_by": None, "embedding": e.get("embedding"),
                "supersedes": targets or None}
            for s in targets:
                notes[s]["superseded_by"] = nid
            continue
        if n is None or n["erased"]:
            continue
        if t == "note.erased":
            if admin:
                n.update(text="", embedding=None, erased=True, redacted=True)
            continue
        if n["forgotten"]:
            continue
        if n["scope"] == "private" and agent != n["agent"] and not (
                admin and t != "note.used"):
            continue
        if t == "note.used":
            n["uses"] += 1
            if n["last_used_at"] is None or e["at"] > n["last_used_at"]:
                n["last_used_at"] = e["at"]
            continue
        if agent != n["agent"] and not admin:
            continue
        if t == "note.forgotten":
            n["forgotten"] = True
        elif t == "note.revised":
            n["text"] = e["text"]
            n["embedding"] = e.get("embedding")
            n["tokens"] = e.get("tokens") or (max(1, -(-len(e["text"].encode()) // 4))
                                              if e["text"] else n["tokens"])
            n["kind"] = e.get("kind") or n["kind"]
            n["version"] += 1
            n["revised_at"] = e["at"]
            n["redacted"] = n["redacted"] or e.get("redacted") is not None
    return notes


def state_facts(states: Mapping[str, NoteState]) -> dict[str, dict[str, Any]]:
    """``NoteState``s as ``lifecycle_fold`` gives them (times as the events write them)."""
    def iso(t: Any) -> Any:
        return None if t is None else t.isoformat().replace("+00:00", "Z")

    return {k: {"agent": n.agent, "scope": n.scope, "kind": n.kind, "text": n.text,
                "tokens": n.tokens, "created_at": iso(n.created_at), "uses": n.uses,
                "last_used_at": iso(n.last_used_at), "forgotten": n.forgotten,
                "erased": n.erased, "redacted": n.redacted, "version": n.version,
                "revised_at": iso(n.revised_at), "superseded_by": n.superseded_by,
                "embedding": n.embedding, "supersedes": n.supersedes}
            for k, n in states.items()}
