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
beside it the share of the questions whose answer string is in their evidence turns whose
packed context (one note or passage) holds it, casefolded with whitespace as one space
("answer"), and the share of evidence turns packed whole rather than as a passage ("whole
turns"); knowledge-update newest-fact recall (KUnew), session-level recall, and the mean
tokens packed for the abstention questions (left out of every recall figure). ``--halves``
prints every figure again for each half of the questions split by the md5 of
``question_id`` (``bench.longmemeval.half``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from bench.longmemeval import TYPES, Question, answer_in_evidence, half, normalised
from bench.quality import fill
from hivemind_memory.api_stub.protocol.messages import QueryRequest
from hivemind_memory.projections.ranking.config import RankingConfig
from hivemind_memory.projections.ranking.embedders import Embedder, embedder_for
from hivemind_memory.projections.ranking.index import build_index
from hivemind_memory.projections.state import NoteState
from hivemind_memory.worker.engine import run_rank

BUDGETS = (200, 500, 1000)
RRF_K = 60
SEED_DECAY = 0.95

@dataclass(frozen=True)
class Packed:
    """What one answer packed: the note ids, the tokens they hold, the ids packed whole (not
    as a passage) and the texts served (a passage's text for a passage)."""

    ids: frozenset[str]
    tokens: int
    whole: frozenset[str]
    texts: tuple[str, ...]

    @classmethod
    def notes(cls, notes: Sequence[NoteState]) -> Packed:
        """Whole notes (a baseline's fill)."""
        ids = frozenset(n.note_id for n in notes)
        return cls(ids, sum(n.tokens for n in notes), ids, tuple(n.text for n in notes))

    def holds(self, answer: str) -> bool:
        """Whether one packed text holds ``answer`` (both ``normalised``)."""
        want = normalised(answer)
        return any(want in normalised(t) for t in self.texts)


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
            return Packed.notes([q.notes[j] for j in fill(order, costs, budget, skip=skip)])
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
        return Packed(frozenset(n.note_id for n in res.notes),
                      sum(n.tokens for n in res.notes),
                      frozenset(n.note_id for n in res.notes if n.passage is None),
                      tuple(n.text for n in res.notes))
    return pick


@dataclass(frozen=True)
class Figures:
    """One question's figures at one budget (None where a figure does not count it)."""

    recall: float | None
    """Turn-level evidence recall (None for an abstention question or one without evidence)."""
    whole: float | None
    """The share of its evidence turns packed whole (not as a passage)."""
    session: float | None
    ku_new: float | None
    """Knowledge-update questions only."""
    answer: float | None
    """1 or 0: whether the packed context holds the answer (questions whose answer string is
    in their evidence turns only)."""
    abstention_tokens: float | None
    """Abstention questions only."""


def figures(q: Question, got: Packed, answerable: bool) -> Figures:
    """``q``'s figures for what was packed (``answerable``: ``answer_in_evidence(q)``)."""
    if q.abstention:
        return Figures(None, None, None, None, None, float(got.tokens))
    if not q.evidence:
        return Figures(None, None, None, None, None, None)
    ev = q.evidence
    want = {_session(e) for e in ev}
    return Figures(
        sum(e in got.ids for e in ev) / len(ev), sum(e in got.whole for e in ev) / len(ev),
        len(want & {_session(x) for x in got.ids}) / len(want),
        (sum(e in got.ids for e in q.newest) / len(q.newest)
         if q.qtype == "knowledge-update" else None),
        float(got.holds(q.answer)) if answerable else None, None)


@dataclass
class Run:
    """One system's figures for every question (``per[budget][question index]``)."""

    name: str
    per: dict[int, list[Figures]]
    seconds: float


@dataclass
class Row:
    name: str
    recall: dict[int, float]
    by_type: dict[tuple[str, int], float]
    ku_new: dict[int, float]
    session: dict[int, float]
    abstention_tokens: dict[int, float]
    answer: dict[int, float]
    whole: dict[int, float]
    seconds: float


def _session(nid: str) -> str:
    return nid.split(":", 1)[0]


def run_all(name: str, pick: Picker, qs: Sequence[Question],
            budgets: Sequence[int] = BUDGETS) -> Run:
    """Every question at every budget through ``pick`` (CPU seconds counted)."""
    t = time.process_time()
    answerable = [answer_in_evidence(q) for q in qs]
    per: dict[int, list[Figures]] = {b: [] for b in budgets}
    for i, q in enumerate(qs):
        for b in budgets:
            per[b].append(figures(q, pick(i, q, b), answerable[i]))
    return Run(name, per, time.process_time() - t)


def summarise(run: Run, qs: Sequence[Question], keep: Sequence[int] | None = None) -> Row:
    """The means of ``run``'s figures over the questions at ``keep`` (default all)."""
    at = range(len(qs)) if keep is None else keep

    def mean(b: int, field: str, qtype: str | None = None) -> float:
        xs = [x for i in at if (x := getattr(run.per[b][i], field)) is not None
              and (qtype is None or qs[i].qtype == qtype)]
        return float(np.mean(xs)) if xs else float("nan")

    bs = list(run.per)
    return Row(run.name, {b: mean(b, "recall") for b in bs},
               {(t, b): mean(b, "recall", t) for b in bs for t in TYPES},
               {b: mean(b, "ku_new") for b in bs}, {b: mean(b, "session") for b in bs},
               {b: mean(b, "abstention_tokens") for b in bs}, {b: mean(b, "answer") for b in bs},
               {b: mean(b, "whole") for b in bs}, run.seconds)


def evaluate(name: str, pick: Picker, qs: Sequence[Question],
             budgets: Sequence[int] = BUDGETS) -> Row:
    return summarise(run_all(name, pick, qs, budgets), qs)


def _markdown(cells: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(row) + " |" for row in cells]
    lines.insert(1, "|" + "|".join("---" for _ in cells[0]) + "|")
    return lines


def table(rows: Sequence[Row], budgets: Sequence[int], qs: Sequence[Question]) -> str:
    n = sum(1 for q in qs if not q.abstention and q.evidence)
    n_abs = sum(1 for q in qs if q.abstention)
    n_ku = sum(1 for q in qs if q.qtype == "knowledge-update" and not q.abstention)
    n_ans = sum(1 for q in qs if not q.abstention and answer_in_evidence(q))
    head = (["system"] + [f"recall B={b}" for b in budgets]
            + [f"answer B={b}" for b in budgets] + [f"whole turns B={b}" for b in budgets]
            + [f"KUnew B={b}" for b in budgets]
            + [f"session B={b}" for b in budgets] + [f"abstention tokens B={b}" for b in budgets])
    cells = [head] + [[r.name] + [f"{r.recall[b]:.3f}" for b in budgets]
                      + [f"{r.answer[b]:.3f}" for b in budgets]
                      + [f"{r.whole[b]:.3f}" for b in budgets]
                      + [f"{r.ku_new[b]:.3f}" for b in budgets]
                      + [f"{r.session[b]:.3f}" for b in budgets]
                      + [f"{r.abstention_tokens[b]:.0f}" for b in budgets] for r in rows]
    types = [t for t in TYPES if any(q.qtype == t and not q.abstention for q in qs)]
    thead = ["system"] + [f"{t} @{b}" for b in budgets for t in types]
    tcells = [thead] + [[r.name] + [f"{r.by_type.get((t, b), float('nan')):.3f}"
                                    for b in budgets for t in types] for r in rows]
    return (f"LongMemEval turn-level evidence recall, {n} questions ({n_ku} knowledge-update "
            f"for KUnew; {n_ans} whose answer string is in their evidence turns for answer; "
            f"{n_abs} abstention questions apart)\n"
            "answer: the share whose packed context (a note or passage) holds the answer "
            "(casefolded, whitespace as one space); whole turns: the share of evidence turns "
            "packed whole, not as a passage\n"
            + "\n".join(_markdown(cells)) + "\n\nper type\n" + "\n".join(_markdown(tcells)))


def ratios(rows: Sequence[Row], base: Sequence[Row], budgets: Sequence[int] = BUDGETS
           ) -> list[str]:
    """Each of ``rows``' turn recall over the best baseline's (the README's, then every row)."""
    out: list[str] = []
    readme = [x for x in base if not x.name.endswith("(extra)")]
    for r in rows:
        for label, among in (("best baseline", readme), ("best of every baseline row", base)):
            best = {b: max(x.recall[b] for x in among) for b in budgets}
            out.append(f"{r.name} / {label}: " + ", ".join(
                f"B={b} {r.recall[b] / best[b]:.2f}x" for b in budgets))
    return out


def run(qs: Sequence[Question], cfg: RankingConfig, label: str,
        extra: Sequence[tuple[str, RankingConfig]], baselines: bool,
        halves: bool = False) -> int:
    """Print the figures of hivemind's rows and the baselines over ``qs`` (``halves``: then
    again over each half of ``half``)."""
    ours = [run_all(label, hivemind_picker(qs, cfg), qs)]
    ours += [run_all(name, hivemind_picker(qs, c), qs) for name, c in extra]
    theirs: list[Run] = []
    if baselines:
        sc = Scores.build(qs)
        theirs = [run_all(name, p, qs) for name, p in baseline_pickers(qs, sc).items()]
    parts: list[tuple[str, list[int] | None]] = [("", None)]
    if halves:
        parts += [(f"half {h} (the md5 of question_id, as an integer, mod 2 = {h})",
                   [i for i, q in enumerate(qs) if half(q) == h]) for h in (0, 1)]
    for title, keep in parts:
        rows = [summarise(r, qs, keep) for r in ours]
        base = [summarise(r, qs, keep) for r in theirs]
        sub = qs if keep is None else [qs[i] for i in keep]
        if title:
            print(f"\n## {title}")
        print(table(rows + base, BUDGETS, sub))
        if base:
            print("\n".join(ratios(rows, base)))
    print("CPU seconds: " + ", ".join(f"{r.name.split(',')[0]} {r.seconds:.1f}"
                                      for r in ours + theirs))
    return 0
