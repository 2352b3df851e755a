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
* ``author_named``: 1 when the query names the note's author (its agent id, as words);

a long-note term (``long_note_log_tokens`` times ``ln(tokens / long_note_tokens)`` for a note
longer than ``long_note_tokens``: not fitted on LoCoMo, whose turns are all shorter, but
chosen on LongMemEval's; ``long_note``), and a fixed term, ``ln(reference_notes / n)`` for
``n`` notes visible to the asker: a query needs about as many notes whatever the namespace's
size, so in a namespace of 5 notes the one that matches is far likelier to be needed than in
LoCoMo's 550 (fitted as an offset).

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

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from hivemind_memory.projections.ranking.bm25_rules import tokenize
from hivemind_memory.projections.ranking.columns import BoolArray, Columns, FloatArray, IntArray
from hivemind_memory.projections.ranking.config import Calibration, RankingConfig


class NativeKernel(Protocol):
    """What this module calls of the C kernel (checked against ``_calibrated.pyi``)."""

    def logits(self, seq: IntArray, at: IntArray, lex: FloatArray, cosine: FloatArray,
               owner: npt.NDArray[np.int32], named: FloatArray, wb: FloatArray,
               wc: FloatArray, base: FloatArray, near: npt.NDArray[np.uint8], k: int,
               w_cb: float, w_cc: float, w_an: float, min_cosine: float, neg: FloatArray,
               evidence: npt.NDArray[np.uint8]) -> None: ...

    def finish(self, e: FloatArray, evidence: npt.NDArray[np.uint8], floor: float,
               pos: IntArray) -> int: ...

    def nearest(self, seq: IntArray, cosine: FloatArray, k: int, min_cosine: float,
                out: IntArray) -> int: ...

    def compact(self, neg: FloatArray, evidence: npt.NDArray[np.uint8], at: IntArray) -> int: ...


_built: NativeKernel | None
try:
    from hivemind_memory.projections.ranking import _calibrated as _built
except ImportError:  # pragma: no cover - an install without a C compiler
    _built = None

native: NativeKernel | None = _built
"""The per-note arithmetic of ``likely`` in C (``projections/ranking/_calibrated.c``), when it
was built; otherwise (or set to None) the numpy code of ``signals``, ``probability`` and
``evidence`` (the reference: the tests run both and require the same bits)."""
_NONE = np.zeros(0, np.float64)
_EVERY = np.zeros(0, np.uint8)
"""``finish``'s evidence when every note given has evidence."""

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


_AGENT_WORDS: dict[str, str] = {}
"""Agent id -> its words joined by spaces, padded (``" agent 7 "``), as ``named_owners``
matches them."""


def named_owners(cols: Columns, query: str) -> list[int]:
    """Owner ids of the agents the query names (an agent's words, in order, among the
    query's)."""
    words = tokenize(query)
    if not words:
        return []
    text = " " + " ".join(words) + " "
    out: list[int] = []
    for name, o in cols.agents.items():
        w = _AGENT_WORDS.get(name)
        if w is None:
            w = _AGENT_WORDS[name] = " " + " ".join(tokenize(name)) + " "
            if len(_AGENT_WORDS) > 1 << 16:  # a bound, not a policy: rarely reached
                _AGENT_WORDS.clear()
        if len(w) > 2 and w in text:
            out.append(o)
    return out


@dataclass(frozen=True)
class Layout:
    """What the model needs of a creation-ordered sequence of notes that does not depend on
    the query (cached by the index while its notes do not change)."""

    base: FloatArray
    """``intercept + prior + log_tokens * lt + log_tokens_sq * lt**2`` plus the long-note
    term (``long_note``) per note."""
    wb: FloatArray
    """``bm25 + bm25_x_log_tokens * lt``: the weight of a note's ``bm25``."""
    wc: FloatArray
    """``cosine + cosine_x_log_tokens * lt``: the weight of its ``cosine``."""
    owner: npt.NDArray[np.int32]
    near: tuple[BoolArray, ...]
    """``near[k - 1][i]``: the notes at positions ``i`` and ``i + k`` are within
    ``context_minutes`` of each other."""
    pos: npt.NDArray[np.int32]
    """The position of each slot of the table in the sequence (-1: not in it)."""
    near_flat: npt.NDArray[np.uint8]
    """``near`` as one array for the C path: ``near_flat[(k - 1) * n + i]`` is
    ``near[k - 1][i]`` (0 past its end)."""


def log_tokens(cols: Columns, seq: IntArray, cal: Calibration) -> FloatArray:
    """Natural log of each note's tokens, at most ``max_tokens``."""
    lt: FloatArray = np.log(np.minimum(cols.tokens[seq], cal.max_tokens).astype(np.float64))
    return lt


def long_note(cols: Columns, seq: IntArray, cal: Calibration) -> FloatArray:
    """``ln(tokens / long_note_tokens)`` of each note longer than ``long_note_tokens``, 0 for
    the others: the long-note term's value (times ``long_note_log_tokens`` in the logit)."""
    k = float(cal.long_note_tokens)
    out: FloatArray = np.log(np.maximum(cols.tokens[seq].astype(np.float64), k) / k)
    return out


def fixed_logit(cols: Columns, seq: IntArray, cal: Calibration) -> FloatArray:
    """The logit's terms a fit does not learn, per note of ``seq`` (the visible notes): the
    ``prior`` of their number and the long-note term (a fit's offset)."""
    out: FloatArray = prior(len(seq), cal) + cal.long_note_log_tokens * long_note(cols, seq,
                                                                                 cal)
    return out


def prior(n: int, cal: Calibration) -> float:
    """The logit's fixed term for ``n`` visible notes: ``ln(reference_notes / n)`` (0 when
    ``reference_notes`` is 0)."""
    if cal.reference_notes <= 0 or n <= 0:
        return 0.0
    return math.log(cal.reference_notes / n)


def layout_of(cols: Columns, seq: IntArray, cal: Calibration) -> Layout:
    """The ``Layout`` of the notes ``seq`` (visible live slots in creation order)."""
    lt = log_tokens(cols, seq, cal)
    t_us = cols.created_us[seq]
    window = cal.context_minutes * US_PER_MINUTE
    near = tuple((t_us[k:] - t_us[:-k]) <= window
                 for k in range(1, min(cal.context_notes, len(seq) - 1) + 1))
    start = cal.intercept + prior(len(seq), cal)
    pos = np.full(len(cols), -1, np.int32)
    pos[seq] = np.arange(len(seq), dtype=np.int32)
    flat = np.zeros((len(near), len(seq)), np.uint8)
    for k, m in enumerate(near, start=1):
        flat[k - 1, :len(seq) - k] = m
    base = (start + cal.log_tokens * lt) + cal.log_tokens_sq * (lt * lt)
    base += cal.long_note_log_tokens * long_note(cols, seq, cal)
    return Layout(base=base, wb=cal.bm25 + cal.bm25_x_log_tokens * lt,
                  wc=cal.cosine + cal.cosine_x_log_tokens * lt,
                  owner=cols.owner[seq].astype(np.int32), near=near, pos=pos,
                  near_flat=flat.reshape(-1))


def context(values: FloatArray, near: Sequence[BoolArray]) -> FloatArray:
    """Per position of a creation-ordered sequence: the largest of ``values`` among the
    positions up to ``len(near)`` before and after it that are near it (0 if none)."""
    out = np.zeros(len(values))
    for k, m in enumerate(near, start=1):
        np.maximum(out[k:], np.where(m, values[:-k], 0.0), out=out[k:])  # i + k sees i
        np.maximum(out[:-k], np.where(m, values[k:], 0.0), out=out[:-k])  # i sees i + k
    return out


def sparse_context(at: IntArray, values: FloatArray, near: Sequence[BoolArray],
                   n: int) -> FloatArray:
    """``context`` of a sequence of ``n`` that is 0 but at positions ``at`` (``values``
    there, > 0): the same values, from the few positions that are not 0."""
    out = np.zeros(n)
    for k, m in enumerate(near, start=1):
        ahead = at + k  # i + k sees i
        ok = ahead < n
        ok[ok] = m[at[ok]]
        np.maximum.at(out, ahead[ok], values[ok])
        back = at - k  # i sees i + k
        ok = back >= 0
        ok[ok] = m[back[ok]]
        np.maximum.at(out, back[ok], values[ok])
    return out


@dataclass(frozen=True)
class Signals:
    """A query's signals over a sequence of notes: ``bm25`` (relative to the best), ``cosine``,
    their context and ``author_named``."""

    b: FloatArray
    c: FloatArray
    cb: FloatArray
    cc: FloatArray
    author: FloatArray


def signals(cols: Columns, seq: IntArray, lex_slots: IntArray, lex: FloatArray,
            cosine: FloatArray | None, named: Sequence[int], lay: Layout) -> Signals:
    """The query-dependent features over the notes ``seq``: ``lex_slots``/``lex`` the BM25
    hits, ``cosine`` one value per slot of ``cols`` (None: no semantic part), ``named`` the
    owners the query names."""
    n = len(seq)
    b = np.zeros(n)
    at = lay.pos[lex_slots].astype(np.int64)  # BM25 hits are visible notes
    if len(lex):
        b[at] = lex / lex.max()
    # few hits: their neighbours' context from the hits alone (the same maxima)
    cb = sparse_context(at, b[at], lay.near, n) if len(at) * 8 < n else context(b, lay.near)
    c = np.zeros(n) if cosine is None else cosine[seq]
    return Signals(b, c, cb, context(c, lay.near), authors_named(cols, named, lay.owner))


def authors_named(cols: Columns, named: Sequence[int], owner: npt.NDArray[np.int32]) -> FloatArray:
    """1 for each note whose author (``owner``: a layout's owner per note) the query names
    (``named``), else 0: the ``author_named`` feature."""
    if not named:
        return np.zeros(len(owner))
    mask = np.zeros(len(cols.agents) + 1, np.float64)
    mask[list(named)] = 1.0
    out: FloatArray = mask[owner]
    return out


def features(sig: Signals, lt: FloatArray) -> list[FloatArray]:
    """The ``FEATURES`` columns (what a fit learns from), ``lt`` from ``log_tokens``."""
    return [sig.b, sig.b * lt, sig.c, sig.c * lt, lt, lt * lt, sig.cb, sig.cc, sig.author]


def probability(sig: Signals, lay: Layout, cal: Calibration) -> FloatArray:
    """``1 / (1 + exp(-logit))``: the ``Layout``'s part of the logit, then the query's, in a
    fixed order (the same notes and query: the same bits)."""
    logit = sig.b * lay.wb
    logit += lay.base
    tmp = np.multiply(sig.c, lay.wc)
    logit += tmp
    np.multiply(sig.cb, cal.context_bm25, out=tmp)
    logit += tmp
    np.multiply(sig.cc, cal.context_cosine, out=tmp)
    logit += tmp
    np.multiply(sig.author, cal.author_named, out=tmp)
    logit += tmp
    np.negative(logit, out=logit)
    with np.errstate(over="ignore"):
        np.exp(logit, out=logit)
    logit += 1.0
    np.reciprocal(logit, out=logit)
    return logit


def nearest(cos: FloatArray | None, cal: Calibration) -> IntArray:
    """Positions of the ``cal.nearest`` largest cosines (all tied with the last included)
    that are at least ``cal.nearest_min_cosine``, ascending (none without cosines)."""
    if cos is None or cal.nearest <= 0 or not len(cos):
        return np.zeros(0, np.int64)
    at = candidates(cos, cal.nearest)
    out: IntArray = at[cos[at] >= cal.nearest_min_cosine].astype(np.int64)
    return out


def by_meaning(p: FloatArray, own: BoolArray, cos: FloatArray) -> FloatArray:
    """The probabilities of a small namespace's ``nearest`` notes (``p``: the model's, ``own``:
    whether each has evidence of its own, ``cos``: its cosine): a note with evidence keeps its
    own; the others are the nearest only by meaning, and for them the model's probability
    says little of the query (no shared word, a cosine under ``min_cosine``: their length and
    their neighbours decide it), so meaning orders them. They share the highest of their
    probabilities in proportion to their cosines: the nearest of them gets it, one half as
    near (half the cosine) half of it, and one with a cosine of 0 or less none (no
    candidate). A query answered only by such notes then packs the nearest ones, as a
    vector store would."""
    out = p.copy()
    only = ~own
    if not only.any():
        return out
    c = cos[only]
    top = float(c.max())
    out[only] = float(p[only].max()) * np.maximum(c, 0.0) / top if top > 0 else 0.0
    return out


def evidence(sig: Signals, cal: Calibration, near: IntArray) -> BoolArray:
    """Which notes have evidence of relevance: a word shared with the query (``bm25`` > 0),
    a close enough meaning (``cosine >= cal.min_cosine``), or a place among the ``near``
    ones (``nearest``: none without cosines, whatever ``nearest_min_cosine``). Only they are
    candidates (a note without is at relevance 0, whatever its neighbours: context raises a
    candidate's probability, it does not make one)."""
    out: BoolArray = (sig.b > 0) | (sig.c >= cal.min_cosine)
    out[near] = True
    return out


def likely(cols: Columns, seq: IntArray, lex_slots: IntArray, lex: FloatArray,
           cosine: FloatArray | None, named: Sequence[int], lay: Layout, cal: Calibration,
           limit: int, allowed: BoolArray | None = None,
           visible: int | None = None, tail: bool = True) -> tuple[IntArray, FloatArray]:
    """The candidates among the notes ``seq`` (``signals``' arguments): their positions in
    ``seq``, ascending, and their probability (``probability``), the notes with ``evidence``,
    at least ``cal.floor`` likely, ``allowed`` (a flag per slot; None: all), and among the
    ``limit`` most probable. ``visible``: how many notes the asker may see, when ``seq`` is
    only some of them (``likely_among``'s windows): whether the namespace is small
    (``nearest_max_notes``) is its size's, not the window's (default ``len(seq)``). Under
    ``floor``, only the ``tail_notes`` most probable at ``tail_floor`` or above
    (``tail_kept``; ``tail`` False: every one, the caller trims them)."""
    small = (len(seq) if visible is None else visible) <= cal.nearest_max_notes
    kernel = native
    if kernel is None:
        sig = signals(cols, seq, lex_slots, lex, cosine, named, lay)
        p = probability(sig, lay, cal)
        near = nearest(sig.c if cosine is not None else None, cal)
        kept = p[near]
        own = ((sig.b > 0) | (sig.c >= cal.min_cosine))[near]
        p[~evidence(sig, cal, near)] = 0.0
        low = lowest_floor(cal)
        if low > 0:
            p[p < low] = 0.0
        if tail and low < cal.floor:  # under the floor: only the tail's notes
            p[~tail_kept(p, cal, cols.tokens[seq],
                         None if allowed is None else allowed[seq])] = 0.0
        if len(near) and small:
            # a small namespace: its nearest notes whatever the floor, by meaning
            p[near] = by_meaning(kept, own, sig.c[near])
        if allowed is not None:
            p[~allowed[seq]] = 0.0
        keep = candidates(p, limit)
        keep = keep[p[keep] > 0]
        return keep, p[keep]
    n = len(seq)
    mask = _NONE
    if named:
        mask = np.zeros(len(cols.agents) + 1, np.float64)
        mask[list(named)] = 1.0
    neg = np.empty(n, np.float64)
    ev = np.empty(n, np.uint8)
    cos = _NONE if cosine is None else np.ascontiguousarray(cosine, np.float64)
    kernel.logits(seq, lay.pos[lex_slots].astype(np.int64), lex, cos, lay.owner, mask,
                  lay.wb, lay.wc, lay.base, lay.near_flat, len(lay.near), cal.context_bm25,
                  cal.context_cosine, cal.author_named, cal.min_cosine, neg, ev)
    at = np.empty(n, np.int64)
    near = at[:0]
    if cosine is not None and cal.nearest > 0:  # ``nearest`` over cosine[seq]
        near = at[:kernel.nearest(seq, cos, cal.nearest, cal.nearest_min_cosine, at)].copy()
    own = ev[near] != 0  # evidence of their own (a shared word, min_cosine)
    ev[near] = 1  # evidence (under the floor, still no candidate in a large namespace)
    # only the notes with evidence go on (the others are at 0): their exponential, then p
    m = kernel.compact(neg, ev, at)
    e, at = neg[:m], at[:m]
    with np.errstate(over="ignore"):
        np.exp(e, out=e)
    near_at = np.searchsorted(at, near)  # each nearest note's place among them
    near_p = 1.0 / (e[near_at] + 1.0)
    if not small:
        near_at = near_at[:0]
    pos = np.empty(m, np.int64)
    low = lowest_floor(cal)
    pos = pos[:kernel.finish(e, _EVERY, low, pos)]
    if tail and low < cal.floor:  # under the floor: only the tail's notes
        slots = seq[at[pos]]
        pos = pos[tail_kept(e[pos], cal, cols.tokens[slots],
                            None if allowed is None else allowed[slots])]
    if len(near_at):  # a small namespace: its nearest notes whatever the floor, by meaning
        assert cosine is not None  # near is empty without cosines
        e[near_at] = by_meaning(near_p, own, cosine[seq[near]])
        pos = np.union1d(pos, near_at)
        pos = pos[e[pos] > 0]
    p = e[pos]
    pos = at[pos]
    if allowed is not None:
        ok = allowed[seq[pos]]
        pos, p = pos[ok], p[ok]
    # the most probable among the notes above 0 are those among all of them (the rest are 0)
    keep = candidates(p, limit)
    return pos[keep], p[keep]


def candidates(p: FloatArray, limit: int) -> IntArray:
    """Positions of the ``limit`` largest ``p`` (every one tied with the last included)."""
    if len(p) <= limit:
        return np.arange(len(p))
    cut = np.partition(p, len(p) - limit)[len(p) - limit]
    at: IntArray = (p >= cut).nonzero()[0]
    return at


def lowest_floor(cal: Calibration) -> float:
    """The least probability a candidate may have: ``floor``, or ``tail_floor`` below it when
    the tail is on (``tail_notes``)."""
    return min(cal.floor, cal.tail_floor) if cal.tail_notes > 0 else cal.floor


def tail_kept(p: FloatArray, cal: Calibration, tokens: IntArray,
              ok: BoolArray | None = None) -> BoolArray:
    """Which of the probabilities ``p`` (each at ``lowest_floor`` or above, or 0) of notes of
    ``tokens`` stay: those at ``floor`` or above, and of the others above 0 and of at most
    ``tail_max_tokens`` the ``tail_notes`` highest (every one tied with the last included)
    among ``ok`` (None: all)."""
    keep: BoolArray = p >= cal.floor
    tail = (p > 0.0) & ~keep & (tokens <= cal.tail_max_tokens)
    if ok is not None:
        tail &= ok
    at = tail.nonzero()[0]
    if len(at) > cal.tail_notes:
        at = at[candidates(p[at], cal.tail_notes)] if cal.tail_notes > 0 else at[:0]
    keep[at] = True
    return keep


def limit_for(cfg: RankingConfig, budget: int | None) -> int:
    """How many candidates a query of ``budget`` tokens gets."""
    return max(cfg.max_candidates, 0 if budget is None else budget // TOKENS_PER_CANDIDATE)


def sub_layout(cols: Columns, seq: Lookup, win: IntArray, cal: Calibration) -> Layout:
    """``layout_of(cols, seq, cal)`` restricted to the positions ``win`` (ascending) of
    ``seq``, computed for them alone: each value as ``layout_of`` gives it (the same
    element-wise operations), two of them near only where they are consecutive in ``seq``
    too."""
    m = len(win)
    sub = seq[win]
    lt = log_tokens(cols, sub, cal)
    t_us = cols.created_us[sub]
    window = cal.context_minutes * US_PER_MINUTE
    k = min(cal.context_notes, len(seq) - 1)
    near: list[BoolArray] = []
    flat = np.zeros((max(k, 0), m), np.uint8)
    for j in range(1, k + 1):
        if m <= j:
            near.append(np.zeros(0, np.bool_))
            continue
        mj = (win[j:] == win[:-j] + j) & ((t_us[j:] - t_us[:-j]) <= window)
        near.append(mj)
        flat[j - 1, :m - j] = mj
    start = cal.intercept + prior(len(seq), cal)
    pos = np.full(len(cols), -1, np.int32)
    pos[sub] = np.arange(m, dtype=np.int32)
    base = (start + cal.log_tokens * lt) + cal.log_tokens_sq * (lt * lt)
    base += cal.long_note_log_tokens * long_note(cols, sub, cal)
    return Layout(base=base, wb=cal.bm25 + cal.bm25_x_log_tokens * lt,
                  wc=cal.cosine + cal.cosine_x_log_tokens * lt,
                  owner=cols.owner[sub].astype(np.int32), near=tuple(near), pos=pos,
                  near_flat=flat.reshape(-1))


def _distinct(a: IntArray) -> IntArray:
    """The distinct values of ``a``, ascending (a sort: numpy's hashing ``unique`` is slower
    on these arrays)."""
    a = np.sort(a)
    if len(a) > 1:
        a = a[np.concatenate(([True], a[1:] != a[:-1]))]
    return a


class Lookup(Protocol):
    """An int array read by positions only (``a[at]``, ``len(a)``): a numpy array, or
    ``index.AskerOrder`` that merges a shared order with an asker's own notes."""

    def __getitem__(self, at: IntArray, /) -> IntArray: ...

    def __len__(self) -> int: ...


def with_neighbours(cols: Columns, seq: Lookup, at: IntArray, cal: Calibration) -> IntArray:
    """The positions ``at`` of ``seq`` (the visible slots in creation order) and those of the
    neighbours their context reads (``calibration.context_notes`` on each side, written within
    ``context_minutes``; creation order is time order, so they are a run around each), distinct
    and ascending: the others lend nothing and are left out."""
    n = len(seq)
    window = cal.context_minutes * US_PER_MINUTE
    t_of = cols.created_us
    parts = [at]
    for j in range(1, min(cal.context_notes, n - 1) + 1):
        ahead = at[at < n - j]
        parts.append(ahead[(t_of[seq[ahead + j]] - t_of[seq[ahead]]) <= window] + j)
        back = at[at >= j] - j
        parts.append(back[(t_of[seq[back + j]] - t_of[seq[back]]) <= window])
    return _distinct(np.concatenate(parts))


def likely_among(cols: Columns, seq: Lookup, pos: Lookup, lex_slots: IntArray,
                 lex: FloatArray, dense_slots: IntArray,
                 cosine_of: Callable[[IntArray], FloatArray] | None, named: Sequence[int],
                 cal: Calibration, limit: int, allowed: BoolArray | None = None,
                 lexical: int | None = None) -> tuple[IntArray, FloatArray]:
    """``likely`` over given candidates only: the BM25 hits (``lexical``: only those of the
    ``max(lexical, limit)`` highest BM25 among the ``allowed``, ties included; every hit still
    lends its BM25 to its neighbours) and ``dense_slots`` (the dense
    stage's proposals), each valued with its near neighbours in creation order (``cosine_of``:
    the exact cosines of some slots; None: no semantic part). A candidate's probability has
    the same bits as ``likely`` gives it (its features read only itself and its neighbours,
    every value is computed as ``layout_of`` computes it, and the cosines are exact); the
    result is ``likely``'s whenever every note with evidence is a candidate. ``seq``: the
    visible slots in creation order, ``pos`` their position per slot (-1: not visible), both
    read at some positions only (``Lookup``); no per-note array of the whole sequence is
    built."""
    n = len(seq)
    seeds = lex_slots
    if lexical is not None and len(seeds) > max(lexical, limit):
        if allowed is not None:  # the cut is among the notes that may be candidates
            ok = allowed[seeds]
            seeds, top_lex = seeds[ok], lex[ok]
        else:
            top_lex = lex
        seeds = seeds[candidates(top_lex, max(lexical, limit))]
    at = np.concatenate((pos[seeds], pos[dense_slots])).astype(np.int64)
    at = _distinct(at[at >= 0])
    if not len(at):
        return np.zeros(0, np.int64), np.zeros(0, np.float64)
    win = with_neighbours(cols, seq, at, cal)
    sub = seq[win]
    cosine = None
    if cosine_of is not None:
        cosine = np.zeros(len(cols))
        cosine[sub] = cosine_of(sub)
    lay = sub_layout(cols, seq, win, cal)
    if len(seeds) < len(lex_slots):  # the hits outside the windows lend nothing
        inside = lay.pos[lex_slots] >= 0
        lex_slots, lex = lex_slots[inside], lex[inside]
    got, p = likely(cols, sub, lex_slots, lex, cosine, named, lay, cal, len(sub), visible=n,
                    tail=False)
    is_at = np.zeros(n, np.bool_)
    is_at[at] = True
    keep = is_at[win[got]]  # the neighbours only lent their values
    if allowed is not None:  # only these may be candidates (a filter, the expiry)
        keep &= allowed[seq[win[got]]]
    got, p = got[keep], p[keep]
    if lowest_floor(cal) < cal.floor:  # the tail among the candidates (the scan's: among all)
        trim = tail_kept(p, cal, cols.tokens[seq[win[got]]])
        got, p = got[trim], p[trim]
    top = candidates(p, limit)
    out: IntArray = win[got[top]]
    return out, p[top]


class Span(Protocol):
    """A time window in microseconds (``timewords.Span``)."""

    @property
    def start(self) -> int: ...

    @property
    def named_start(self) -> int: ...

    @property
    def named_end(self) -> int: ...

    @property
    def end(self) -> int: ...


def window_weights(t_us: IntArray, spans: Sequence[Span]) -> FloatArray:
    """How well each creation time ``t_us`` fits the question's windows: 1 within the days
    named, falling linearly to 0 at the window's edges (the tolerance: "two weeks ago" is
    likeliest the day 14 days back, less 12 or 16 days back), 0 outside; the largest over
    ``spans``."""
    f = np.zeros(len(t_us))
    t = t_us.astype(np.float64)
    for s in spans:
        up = np.clip((t - s.start) / max(s.named_start - s.start, 1), 0.0, 1.0)
        down = np.clip((s.end - t) / max(s.end - s.named_end, 1), 0.0, 1.0)
        inside = (t_us >= s.start) & (t_us < s.end)
        np.maximum(f, np.where(inside, np.minimum(up, down), 0.0), out=f)
    return f


def window_gain(fit: FloatArray, visible: int, cal: Calibration) -> FloatArray:
    """The logit each note of a question's window gains: ``time_window_weight`` times
    ``ln(visible * f / F)``, ``f`` its ``window_weights``, ``F`` their sum over the visible
    notes (Bayes' odds ratio when the answer's date is spread as ``f`` says), never below 0
    (a note at the edge of a wide window is not made less likely)."""
    total = float(fit.sum())
    out = np.zeros(len(fit))
    if total <= 0.0 or visible <= 0:
        return out
    pos = fit > 0
    out[pos] = np.maximum(cal.time_window_weight * np.log(visible * fit[pos] / total), 0.0)
    return out


def window_likely(cols: Columns, seq: Lookup, at: IntArray, lex_slots: IntArray,
                  lex: FloatArray, cosine_of: Callable[[IntArray], FloatArray] | None,
                  named: Sequence[int], cal: Calibration, gain: FloatArray,
                  allowed: BoolArray | None = None) -> tuple[IntArray, FloatArray]:
    """The candidates among the notes at positions ``at`` of ``seq`` (ascending, distinct:
    the notes of a question's time window, ``seq`` the visible slots in creation order) with
    ``gain`` (one per note of ``at``) added to their logit (``window_gain``): their slots,
    ascending by position, and
    probabilities. Each is valued with its near neighbours as ``likely`` values it (the
    numpy reference's operations; ``lex_slots``/``lex`` every BM25 hit, so a hit's share is
    of the same best), and is a candidate when it has evidence (a shared word, or a cosine
    of at least ``time_window_min_cosine``: none without cosines), is ``allowed`` (None:
    all) and is at ``floor`` or above."""
    if not len(at):
        return np.zeros(0, np.int64), np.zeros(0, np.float64)
    win = with_neighbours(cols, seq, at, cal)
    sub = seq[win]
    lay = sub_layout(cols, seq, win, cal)
    m = len(win)
    b = np.zeros(m)
    if len(lex):
        hit = lay.pos[lex_slots].astype(np.int64)
        ok = hit >= 0
        b[hit[ok]] = lex[ok] / lex.max()
    c = np.zeros(m) if cosine_of is None else np.asarray(cosine_of(sub), np.float64)
    sig = Signals(b, c, context(b, lay.near), context(c, lay.near),
                  authors_named(cols, named, lay.owner))
    inside = np.searchsorted(win, at)  # the window's notes among ``win``
    base = lay.base.copy()
    base[inside] += gain
    gained = Layout(base=base, wb=lay.wb, wc=lay.wc, owner=lay.owner,
                    near=lay.near, pos=lay.pos, near_flat=lay.near_flat)
    p = probability(sig, gained, cal)
    ev = np.zeros(m, np.bool_)
    near = c[inside] >= cal.time_window_min_cosine if cosine_of is not None else False
    ev[inside] = (b[inside] > 0) | near
    keep = ev & (p >= cal.floor) & (p > 0.0)
    if allowed is not None:
        keep &= allowed[sub]
    return sub[keep], p[keep]
