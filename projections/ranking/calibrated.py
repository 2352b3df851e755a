"""Calibrated relevance: the probability that a note is needed, from a small logistic model.
Pure: the index, the query's cosines and the config are arguments.

Raw similarities are no values to maximise under a budget: summed, they favour many short
weak matches, and a narrow-range signal (cosine 0.3-0.9) lets the recency multiplier decide.
So a note's relevance is ``sigmoid(logit)``, ``logit`` a weighted sum of features of the note
and the query (``config.Calibration``: coefficients in the config, defaults fitted on
LoCoMo's development half with conversations held out, ``bench/fit_calibration.py``):

* ``bm25``: the note's BM25 (``Columns.bm25``) over the best among the notes the asker may see
  (in [0, 1]; 0 without a shared word);
* ``cosine``: the cosine of the note's vector (the embedder's, or the caller's when the note
  and the query both carry one of the same length) and the query's;
* ``log_tokens`` (natural log of the note's tokens, at most ``max_tokens``) and its square,
  and the products of ``bm25`` and ``cosine`` with it: length is what lets an exact packer
  trade one long note against several short ones on the probability of each being needed;
* ``context_bm25`` / ``context_cosine``: the largest ``bm25`` / ``cosine`` among the
  ``context_notes`` visible notes written just before and just after the note (creation
  order), within ``context_minutes`` of it: a reply sits next to the question it answers;
* ``author_named``: 1 when the query names the note's author (its agent id, as words).

Every visible live note gets a probability; the candidates are the notes with evidence of
their own (a word shared with the query, or ``cosine >= min_cosine``: an unrelated note is no
candidate however large the budget), at least ``floor`` likely, and among the
``max_candidates`` most probable (ties at the last one included; at least one per 10 tokens
of budget), so packing and recency run over a bounded set. Relevance depends on the note,
its neighbours, the query and the visible corpus, not on where notes sit in memory: the
per-note arithmetic runs over the visible notes in creation order (ties by note id), so the
same notes give the same arrays and the same bits (cosines are exact, see
``projections.ranking.vectors``); like the BM25's ``log``, numpy's ``exp`` may differ in the
last bit across CPUs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hivemind_memory.projections.ranking.columns import BoolArray, Columns, FloatArray, IntArray
from hivemind_memory.projections.ranking.config import Calibration, RankingConfig
from hivemind_memory.projections.ranking.relevance import tokenize

FEATURES = ("bm25", "bm25_x_log_tokens", "cosine", "cosine_x_log_tokens", "log_tokens",
            "log_tokens_sq", "context_bm25", "context_cosine", "author_named")
"""The model's features, in the order their terms are added (after the intercept)."""
TOKENS_PER_CANDIDATE = 10
"""Candidates are at least ``budget / TOKENS_PER_CANDIDATE``."""
US_PER_MINUTE = 60_000_000


def creation_order(cols: Columns) -> IntArray:
    """The live slots in creation order, ties by note id."""
    n = len(cols)
    live = cols.live[:n].nonzero()[0]
    t = cols.created_us[live]
    o = np.argsort(t, kind="stable")
    s, ts = live[o], t[o]
    same = (ts[1:] == ts[:-1]).nonzero()[0]
    if len(same):  # runs of equal times: by note id (slot order is arrival order)
        ids = cols.ids
        starts = same[np.concatenate(([True], same[1:] != same[:-1] + 1))]
        for a in starts.tolist():
            z = a + 1
            while z < len(ts) and ts[z] == ts[a]:
                z += 1
            run = s[a:z].tolist()
            s[a:z] = sorted(run, key=ids.__getitem__)
    return s


def named_owners(cols: Columns, query: str) -> list[int]:
    """Owner ids of the agents the query names (an agent's words, in order, among the
    query's)."""
    words = tokenize(query)
    if not words:
        return []
    text = " " + " ".join(words) + " "
    out: list[int] = []
    for name, o in cols.agents.items():
        w = tokenize(name)
        if w and f" {' '.join(w)} " in text:
            out.append(o)
    return out


def context(values: FloatArray, t_us: IntArray, notes: int, minutes: float) -> FloatArray:
    """Per position of a creation-ordered sequence: the largest of ``values`` among the
    ``notes`` positions before and after it whose time is within ``minutes`` (0 if none)."""
    out = np.zeros(len(values))
    window = minutes * US_PER_MINUTE
    for k in range(1, min(notes, len(values) - 1) + 1):
        near = (t_us[k:] - t_us[:-k]) <= window
        before = np.where(near, values[:-k], 0.0)  # position i + k sees i
        np.maximum(out[k:], before, out=out[k:])
        after = np.where(near, values[k:], 0.0)  # position i sees i + k
        np.maximum(out[:-k], after, out=out[:-k])
    return out


def features(cols: Columns, seq: IntArray, lex_slots: IntArray, lex: FloatArray,
             cosine: FloatArray | None, named: Sequence[int], cal: Calibration
             ) -> list[FloatArray]:
    """The ``FEATURES`` columns over the notes ``seq`` (visible live slots in creation
    order): ``lex_slots``/``lex`` the BM25 hits, ``cosine`` one value per slot of ``cols``
    (None: no semantic part), ``named`` the owners the query names."""
    n = len(cols)
    rel = np.zeros(n)
    if len(lex):
        rel[lex_slots] = lex / lex.max()
    b = rel[seq]
    c = np.zeros(len(seq)) if cosine is None else cosine[seq]
    lt = np.log(np.minimum(cols.tokens[seq], cal.max_tokens).astype(np.float64))
    t_us = cols.created_us[seq]
    author = np.isin(cols.owner[seq], np.array(named, np.int64)).astype(np.float64)
    return [b, b * lt, c, c * lt, lt, lt * lt,
            context(b, t_us, cal.context_notes, cal.context_minutes),
            context(c, t_us, cal.context_notes, cal.context_minutes), author]


def evidence(columns: Sequence[FloatArray], cal: Calibration) -> BoolArray:
    """Which notes have evidence of relevance of their own: a word shared with the query
    (``bm25`` > 0) or a close enough meaning (``cosine >= cal.min_cosine``). Only they are
    candidates (a note without is at relevance 0, whatever its neighbours: context raises a
    candidate's probability, it does not make one)."""
    at = FEATURES.index
    out: BoolArray = (columns[at("bm25")] > 0) | \
        (columns[at("cosine")] >= cal.min_cosine)
    return out


def probability(columns: Sequence[FloatArray], cal: Calibration, size: int) -> FloatArray:
    """``1 / (1 + exp(-logit))``, the logit's terms added in ``FEATURES`` order."""
    logit = np.full(size, cal.intercept)
    for name, col in zip(FEATURES, columns, strict=True):
        logit += getattr(cal, name) * col
    with np.errstate(over="ignore"):
        p: FloatArray = 1.0 / (1.0 + np.exp(-logit))
    return p


def candidates(p: FloatArray, limit: int) -> IntArray:
    """Positions of the ``limit`` largest ``p`` (every one tied with the last included)."""
    if len(p) <= limit:
        return np.arange(len(p))
    cut = np.partition(p, len(p) - limit)[len(p) - limit]
    at: IntArray = (p >= cut).nonzero()[0]
    return at


def limit_for(cfg: RankingConfig, budget: int | None) -> int:
    """How many candidates a query of ``budget`` tokens gets."""
    return max(cfg.max_candidates, 0 if budget is None else budget // TOKENS_PER_CANDIDATE)
