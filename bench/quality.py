"""``python -m bench quality [--task locomo|longmemeval] [--data DIR] [--config FILE]
[--halves]``: evidence recall on LoCoMo (the default) or LongMemEval-S
(``bench.quality_longmemeval``; ``--halves``: its figures per half of the questions too).

Builds the task of ``../shared/benchmarks/locomo-dev/README.md`` (``bench.locomo``), answers
every question at each budget through hivemind's own query path (an index built from the
notes as the worker builds it, then ``worker.engine.run_rank``, the function a query job
calls) and, in the same run, through the baselines of the README: bm25s (Lucene idf, English
stems and stop words) sorted and filled top-down, wordllama cosine filled top-down, their
reciprocal-rank fusion (k = 60) filled top-down, and the seed's rule (BM25 x 0.95^days,
filled top-down). Prints evidence recall per budget and, at the largest budget, per category.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench import longmemeval as lme
from bench.locomo import CATEGORIES, DEFAULT_DATA, Conversation, load_task, recall
from hivemind_memory.api_stub.protocol.messages import QueryRequest
from hivemind_memory.projections.ranking.config import DEFAULT, RankingConfig, load_config
from hivemind_memory.projections.ranking.embedders import Embedder, embedder_for
from hivemind_memory.projections.ranking.index import NamespaceIndex, build_index
from hivemind_memory.projections.ranking.ranker import BatchMemo
from hivemind_memory.worker.engine import run_rank

BUDGETS = (200, 500, 1000)
RRF_K = 60
SEED_DECAY = 0.95
"""The seed's rule: 5 % a day."""

Picker = Callable[[Conversation, int, int], set[str]]
"""(conversation, question index, budget) -> the note ids packed."""


def fill(order: Sequence[int], costs: Sequence[int], budget: int, *, skip: bool = True
         ) -> list[int]:
    """Top-down fill of ``order``: ``skip`` passes over a note that does not fit and takes
    each one that still fits; otherwise the fill stops at the first note that does not fit."""
    out: list[int] = []
    used = 0
    for i in order:
        if used + costs[i] <= budget:
            out.append(i)
            used += costs[i]
        elif not skip:
            break
    return out


def ranked(scores: np.ndarray) -> list[int]:
    """Positions by score, highest first (ties by position, i.e. turn order)."""
    return [int(i) for i in np.lexsort((np.arange(len(scores)), -scores))]


@dataclass
class Baselines:
    """Per conversation: bm25s and wordllama scores of every (question, note)."""

    bm25: dict[str, np.ndarray] = field(default_factory=dict)
    cosine: dict[str, np.ndarray] = field(default_factory=dict)

    @classmethod
    def build(cls, convs: Sequence[Conversation]) -> Baselines:
        import logging

        import bm25s
        import Stemmer

        logging.getLogger("bm25s").setLevel(logging.WARNING)

        stem = Stemmer.Stemmer("english")
        out = cls()
        for c in convs:
            texts = [n.text for n in c.notes]
            corpus = bm25s.tokenize(texts, stopwords="en", stemmer=stem, show_progress=False)
            model = bm25s.BM25(method="lucene")
            model.index(corpus, show_progress=False)
            qs = bm25s.tokenize([q.text for q in c.questions], stopwords="en", stemmer=stem,
                                show_progress=False, return_ids=False)
            out.bm25[c.name] = np.array([model.get_scores(q) for q in qs], np.float64)
            notes_v = embed_normalised(texts)
            qv = embed_normalised([q.text for q in c.questions])
            out.cosine[c.name] = qv @ notes_v.T
        return out


def embed_normalised(texts: list[str]) -> np.ndarray:
    """wordllama's own ``embed`` (256-d, normalised), loaded offline from its wheel."""
    import wordllama

    model = wordllama.WordLlama.load(cache_dir=Path(wordllama.__file__).parent,
                                     disable_download=True)
    return np.asarray(model.embed(texts, norm=True), np.float64)


def baseline_pickers(convs: Sequence[Conversation], base: Baselines) -> dict[str, Picker]:
    costs = {c.name: [n.tokens for n in c.notes] for c in convs}
    ids = {c.name: [n.note_id for n in c.notes] for c in convs}
    ages = {c.name: np.array([(c.asked - n.created_at).total_seconds() / 86_400
                              for n in c.notes]) for c in convs}

    def by(scores: Callable[[Conversation, int], np.ndarray]) -> Picker:
        def pick(c: Conversation, q: int, budget: int) -> set[str]:
            s = scores(c, q)
            return {ids[c.name][i] for i in fill(ranked(s), costs[c.name], budget)}
        return pick

    def rrf(c: Conversation, q: int) -> np.ndarray:
        out = np.zeros(len(c.notes))
        for s in (base.bm25[c.name][q], base.cosine[c.name][q]):
            rank = np.empty(len(s), np.int64)
            rank[ranked(s)] = np.arange(1, len(s) + 1)
            out += 1.0 / (RRF_K + rank)
        return out

    def seed(c: Conversation, q: int) -> np.ndarray:
        return np.asarray(base.bm25[c.name][q] * SEED_DECAY ** ages[c.name])

    return {
        "bm25s (English stems + stop words), fill top-down": by(
            lambda c, q: base.bm25[c.name][q]),
        "wordllama cosine, fill top-down": by(lambda c, q: base.cosine[c.name][q]),
        f"RRF (k={RRF_K}) of the two, fill top-down": by(rrf),
        "the seed's rule: BM25 x 0.95^days, fill top-down": by(seed),
    }


def _indexed(convs: Sequence[Conversation], cfg: RankingConfig
             ) -> tuple[Embedder | None, dict[str, NamespaceIndex], dict[str, BatchMemo]]:
    """The config's embedder, each conversation's index as the worker builds it (notes
    embedded), and a batch memo per conversation with its questions embedded as one batch
    (as a query job does per wave)."""
    embedder = embedder_for(cfg.embedder)
    indexes = {c.name: build_index(c.name, {n.note_id: n for n in c.notes}, embedder)
               for c in convs}
    memos: dict[str, BatchMemo] = {}
    for c in convs:
        memos[c.name] = memo = BatchMemo()
        if embedder is not None and cfg.relevance == "calibrated":
            memo.prime_cosines(indexes[c.name], [q.text for q in c.questions], embedder)
    return embedder, indexes, memos


def hivemind_picker(convs: Sequence[Conversation], cfg: RankingConfig) -> Picker:
    """hivemind's query path: the index as the worker builds it (notes embedded by the
    config's embedder), the questions of a conversation embedded as one batch (as a query job
    does per wave), ``run_rank`` per query."""
    embedder, indexes, memos = _indexed(convs, cfg)

    def pick(c: Conversation, q: int, budget: int) -> set[str]:
        req = QueryRequest(ns="locomo", text=c.questions[q].text, budget=budget, as_of=c.asked)
        res = run_rank(indexes[c.name], req, cfg, c.asked, memos[c.name], embedder=embedder)
        return {n.note_id for n in res.notes}
    return pick


def filled_picker(convs: Sequence[Conversation], cfg: RankingConfig) -> Picker:
    """hivemind's scores (calibrated relevance x recency) of every candidate, filled
    top-down instead of packed exactly: what the exact packer adds."""
    embedder, indexes, memos = _indexed(convs, cfg)
    scored: dict[tuple[str, int], list[tuple[float, str, int]]] = {}

    def pick(c: Conversation, q: int, budget: int) -> set[str]:
        got = scored.get((c.name, q))
        if got is None:
            req = QueryRequest(ns="locomo", text=c.questions[q].text, budget=max(BUDGETS),
                               as_of=c.asked, explain=True)
            res = run_rank(indexes[c.name], req, cfg, c.asked, memos[c.name], embedder=embedder)
            got = scored[(c.name, q)] = sorted((-x.score, x.note_id, x.cost)
                                               for x in res.candidates)
        out: set[str] = set()
        used = 0
        for _, nid, cost in got:
            if used + cost <= budget:
                out.add(nid)
                used += cost
        return out
    return pick


@dataclass
class Row:
    name: str
    by_budget: dict[int, float]
    by_category: dict[int, float]
    seconds: float


def evaluate(name: str, pick: Picker, convs: Sequence[Conversation],
             budgets: Sequence[int] = BUDGETS) -> Row:
    t = time.perf_counter()
    sums = dict.fromkeys(budgets, 0.0)
    cat_sum = dict.fromkeys(CATEGORIES, 0.0)
    cat_n = dict.fromkeys(CATEGORIES, 0)
    n = 0
    top = max(budgets)
    for c in convs:
        for qi, question in enumerate(c.questions):
            n += 1
            for b in budgets:
                r = recall(pick(c, qi, b), question.evidence)
                sums[b] += r
                if b == top:
                    cat_sum[question.category] += r
                    cat_n[question.category] += 1
    return Row(name, {b: s / n for b, s in sums.items()},
               {k: cat_sum[k] / cat_n[k] for k in CATEGORIES if cat_n[k]},
               time.perf_counter() - t)


def table(rows: Sequence[Row], budgets: Sequence[int], n_questions: int) -> str:
    top = max(budgets)
    head = (["system"] + [f"B={b}" for b in budgets]
            + [f"{CATEGORIES[k]} @{top}" for k in CATEGORIES])
    cells = [head] + [[r.name] + [f"{r.by_budget[b]:.3f}" for b in budgets]
                      + [f"{r.by_category.get(k, float('nan')):.3f}" for k in CATEGORIES]
                      for r in rows]
    lines = ["| " + " | ".join(row) + " |" for row in cells]
    lines.insert(1, "|" + "|".join("---" for _ in head) + "|")
    return f"evidence recall, {n_questions} questions\n" + "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench quality", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", choices=("locomo", "longmemeval"), default="locomo",
                    help="the benchmark (default locomo)")
    ap.add_argument("--data", type=Path, default=None,
                    help=f"the benchmark's folder (default {DEFAULT_DATA} or "
                         f"{lme.DEFAULT_DATA})")
    ap.add_argument("--limit", type=int, default=None,
                    help="longmemeval: only the first N questions of the file")
    ap.add_argument("--halves", action="store_true",
                    help="longmemeval: every figure again for each half of the questions, "
                         "split by the md5 of question_id (as an integer, mod 2)")
    ap.add_argument("--config", default=None, help="ranking config TOML for hivemind's row")
    ap.add_argument("--no-baselines", action="store_true", help="hivemind's rows only")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="extra hivemind row with these overrides (repeatable; "
                         "'analyzer=plain;relevance=bm25' for several keys)")
    args = ap.parse_args(argv)
    if args.halves and args.task != "longmemeval":
        ap.error("--halves splits LongMemEval's questions: use it with --task longmemeval")
    cfg = load_config(args.config) if args.config else DEFAULT
    if args.task == "longmemeval":
        from bench import quality_longmemeval
        from hivemind_memory.projections.ranking.config import with_overrides

        qs = lme.load_task(args.data or lme.DEFAULT_DATA, args.limit)
        label = ("hivemind (default config)" if args.config is None
                 else f"hivemind ({args.config})")
        extra = [(f"hivemind {spec}", with_overrides(cfg, _overrides(spec)))
                 for spec in args.set]
        return quality_longmemeval.run(qs, cfg, label, extra, not args.no_baselines,
                                       halves=args.halves)
    convs = load_task(args.data or DEFAULT_DATA)
    n = sum(len(c.questions) for c in convs)
    rows = [evaluate("hivemind (default config)" if args.config is None
                     else f"hivemind ({args.config})", hivemind_picker(convs, cfg), convs)]
    if cfg.relevance == "calibrated":
        rows.append(evaluate("hivemind's scores, filled top-down instead of packed exactly",
                             filled_picker(convs, cfg), convs))
    for spec in args.set:
        over = _overrides(spec)
        from hivemind_memory.projections.ranking.config import with_overrides
        rows.append(evaluate(f"hivemind {spec}", hivemind_picker(
            convs, with_overrides(cfg, over)), convs))
    baselines: list[Row] = []
    if not args.no_baselines:
        base = Baselines.build(convs)
        baselines = [evaluate(name, p, convs)
                     for name, p in baseline_pickers(convs, base).items()]
    print(table(rows + baselines, BUDGETS, n))
    if baselines:
        best = {b: max(r.by_budget[b] for r in baselines) for b in BUDGETS}
        print("hivemind / best baseline: " + ", ".join(
            f"B={b} {rows[0].by_budget[b] / best[b]:.2f}x" for b in BUDGETS))
    return 0


def _overrides(spec: str) -> dict[str, Any]:
    import msgspec

    from hivemind_memory.worker.audit.config_sweep import nested

    flat: dict[str, Any] = {}
    for part in spec.split(";"):
        k, _, v = part.partition("=")
        try:
            flat[k.strip()] = msgspec.json.decode(v)
        except msgspec.DecodeError:
            flat[k.strip()] = v
    return nested(flat)
