"""``python -m bench quality --task longmemeval``: turn-level evidence recall on LongMemEval-S.

Builds the task of ``../shared/benchmarks/longmemeval-dev/README.md`` (``bench.longmemeval``:
one namespace per question, each turn a note), answers each question at each budget through
hivemind's own query path (the index built and embedded as the worker builds it, then
``worker.engine.run_rank``) and, in the same run, through the README's baselines on the same
notes: bm25s (Lucene idf, English stems and stop words; a note scoring 0 is never packed)
sorted and filled top-down stopping at the first note that does not fit, the same order
filled skipping what does not fit, wordllama cosine and the reciprocal-rank fusion (k = 60)
of the two filled top-down, and the seed's rule (BM25 x 0.95^days, filled top-down); and, as
rows marked "(extra)" that the README does not name, cosine and RRF filled skipping what does
not fit. The ratio to the best baseline is printed against the README's baselines and
against every row.
Prints turn-level recall per budget (overall, per type, and the ratio to the best baseline),
knowledge-update newest-fact recall (KUnew), session-level recall, and the mean tokens packed
for the abstention questions (left out of every recall figure).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from bench.longmemeval import TYPES, Question
from bench.quality import fill
from hivemind_memory.api_stub.protocol.messages import QueryRequest
from hivemind_memory.projections.ranking.config import RankingConfig
from hivemind_memory.projections.ranking.embedders import Embedder, embedder_for
from hivemind_memory.projections.ranking.index import build_index
from hivemind_memory.worker.engine import run_rank

BUDGETS = (200, 500, 1000)
RRF_K = 60
SEED_DECAY = 0.95

Packed = tuple[frozenset[str], int]
"""The note ids packed and the tokens they hold."""
Picker = Callable[[int, Question, int], Packed]
"""(question index, question, budget) -> what was packed."""


def ranked(scores: np.ndarray) -> list[int]:
    """Positions by score, highest first (ties by position, i.e. turn order)."""
    return [int(i) for i in np.lexsort((np.arange(len(scores)), -scores))]


@cache
def _wordllama() -> Any:
    import wordllama

    return wordllama.WordLlama.load(cache_dir=Path(wordllama.__file__).parent,
                                    disable_download=True)


@dataclass
class Scores:
    """bm25s and wordllama (256-d, normalised) scores of each question's notes."""

    bm25: list[np.ndarray]
    cosine: list[np.ndarray]

    @classmethod
    def build(cls, qs: Sequence[Question]) -> Scores:
        import logging

        import bm25s
        import Stemmer

        logging.getLogger("bm25s").setLevel(logging.WARNING)
        stem = Stemmer.Stemmer("english")
        model_w = _wordllama()
        bm, co = [], []
        for q in qs:
            texts = [n.text for n in q.notes]
            corpus = bm25s.tokenize(texts, stopwords="en", stemmer=stem, show_progress=False)
            model = bm25s.BM25(method="lucene")
            model.index(corpus, show_progress=False)
            qt = bm25s.tokenize([q.text], stopwords="en", stemmer=stem, show_progress=False,
                                return_ids=False)
            bm.append(np.asarray(model.get_scores(qt[0]), np.float64))
            nv = np.asarray(model_w.embed(texts, norm=True), np.float64)
            qv = np.asarray(model_w.embed([q.text], norm=True), np.float64)
            co.append((qv @ nv.T)[0])
        return cls(bm, co)


def baseline_pickers(qs: Sequence[Question], sc: Scores) -> dict[str, Picker]:
    def by(scores: Callable[[int, Question], np.ndarray], *, skip: bool,
           positive: bool = False) -> Picker:
        def pick(i: int, q: Question, budget: int) -> Packed:
            s = scores(i, q)
            order = ranked(s)
            if positive:
                order = [j for j in order if s[j] > 0]
            costs = [n.tokens for n in q.notes]
            got = fill(order, costs, budget, skip=skip)
            return frozenset(q.notes[j].note_id for j in got), sum(costs[j] for j in got)
        return pick

    def rrf(i: int, q: Question) -> np.ndarray:
        out = np.zeros(len(q.notes))
        for s in (sc.bm25[i], sc.cosine[i]):
            rank = np.empty(len(s), np.int64)
            rank[ranked(s)] = np.arange(1, len(s) + 1)
            out += 1.0 / (RRF_K + rank)
        return out

    def seed(i: int, q: Question) -> np.ndarray:
        ages = np.array([max((q.asked - n.created_at).total_seconds(), 0.0) / 86_400
                         for n in q.notes])
        return np.asarray(sc.bm25[i] * SEED_DECAY ** ages)

    def bm(i: int, q: Question) -> np.ndarray:
        return sc.bm25[i]

    def cos(i: int, q: Question) -> np.ndarray:
        return sc.cosine[i]

    return {
        "bm25s, sort, fill top-down (stop at the first misfit)": by(bm, skip=False,
                                                                    positive=True),
        "bm25s, sort, fill skipping what does not fit": by(bm, skip=True, positive=True),
        "wordllama cosine, fill top-down (stop)": by(cos, skip=False),
        "wordllama cosine, fill skipping (extra)": by(cos, skip=True),
        f"RRF (k={RRF_K}) of the two, fill top-down (stop)": by(rrf, skip=False),
        f"RRF (k={RRF_K}) of the two, fill skipping (extra)": by(rrf, skip=True),
        "the seed's rule: BM25 x 0.95^days, fill top-down (stop)": by(seed, skip=False,
                                                                      positive=True),
    }


def hivemind_picker(qs: Sequence[Question], cfg: RankingConfig) -> Picker:
    """hivemind's query path: each question's index as the worker builds it (notes embedded
    by the config's embedder), ``run_rank`` per query; indexes built as they are first asked."""
    embedder: Embedder | None = embedder_for(cfg.embedder)
    built: dict[int, Any] = {}

    def pick(i: int, q: Question, budget: int) -> Packed:
        idx = built.get(i)
        if idx is None:
            built.clear()  # one question's index at a time: the others are done with
            idx = built[i] = build_index(f"lme{i}", {n.note_id: n for n in q.notes}, embedder)
        req = QueryRequest(ns=f"lme{i}", text=q.text, budget=budget, as_of=q.asked)
        res = run_rank(idx, req, cfg, q.asked, None, embedder=embedder)
        return frozenset(n.note_id for n in res.notes), sum(n.tokens for n in res.notes)
    return pick


@dataclass
class Row:
    name: str
    recall: dict[int, float]
    by_type: dict[tuple[str, int], float]
    ku_new: dict[int, float]
    session: dict[int, float]
    abstention_tokens: dict[int, float]
    seconds: float


def _session(nid: str) -> str:
    return nid.split(":", 1)[0]


def evaluate(name: str, pick: Picker, qs: Sequence[Question],
             budgets: Sequence[int] = BUDGETS) -> Row:
    t = time.process_time()
    rec: dict[int, list[float]] = {b: [] for b in budgets}
    typed: dict[tuple[str, int], list[float]] = {}
    ku: dict[int, list[float]] = {b: [] for b in budgets}
    sess: dict[int, list[float]] = {b: [] for b in budgets}
    abst: dict[int, list[int]] = {b: [] for b in budgets}
    for i, q in enumerate(qs):
        for b in budgets:
            ids, tokens = pick(i, q, b)
            if q.abstention:
                abst[b].append(tokens)
                continue
            if not q.evidence:
                continue
            r = sum(e in ids for e in q.evidence) / len(q.evidence)
            rec[b].append(r)
            typed.setdefault((q.qtype, b), []).append(r)
            want = {_session(e) for e in q.evidence}
            sess[b].append(len(want & {_session(x) for x in ids}) / len(want))
            if q.qtype == "knowledge-update":
                ku[b].append(sum(e in ids for e in q.newest) / len(q.newest))

    def mean(xs: Sequence[float]) -> float:
        return float(np.mean(xs)) if len(xs) else float("nan")

    return Row(name, {b: mean(v) for b, v in rec.items()},
               {k: mean(v) for k, v in typed.items()}, {b: mean(v) for b, v in ku.items()},
               {b: mean(v) for b, v in sess.items()},
               {b: mean([float(x) for x in v]) for b, v in abst.items()},
               time.process_time() - t)


def table(rows: Sequence[Row], budgets: Sequence[int], qs: Sequence[Question]) -> str:
    n = sum(1 for q in qs if not q.abstention and q.evidence)
    n_abs = sum(1 for q in qs if q.abstention)
    n_ku = sum(1 for q in qs if q.qtype == "knowledge-update" and not q.abstention)
    head = (["system"] + [f"recall B={b}" for b in budgets] + [f"KUnew B={b}" for b in budgets]
            + [f"session B={b}" for b in budgets] + [f"abstention tokens B={b}" for b in budgets])
    cells = [head] + [[r.name] + [f"{r.recall[b]:.3f}" for b in budgets]
                      + [f"{r.ku_new[b]:.3f}" for b in budgets]
                      + [f"{r.session[b]:.3f}" for b in budgets]
                      + [f"{r.abstention_tokens[b]:.0f}" for b in budgets] for r in rows]
    lines = ["| " + " | ".join(row) + " |" for row in cells]
    lines.insert(1, "|" + "|".join("---" for _ in head) + "|")
    types = [t for t in TYPES if any(q.qtype == t and not q.abstention for q in qs)]
    thead = ["system"] + [f"{t} @{b}" for b in budgets for t in types]
    tcells = [thead] + [[r.name] + [f"{r.by_type.get((t, b), float('nan')):.3f}"
                                    for b in budgets for t in types] for r in rows]
    tlines = ["| " + " | ".join(row) + " |" for row in tcells]
    tlines.insert(1, "|" + "|".join("---" for _ in thead) + "|")
    return (f"LongMemEval turn-level evidence recall, {n} questions ({n_ku} knowledge-update "
            f"for KUnew; {n_abs} abstention questions apart)\n" + "\n".join(lines)
            + "\n\nper type\n" + "\n".join(tlines))


def run(qs: Sequence[Question], cfg: RankingConfig, label: str,
        extra: Sequence[tuple[str, RankingConfig]], baselines: bool) -> int:
    rows = [evaluate(label, hivemind_picker(qs, cfg), qs)]
    rows += [evaluate(name, hivemind_picker(qs, c), qs) for name, c in extra]
    base: list[Row] = []
    if baselines:
        sc = Scores.build(qs)
        base = [evaluate(name, p, qs) for name, p in baseline_pickers(qs, sc).items()]
    print(table(rows + base, BUDGETS, qs))
    if base:
        readme = [x for x in base if not x.name.endswith("(extra)")]
        for r in rows:
            for label, among in (("best baseline", readme), ("best of every baseline row", base)):
                best = {b: max(x.recall[b] for x in among) for b in BUDGETS}
                print(f"{r.name} / {label}: " + ", ".join(
                    f"B={b} {r.recall[b] / best[b]:.2f}x" for b in BUDGETS))
    print("CPU seconds: " + ", ".join(f"{r.name.split(',')[0]} {r.seconds:.1f}"
                                      for r in rows + base))
    return 0
