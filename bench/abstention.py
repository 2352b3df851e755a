"""``python -m bench abstention``: would a rule that gives a question "with nothing relevant"
a short context bring LongMemEval's abstention questions under 500 tokens at a budget of
1,000 without costing the other questions their evidence?

Each rule flags a question from what its query's words hold among hivemind's own candidates
(``worker.engine.run_rank`` at 1,000 tokens with ``explain``, on the index each task's
``bench quality`` builds) and answers a flagged question at ``min(budget, cap)`` tokens
through the same ``run_rank`` (a short context, not an empty one); any other question is
answered as the default does. The flags (query words as BM25 matches them,
``Columns.query_postings``, weighted by their IDF over the namespace's notes):

- ``unknown word``: a query word that no note holds (``unknown_word_factor``'s words);
- ``coverage < t`` (``^2``: IDF squared): no candidate holds query words carrying ``t`` of
  the query's IDF weight (the abstention questions are near misses: "table tennis" where
  the history says tennis, so the best note holds only part of the question);
- ``split pair``: two adjacent query words, each held by some note and each of IDF >= 3,
  that no candidate holds together (the distinctive phrase never said);
- ``a or b``: either flag;
- ``calibrated, the k best-scored abstention``: a logistic "nothing relevant here" model
  over those flags and the candidate set's shape (``FEATURES``: the best and summed
  probability, the top 3's share, the candidate count, the best cosine), each LongMemEval
  question scored by the model fitted without it; flagged at or above the ``k``-th highest
  abstention question's score (a threshold chosen on the abstention questions themselves).

A second table (``--floors``) judges the question by its candidates' probabilities instead
and moves ``calibration.floor`` per question: the floor falls to a low value when the best
candidate is strong (its probability at least ``t``: evidence of a match, so weaker notes
beside it may be needed) and rises to a strict one otherwise, or follows the best candidate
(``c`` times its probability), each question answered through ``run_rank`` with that floor.

First it prints what the budget's second half holds: the evidence turns the 1,000-token
context packs and the 500-token one does not (``depth``; what a ceiling at 500 tokens for
every question would cost), on both benchmarks, and the abstention questions' tokens at both.
Then, per rule and cap, how many abstention / answerable / LoCoMo questions it flags,
LongMemEval's turn recall over all answerable questions and per half
(``bench.longmemeval.half``), the abstention questions' mean tokens, and LoCoMo's evidence
recall (``bench quality``'s figures for the default row). Measures; changes nothing.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

import numpy as np

from bench import locomo
from bench import longmemeval as lme
from hivemind_memory.api_stub.protocol.messages import QueryRequest
from hivemind_memory.projections.ranking.columns import FloatArray
from hivemind_memory.projections.ranking.config import DEFAULT, RankingConfig, with_overrides
from hivemind_memory.projections.ranking.embedders import Embedder, embedder_for
from hivemind_memory.projections.ranking.fitting import fit_logistic
from hivemind_memory.projections.ranking.index import NamespaceIndex, build_index
from hivemind_memory.projections.ranking.rank_result import RankResult
from hivemind_memory.projections.ranking.ranker import BatchMemo
from hivemind_memory.worker.engine import run_rank

BUDGETS = (200, 500, 1000)
CAPS = (150, 250)
"""The short context a flagged question gets, in tokens (at most its budget)."""
FLOORS = (0.0003, 0.001, 0.005, 0.01, 0.02)
"""The floors the question-level floor rules (``--floors``) choose among."""
SPLIT_PAIR_MIN_IDF = 3.0
"""A pair of adjacent query words counts for ``split pair`` when both are at least this rare
(IDF 3: in about 1 in 20 notes of the namespace)."""


@dataclass
class Case:
    """One question: which of its query words each candidate note holds, the words' IDF and
    note counts, and what hivemind packs at each budget asked for (ids, tokens)."""

    key: str
    abstention: bool
    half: int | None
    """LongMemEval's half (``lme.half``); None for LoCoMo."""
    evidence: tuple[str, ...]
    held: np.ndarray
    idf: np.ndarray
    df: np.ndarray
    packed: dict[int, tuple[frozenset[str], int]] = field(default_factory=dict)
    rel: np.ndarray = field(default_factory=lambda: np.zeros(0))
    """The candidates' relevance (the calibrated probability), highest first."""
    cosine: float = 0.0
    """The largest cosine of a candidate with the query (the embedder's)."""
    by_floor: dict[tuple[float, int], tuple[frozenset[str], int]] = field(default_factory=dict)
    """(floor, budget) -> what is packed with ``calibration.floor`` at that floor
    (``--floors``)."""


def coverage(c: Case, power: float = 1.0) -> float:
    """The largest share of the query's IDF weight (``idf ** power``) one candidate holds."""
    w = c.idf ** power
    if not len(c.held) or w.sum() <= 0:
        return 0.0
    return float(((c.held * w).sum(1) / w.sum()).max())


def unknown(c: Case) -> bool:
    """A query word no note holds."""
    return bool((c.df == 0).any())


def split_pair(c: Case) -> bool:
    """Two adjacent query words, both known and rare, that no candidate holds together."""
    for a in range(len(c.df) - 1):
        b = a + 1
        if (c.df[a] > 0 and c.df[b] > 0 and min(c.idf[a], c.idf[b]) >= SPLIT_PAIR_MIN_IDF
                and not (len(c.held) and (c.held[:, a] & c.held[:, b]).any())):
            return True
    return False


Flag = Callable[[Case], bool]
RULES: dict[str, Flag] = {
    "unknown word": unknown,
    "coverage < 0.45": lambda c: coverage(c) < 0.45,
    "coverage < 0.5": lambda c: coverage(c) < 0.5,
    "coverage^2 < 0.45": lambda c: coverage(c, 2.0) < 0.45,
    "split pair": split_pair,
    "coverage < 0.45 or unknown word": lambda c: coverage(c) < 0.45 or unknown(c),
    "coverage < 0.5 or unknown word": lambda c: coverage(c) < 0.5 or unknown(c),
}


FEATURES = ("coverage", "coverage^2", "unknown word", "split pair", "log best probability",
            "log probability sum", "top-3 share of the probability", "log candidates",
            "best cosine")
"""What the calibrated "nothing relevant here" model (``held_out_scores``) reads of a
question's candidates."""
CALIBRATED_L2 = 1e-2
"""The ridge penalty of that model (``fitting.fit_logistic``; on standardised features)."""


def features(c: Case) -> list[float]:
    """``FEATURES`` of ``c``."""
    r = c.rel if len(c.rel) else np.zeros(1)
    return [coverage(c), coverage(c, 2.0), float(unknown(c)), float(split_pair(c)),
            math.log(float(r[0]) + 1e-6), math.log(float(r.sum()) + 1e-6),
            float(r[:3].sum()) / max(float(r.sum()), 1e-9), math.log(len(c.rel) + 1),
            c.cosine]


def held_out_scores(lm: Sequence[Case], lo: Sequence[Case]) -> dict[str, float]:
    """A per-question logistic "nothing relevant here" model over ``features``
    (standardised; an abstention question is 1, any other 0; ``fitting.fit_logistic``):
    each LongMemEval question's logit by the model fitted without it (left out), each
    LoCoMo question's by the model fitted on every question (in sample, which flatters
    the rule)."""
    cs = [*lm, *lo]
    x = np.array([features(c) for c in cs], np.float64)
    x = (x - x.mean(0)) / (x.std(0) + 1e-12)
    y = np.array([float(c.abstention) for c in cs])

    def logit(b: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return np.asarray(x[rows] @ b[:-1] + b[-1])
    everything = fit_logistic(x, y, CALIBRATED_L2)
    out = dict(zip([c.key for c in lo],
                   logit(everything, np.arange(len(lm), len(cs))).tolist(), strict=True))
    for i, c in enumerate(lm):
        rest = np.ones(len(cs), np.bool_)
        rest[i] = False
        out[c.key] = float(logit(fit_logistic(x[rest], y[rest], CALIBRATED_L2),
                                 np.array([i]))[0])
    return out


def calibrated_rules(lm: Sequence[Case], lo: Sequence[Case],
                     picks: Sequence[int] = (3, 5, 7)) -> dict[str, Flag]:
    """Rules flagging the questions whose held-out score (``held_out_scores``) reaches the
    ``k``-th highest of the abstention questions' (a threshold chosen on them: the best
    such a model can do), for each ``k`` of ``picks`` up to their count."""
    scores = held_out_scores(lm, lo)
    top = sorted((scores[c.key] for c in lm if c.abstention), reverse=True)
    def at_least(t: float) -> Flag:
        return lambda c: scores[c.key] >= t
    return {f"calibrated, the {k} best-scored abstention": at_least(top[k - 1])
            for k in picks if k <= len(top)}


@dataclass(frozen=True)
class Asked:
    """Where and how one question is answered: its index, namespace, text and time, and the
    batch memo and embedder ``bench quality`` answers it with."""

    idx: NamespaceIndex
    ns: str
    text: str
    asked: datetime
    cfg: RankingConfig
    memo: BatchMemo | None
    embedder: Embedder | None

    def answer(self, budget: int, explain: bool = False) -> RankResult:
        req = QueryRequest(ns=self.ns, text=self.text, budget=budget, as_of=self.asked,
                           explain=explain)
        return run_rank(self.idx, req, self.cfg, self.asked, self.memo,
                        embedder=self.embedder)


def _case(a: Asked, key: str, abstention: bool, half: int | None,
          evidence: tuple[str, ...], budgets: Sequence[int],
          cosines: FloatArray | None, floors: Sequence[float] = ()) -> Case:
    """``a``'s question as a ``Case``; ``cosines``: the query's with every slot of its
    index."""
    cols = a.idx.cols
    res = a.answer(max(BUDGETS), explain=True)
    slot_of = {nid: s for s, nid in enumerate(cols.ids) if nid is not None}
    cand = np.array([slot_of[n.note_id] for n in res.candidates], np.int64)
    posts = cols.query_postings(a.text, a.cfg, "", None)
    held = np.zeros((len(cand), len(posts)), np.bool_)
    for w, (_, slots, _) in enumerate(posts):
        if len(slots):
            held[:, w] = np.isin(cand, slots)
    rel = np.sort(np.array([n.relevance for n in res.candidates], np.float64))[::-1]
    case = Case(key, abstention, half, evidence, held,
                np.array([p[2] for p in posts], np.float64),
                np.array([len(p[1]) for p in posts], np.int64), rel=rel,
                cosine=float(cosines[cand].max()) if cosines is not None and len(cand) else 0.0)
    for b in budgets:
        got = a.answer(b)
        case.packed[b] = (frozenset(n.note_id for n in got.notes),
                          sum(n.tokens for n in got.notes))
    for f in floors:
        at = replace(a, cfg=with_overrides(a.cfg, {"calibration": {"floor": f}}))
        for b in BUDGETS:
            got = at.answer(b)
            case.by_floor[(f, b)] = (frozenset(n.note_id for n in got.notes),
                                     sum(n.tokens for n in got.notes))
    return case


def longmemeval_cases(cfg: RankingConfig, budgets: Sequence[int],
                      limit: int | None = None, floors: Sequence[float] = ()) -> list[Case]:
    """Every question of the LongMemEval dev set (``lme.load_task``), as ``bench quality
    --task longmemeval`` answers it."""
    embedder = embedder_for(cfg.embedder)
    out = []
    for i, q in enumerate(lme.load_task(lme.DEFAULT_DATA, limit)):
        idx = build_index(f"lme{i}", {n.note_id: n for n in q.notes}, embedder)
        cos = None if embedder is None else idx.query_cosines(embedder.embed([q.text]))
        out.append(_case(Asked(idx, f"lme{i}", q.text, q.asked, cfg, None, embedder), q.qid,
                         q.abstention, lme.half(q), q.evidence, budgets,
                         None if cos is None else cos[:, 0], floors))
    return out


def locomo_cases(cfg: RankingConfig, budgets: Sequence[int],
                 limit: int | None = None, floors: Sequence[float] = ()) -> list[Case]:
    """Every question of LoCoMo's dev conversations (the first ``limit`` of each), as ``bench
    quality`` answers it (one index and batch memo per conversation)."""
    embedder = embedder_for(cfg.embedder)
    out = []
    for c in locomo.load_task(locomo.DEFAULT_DATA):
        idx = build_index(c.name, {n.note_id: n for n in c.notes}, embedder)
        memo = BatchMemo()
        qs = c.questions[:limit]
        if embedder is not None:
            memo.prime_cosines(idx, [q.text for q in qs], embedder)
        out += [_case(Asked(idx, "locomo", q.text, c.asked, cfg, memo, embedder),
                      f"{c.name}:{k}", False, None, q.evidence, budgets,
                      memo.cosines(idx, q.text), floors) for k, q in enumerate(qs)]
    return out


@dataclass(frozen=True)
class Figures:
    """One rule's figures: flagged counts, recall per budget (LongMemEval all / half 0 /
    half 1, LoCoMo) and the abstention questions' mean tokens per budget."""

    flagged: tuple[int, int, int]
    recall: dict[str, tuple[float, ...]]
    abstention_tokens: tuple[float, ...]


def measure(flag: Flag | None, cap: int, lm: Sequence[Case], lo: Sequence[Case]) -> Figures:
    """The figures when the questions ``flag`` picks are answered at ``min(budget, cap)``."""
    def answer(c: Case, b: int) -> tuple[frozenset[str], int]:
        return c.packed[min(b, cap) if flag is not None and flag(c) else b]

    ans = [c for c in lm if not c.abstention]
    flagged = (0, 0, 0) if flag is None else (
        sum(flag(c) for c in lm if c.abstention), sum(flag(c) for c in ans),
        sum(flag(c) for c in lo))
    return _figures(flagged, answer, lm, lo)


Answer = Callable[[Case, int], tuple[frozenset[str], int]]
"""A question and a budget -> the note ids packed and their tokens."""


def _figures(flagged: tuple[int, int, int], answer: Answer, lm: Sequence[Case],
             lo: Sequence[Case]) -> Figures:
    """Recall per part and abstention tokens per budget when each question is answered by
    ``answer`` (its packed note ids and tokens at a budget)."""
    def recall(cs: Sequence[Case], b: int) -> float:
        xs = [locomo.recall(set(answer(c, b)[0]), c.evidence) for c in cs if c.evidence]
        return float(np.mean(xs)) if xs else float("nan")

    ans = [c for c in lm if not c.abstention]
    parts = {"LongMemEval": ans, "half 0": [c for c in ans if c.half == 0],
             "half 1": [c for c in ans if c.half == 1], "LoCoMo": list(lo)}
    ab = [c for c in lm if c.abstention]
    return Figures(flagged, {k: tuple(recall(v, b) for b in BUDGETS) for k, v in parts.items()},
                   tuple(float(np.mean([answer(c, b)[1] for c in ab])) if ab else float("nan")
                         for b in BUDGETS))


FloorRule = Callable[[Case], float]
"""A question -> the ``calibration.floor`` it is answered with (one of ``FLOORS``)."""


def best_probability(c: Case) -> float:
    """The best candidate's probability (0 without candidates)."""
    return float(c.rel[0]) if len(c.rel) else 0.0


def at_most(x: float) -> float:
    """The highest of ``FLOORS`` at most ``x`` (the lowest when none is)."""
    return max((f for f in FLOORS if f <= x), default=FLOORS[0])


def every(f: float) -> FloorRule:
    """The floor ``f`` for every question."""
    return lambda c: f


def strong_low(t: float, strict: float, low: float = FLOORS[0]) -> FloorRule:
    """``low`` when the best candidate's probability is at least ``t``, else ``strict``."""
    return lambda c: low if best_probability(c) >= t else strict


def follow_best(k: float, low: float = FLOORS[0]) -> FloorRule:
    """``k`` times the best candidate's probability (at least ``low``; ``at_most``)."""
    return lambda c: at_most(max(low, k * best_probability(c)))


def floor_rules() -> dict[str, FloorRule]:
    """Every floor alone, then the question-level floor rules: low (0.0003) when the best
    candidate's probability is at least ``t``, else strict; or ``k`` times the best."""
    low = FLOORS[0]
    out = {f"floor {f} for every question": every(f) for f in FLOORS}
    for t in (0.05, 0.1, 0.15):
        for strict in (0.001, 0.005, 0.01, 0.02):
            out[f"best >= {t}: {low}, else {strict}"] = strong_low(t, strict)
    for k in (0.02, 0.05, 0.1, 0.2):
        out[f"{k} x the best (at least {low})"] = follow_best(k)
    return out


def measure_floors(rule: FloorRule, lm: Sequence[Case], lo: Sequence[Case]) -> Figures:
    """The figures when each question is answered with the floor ``rule`` gives it."""
    def answer(c: Case, b: int) -> tuple[frozenset[str], int]:
        return c.by_floor[(rule(c), b)]

    ans = [c for c in lm if not c.abstention]
    low = (sum(rule(c) > FLOORS[0] for c in lm if c.abstention),
           sum(rule(c) > FLOORS[0] for c in ans), sum(rule(c) > FLOORS[0] for c in lo))
    return _figures(low, answer, lm, lo)


def depth(cs: Sequence[Case], lo: int = BUDGETS[1], hi: int = BUDGETS[2]) -> tuple[int, int, int]:
    """What the budget's second part holds: of the evidence turns of ``cs`` (answerable
    questions), how many the ``hi``-token context packs and the ``lo``-token one does not,
    how many both pack, and how many questions gain one. The measure of what a ceiling that
    stops at ``lo`` tokens would cost (a turn counts when any passage of it is packed)."""
    extra = both = gain = 0
    for c in cs:
        small, big = c.packed[lo][0], c.packed[hi][0]
        more = sum(e in big and e not in small for e in c.evidence)
        extra += more
        both += sum(e in big and e in small for e in c.evidence)
        gain += more > 0
    return extra, both, gain


def _cells(fig: Figures) -> str:
    """A table row's cells after the rule's: the questions flagged, recall per part, the
    abstention tokens at the two larger budgets, LoCoMo's recall."""
    def r(k: str) -> str:
        return " / ".join(f"{x:.3f}" for x in fig.recall[k])
    return (f"{' / '.join(map(str, fig.flagged))} | {r('LongMemEval')} | {r('half 0')} "
            f"| {r('half 1')} | {fig.abstention_tokens[1]:.0f} / {fig.abstention_tokens[2]:.0f} "
            f"| {r('LoCoMo')} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench abstention", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", type=int, default=None,
                    help="the first N LongMemEval questions and N questions of each LoCoMo "
                         "conversation (a smoke run)")
    ap.add_argument("--floors", action="store_true",
                    help="also the question-level floor rules (each question answered at "
                         f"every floor of {', '.join(map(str, FLOORS))})")
    args = ap.parse_args(argv)
    t = time.process_time()
    budgets = sorted(set(BUDGETS) | set(CAPS))
    floors = FLOORS if args.floors else ()
    lm = longmemeval_cases(DEFAULT, budgets, args.limit, floors)
    lo = locomo_cases(DEFAULT, budgets, args.limit, floors)
    n_abs = sum(c.abstention for c in lm)
    print(f"{len(lm) - n_abs} answerable and {n_abs} abstention LongMemEval questions, "
          f"{len(lo)} LoCoMo questions; recall at {' / '.join(map(str, BUDGETS))} tokens")
    head = ("| rule | cap | flagged abst / answerable / LoCoMo | LongMemEval | half 0 | half 1 "
            f"| abstention tokens @{BUDGETS[1]} / @{BUDGETS[2]} | LoCoMo |")
    lo_b, hi_b = BUDGETS[1], BUDGETS[2]
    for name, cs in (("LongMemEval", [c for c in lm if not c.abstention]), ("LoCoMo", lo)):
        extra, both, gain = depth(cs)
        print(f"{name}: {extra} evidence turns packed at {hi_b} tokens and not at {lo_b} "
              f"({gain} of {len(cs)} questions gain one), {both} packed at both")
    if n_abs:
        ab = [c for c in lm if c.abstention]
        print(f"LongMemEval abstention tokens: {np.mean([c.packed[lo_b][1] for c in ab]):.0f} "
              f"at {lo_b}, {np.mean([c.packed[hi_b][1] for c in ab]):.0f} at {hi_b}")
    print(head + "\n|" + "---|" * 8)
    rows: list[tuple[str, Flag | None, int]] = [("none (the default)", None, max(BUDGETS))]
    rules = {**RULES, **calibrated_rules(lm, lo)} if any(c.abstention for c in lm) else RULES
    rows += [(name, f, cap) for cap in CAPS for name, f in rules.items()]
    for name, f, cap in rows:
        print(f"| {name} | {cap if f else '-'} | {_cells(measure(f, cap, lm, lo))}")
    if args.floors:
        print("\nquestion-level floors: the questions answered above the lowest floor "
              f"({FLOORS[0]}), then recall at {' / '.join(map(str, BUDGETS))} tokens")
        print("| floor rule | above the lowest: abst / answerable / LoCoMo | LongMemEval "
              f"| half 0 | half 1 | abstention tokens @{BUDGETS[1]} / @{BUDGETS[2]} | LoCoMo |")
        print("|" + "---|" * 7)
        for name, rule in floor_rules().items():
            print(f"| {name} | {_cells(measure_floors(rule, lm, lo))}")
    print(f"CPU seconds: {time.process_time() - t:.1f}")
    return 0
