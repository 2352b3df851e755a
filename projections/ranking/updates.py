"""Updated facts and near-identical notes among a query's candidates. Pure: the candidates'
signals, vectors and the config are arguments.

* **Near-identical notes** (``RankingConfig.near_identical``): two candidates whose texts'
  word sets (``relevance.tokenize``: stop words kept, so "not" counts) overlap at least that
  much (Jaccard) are one. Only the highest scored of a group stays a candidate (ties: the
  newer, then the smaller note id) and it names the others (``stands_for``): three copies of
  one note never fill a budget together. Pairs are first narrowed by their vectors (cosine
  at least ``PREFILTER_COSINE``) where the notes have them, so only those texts are read.
* **Updated facts** (``RankingConfig.updates``): two candidates about the same subject (the
  cosine of their notes' vectors at least ``same_subject_cosine``) written at least
  ``min_gap_days`` apart are an older and a newer version. The newer wins unless the older
  is a better match by a clear margin (relevance above ``margin`` times the newer's): the
  newer's score becomes at least the older's, and the older's is multiplied by
  ``older_weight``. A longterm note (earned permanence) is never the older; a note with no
  newer version on its subject keeps its score however old it is. The subject is also the
  same when the newer holds the query words the older holds (those carrying at least
  ``restated_share`` of their IDF weight; 1: every one) and the older's carry
  ``query_words_share`` of the query's weight (``QueryWords``); then ``margin`` does not
  apply, the newer is lifted to that share of the older's score, and a note longer than
  ``newer_max_tokens`` is never the newer (``_restated``).

Both compare at most ``updates.max_notes`` candidates (the highest scored), so the work per
query is bounded whatever the budget. Vectors are the index's quantized integers
(``projections.ranking.vectors``): every dot product is exact, so the same notes give the
same decisions on any machine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from hivemind_memory.projections.ranking.bm25_rules import tokenize
from hivemind_memory.projections.ranking.config import RankingConfig, Updates

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
Vectors = npt.NDArray[np.floating[Any]]
"""Integer-valued vectors, float32 or float64 (``vectors.DerivedVectors.rows``)."""



class NativeShared(Protocol):
    """What this module calls of the C kernel (checked against ``_pairs.pyi``)."""

    def shared(self, ids: npt.NDArray[np.int32], off: IntArray, ii: IntArray, jj: IntArray,
               out: IntArray) -> None: ...


_built: NativeShared | None
try:
    from hivemind_memory.projections.ranking import _pairs as _built
except ImportError:  # pragma: no cover - an install without a C compiler
    _built = None

native: NativeShared | None = _built
"""The pairs' shared word counts in C (``projections/ranking/_pairs.c``), when it was built;
otherwise (or set to None) the set intersections of ``_shared`` (the reference: the tests
run both and require the same counts)."""

PREFILTER_COSINE = 0.8
"""Near-identical texts have near-identical vectors: only pairs at least this close are
read and compared word by word (a bound on work, not a rule: the words decide)."""
US_PER_DAY = 86_400_000_000
WordSet = frozenset[str] | npt.NDArray[np.int32]
"""A note's words: the set of them, or their ids sorted (``ranker.KeptTexts.words``)."""
_NONE: WordSet = frozenset()


@dataclass
class Adjusted:
    """What the rules made of a query's candidates (positions in its candidate arrays)."""

    score: FloatArray
    keep: BoolArray
    """False: stood for by a near-identical note (no longer a candidate)."""
    stands_for: dict[int, list[int]] = field(default_factory=dict)
    """A kept position -> the near-identical positions it stands for."""
    updates: dict[int, list[int]] = field(default_factory=dict)
    """A newer version's position -> the older versions' positions it updates."""


def _cosines(vec: Vectors, norm: FloatArray) -> FloatArray:
    """Pairwise cosines of integer-valued vectors (0 where either has none). ``vec`` may be
    float32 (``DerivedVectors.rows``) when its products are exact in it: every dot product
    is then the same integer as in float64, at half the cost of the product."""
    dots = (vec @ vec.T).astype(np.float64)
    denom = np.outer(norm, norm)
    out: FloatArray = np.divide(dots, denom, out=np.zeros_like(dots), where=denom > 0)
    return out


def _top(score: FloatArray, keep: BoolArray, limit: int) -> IntArray:
    """Positions of the ``limit`` highest scores among ``keep`` (ties by position)."""
    at = keep.nonzero()[0]
    if len(at) <= limit:
        return at
    o = np.lexsort((at, -score[at]))[:limit]
    top: IntArray = np.sort(at[o])
    return top


def adjust(ids: Sequence[str], score: FloatArray, rel: FloatArray, created_us: IntArray,
           longterm: BoolArray, vec: Vectors | None, norm: FloatArray | None,
           text_of: Callable[[int], str], cfg: RankingConfig,
           sizes: npt.NDArray[np.integer[Any]] | None = None,
           words_of: Callable[[int], WordSet] | None = None,
           words: QueryWords | None = None) -> Adjusted:
    """Apply both rules to candidates ``ids`` (parallel arrays: ``score``, ``rel``,
    ``created_us``, ``longterm``; ``vec``/``norm``: their quantized vectors, None when the
    index has none; ``text_of(position)``: a candidate's text; ``sizes`` (optional): each
    candidate's count of distinct words, ``len(set(tokenize(text)))``, known to the index:
    a pair whose sizes cannot reach the threshold is then left out before any text is
    read); ``words_of(position)`` (optional): its words, ``frozenset(tokenize(text))`` or
    their ids sorted, from a cache (``ranker.BatchMemo.words``); ``words``: which of the
    query's words each holds, None when not known."""
    m = len(ids)
    out = Adjusted(score=score.copy(), keep=np.ones(m, np.bool_))
    if m < 2:
        return out
    lim = cfg.updates.max_notes
    first: tuple[IntArray, FloatArray] | None = None
    if cfg.near_identical > 0:
        at = _top(score, out.keep, lim)
        if vec is not None and norm is not None:
            first = (at, _cosines(vec[at], norm[at]))
        _near_identical(ids, score, created_us, None if first is None else first[1], text_of,
                        cfg.near_identical, at, out, sizes, words_of)
    up = cfg.updates
    by_vec = vec is not None and norm is not None
    by_words = words is not None and up.query_words_share > 0
    if up.margin > 0 and (by_vec or by_words):
        at = _top(score, out.keep, lim)
        if len(at) >= 2:
            cos = (_pair_cosines(vec, norm, at, first)
                   if vec is not None and norm is not None else None)
            same = None if words is None or not by_words else _restated(words, at, created_us, up)
            _newer_wins(at, score, rel, created_us, longterm, cos, same, cfg, out)
    return out


@dataclass(frozen=True)
class QueryWords:
    """Which of a query's words each candidate holds: ``held[k, w]`` (candidate ``k``, word
    ``w``), and each word's IDF over the notes the asker may see (``weight[w]``);
    ``spread[k]`` (None: none): candidate ``k`` is a long note (longer than
    ``updates.newer_max_tokens``, or ``RankingConfig.passage_tokens`` where that is 0), whose
    words need not be one statement."""

    held: BoolArray
    weight: FloatArray
    spread: BoolArray | None = None


def _restated(words: QueryWords, at: IntArray, created_us: IntArray,
              up: Updates) -> FloatArray | None:
    """``credit[i, j]``: the share of the older ``at[i]``'s match on the query that the newer
    ``at[j]`` restates (the IDF weight of the query words both hold over that of the words
    ``at[i]`` holds; exactly 1 when ``at[j]`` holds every one), 0 where it is under
    ``up.restated_share`` or ``at[i]``'s words carry less than ``up.query_words_share`` of
    the query's IDF weight. A newer holding every word is a version whatever the others
    hold; of those holding only part (``restated_share`` < 1), an older has one version:
    the one written after it (``min_gap_days``) restating the most of it (ties: the
    newest, then the first candidate), since a
    subject whose words recur in many later notes is a recurring topic, not one changed
    fact, and lifting each of them would crowd the budget. A long note (``words.spread``)
    is never the newer ``at[j]``: its words may lie in passages hundreds of tokens apart,
    so holding the older's words says nothing about restating its fact (a 900-token reply
    on family travel "holds" every word of "my recent family trip to Hawaii"), and the lift
    would go to its passages. It can still be the older. None (every ``credit`` 0) when no
    candidate's words carry ``up.query_words_share`` of the query's weight, as in most
    queries whose candidates each hold a few of its words: the matrices are not built."""
    held = words.held[at]
    total = float(words.weight.sum())
    m = len(at)
    if total <= 0 or not held.shape[1]:
        return None
    own = held @ words.weight
    weak = own / total < up.query_words_share
    if weak.all():  # no candidate can be an older version by its words
        return None
    h = held.astype(np.float64)
    both = (h * words.weight) @ h.T  # [i, j]: the weight of the words i and j both hold
    credit: FloatArray = np.divide(both, own[:, None], out=np.zeros((m, m)),
                                   where=own[:, None] > 0)
    every = _holds_every(held)
    credit[every & (own[:, None] > 0)] = 1.0  # every word: exactly the older's score
    credit[credit < up.restated_share] = 0.0
    credit[weak, :] = 0.0
    if words.spread is not None:
        credit[:, words.spread[at]] = 0.0
    t = created_us[at]
    # the one partial version is chosen among the notes written after the older (by
    # ``min_gap_days``, as ``_newer_wins`` requires): a note before it restating more of it
    # is no version of it and must not hide the later one that is
    later = (t[None, :] - t[:, None]) >= up.min_gap_days * US_PER_DAY
    loose = (credit > 0) & (credit < 1) & later
    for i in np.flatnonzero(loose.sum(axis=1) > 1).tolist():
        js = np.flatnonzero(loose[i])
        best = js[np.lexsort((-js, t[js], credit[i, js]))[-1]]
        credit[i, js[js != best]] = 0.0
    return credit


def _holds_every(held: BoolArray) -> BoolArray:
    """``every[i, j]``: row ``j`` of ``held`` holds every word row ``i`` holds. Up to 63
    words each row's words are the bits of one integer (a rows x rows comparison); past
    that, word by word (a rows x rows x words array)."""
    if held.shape[1] <= 63:
        bits = held.astype(np.int64) @ (np.int64(1) << np.arange(held.shape[1], dtype=np.int64))
        every: BoolArray = (bits[:, None] & ~bits[None, :]) == 0
        return every
    got: BoolArray = np.logical_not((held[:, None, :] & ~held[None, :, :]).any(axis=2))
    return got


def _pair_cosines(vec: Vectors, norm: FloatArray, at: IntArray,
                  known: tuple[IntArray, FloatArray] | None) -> FloatArray:
    """``_cosines`` of the positions ``at`` (ascending), taken from ``known`` (positions and
    their matrix, computed before) when it holds every one of them: each entry is computed
    on its own (exact integer products), so a part of the matrix has the same bits."""
    if known is not None:
        had, cos = known
        if len(had) == len(at) and bool((had == at).all()):  # no note dropped since
            return cos
        got = np.searchsorted(had, at)
        if len(had) and bool((got < len(had)).all()) and bool((had[np.minimum(
                got, len(had) - 1)] == at).all()):
            return cos[np.ix_(got, got)]
    return _cosines(vec[at], norm[at])


def _near_identical(ids: Sequence[str], score: FloatArray, created_us: IntArray,
                    cos: FloatArray | None, text_of: Callable[[int], str], threshold: float,
                    at: IntArray, out: Adjusted,
                    sizes: npt.NDArray[np.integer[Any]] | None = None,
                    words_of: Callable[[int], WordSet] | None = None) -> None:
    if cos is not None:  # the pairs above the diagonal, row by row
        ii, jj = (cos >= PREFILTER_COSINE).nonzero()
        upper = ii < jj
        ii, jj = ii[upper], jj[upper]
    else:
        ii, jj = np.triu_indices(len(at), 1)
    if not len(ii):
        return
    # each text read and split once; a pair whose sizes differ too much cannot reach the
    # threshold (|a & b| / |a | b| <= min / max), so only the others are intersected (with
    # ``sizes`` known, the others' texts are not even read)
    if sizes is not None:
        ii, jj = _sizes_fit(sizes[at], ii, jj, threshold)
        if not len(ii):
            return
    words: list[WordSet] = [_NONE] * len(at)
    notes = np.union1d(ii, jj)
    for k in notes.tolist():  # only the notes of a close pair are read
        words[k] = frozenset(tokenize(text_of(int(at[k])))) if words_of is None \
            else words_of(int(at[k]))
    size = np.fromiter(map(len, words), np.int64, len(words))
    if sizes is None:  # with them known, these pairs already fit (the same sizes)
        ii, jj = _sizes_fit(size, ii, jj, threshold)
        if not len(ii):
            return
    # every remaining pair's Jaccard at once (int64 / int64 is the same correctly rounded
    # quotient as Python's int / int), then the groups: the connected components of the
    # pairs that reach the threshold
    both = _shared(words, size, ii, jj, notes)
    same = both / (size[ii] + size[jj] - both) >= threshold
    if not same.any():
        return
    ii, jj = ii[same], jj[same]
    parent = list(range(len(at)))

    def root(p: int) -> int:
        while parent[p] != p:
            parent[p] = parent[parent[p]]
            p = parent[p]
        return p

    for a, b in zip(ii.tolist(), jj.tolist(), strict=True):
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    groups: dict[int, list[int]] = {}  # only a note of a pair can be in a group of two
    for k in np.union1d(ii, jj).tolist():
        groups.setdefault(root(k), []).append(int(at[k]))
    for members in groups.values():
        if len(members) < 2:
            continue
        best = min(members, key=lambda p: (-score[p], -created_us[p], ids[p]))
        rest = sorted((p for p in members if p != best), key=lambda p: ids[p])
        out.keep[rest] = False
        out.stands_for[best] = rest


def _shared(words: list[WordSet], size: npt.NDArray[np.int64], ii: IntArray,
            jj: IntArray, notes: IntArray | None = None) -> npt.NDArray[np.int64]:
    """How many words the notes of each pair ``(ii[k], jj[k])`` share: in C (``native``)
    where the words are ascending ids (``ranker.KeptTexts.words``), one merge a pair;
    otherwise set by set (``&`` walks the smaller set), the reference. ``notes``: the
    positions whose words are read, ascending, every one of a pair among them (default:
    those of the pairs)."""
    if notes is None:
        notes = np.union1d(ii, jj)
    kernel = native
    if kernel is not None and not isinstance(words[int(ii[0])], frozenset):
        off = np.zeros(len(notes) + 1, np.int64)
        np.cumsum(size[notes], out=off[1:])
        got = np.empty(len(ii), np.int64)
        kernel.shared(np.concatenate([words[k] for k in notes.tolist()], dtype=np.int32), off,
                      np.searchsorted(notes, ii), np.searchsorted(notes, jj), got)
        return got
    sets: list[Any] = list(words)
    for k in notes.tolist():
        w = words[k]
        if not isinstance(w, frozenset):
            sets[k] = set(w.tolist())
    pairs = zip(ii.tolist(), jj.tolist(), strict=True)
    return np.fromiter((len(sets[a] & sets[b]) for a, b in pairs), np.int64, len(ii))


def _sizes_fit(size: npt.NDArray[np.integer[Any]], ii: IntArray, jj: IntArray,
               threshold: float) -> tuple[IntArray, IntArray]:
    """The pairs ``(ii, jj)`` whose word-set sizes can reach Jaccard ``threshold``."""
    a, b = size[ii], size[jj]
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    fit = (lo > 0) & (lo / np.maximum(hi, 1) >= threshold)
    return ii[fit], jj[fit]


def _newer_wins(at: IntArray, score: FloatArray, rel: FloatArray, created_us: IntArray,
                longterm: BoolArray, cos: FloatArray | None, same: FloatArray | None,
                cfg: RankingConfig, out: Adjusted) -> None:
    """``same[i, j]`` (``_restated``): the share of the older ``at[i]``'s score the newer
    ``at[j]`` is lifted to by the query's words (0: no version by them); a pair by the
    vectors takes the whole score. No pair by either (``same`` None, no two vectors that
    close): nothing changes, and the matrices of times and credits are not built."""
    up = cfg.updates
    if same is None:
        if cos is None:
            return
        close = cos >= up.same_subject_cosine
        np.fill_diagonal(close, False)  # a note and itself are never a pair (below)
        if not close.any():
            return
    t = created_us[at]
    r = rel[at]
    s = score[at]
    # older[i, j]: at[i] is an older version of at[j]'s subject that the newer beats
    older = (t[None, :] - t[:, None]) >= up.min_gap_days * US_PER_DAY
    np.fill_diagonal(older, False)  # a note is no version of itself (min_gap_days = 0)
    older &= ~longterm[at][:, None]
    credit = np.zeros(older.shape, np.float64)
    if cos is not None:  # close in meaning, and the older no clearly better match
        credit[(cos >= up.same_subject_cosine) & (r[:, None] <= up.margin * r[None, :])] = 1.0
    if same is not None:  # the newer restates the older's match on the query's words
        credit = np.maximum(credit, same)
    older &= credit > 0
    if not older.any():
        return
    lifted = np.max(np.where(older, credit * s[:, None], 0.0), axis=0)
    new = out.score
    new[at] = np.maximum(s, lifted)
    stale = older.any(axis=1)
    new[at[stale]] = new[at[stale]] * up.older_weight
    newer: BoolArray = np.asarray(older.any(axis=0), np.bool_)
    for j in np.flatnonzero(newer).tolist():
        out.updates[int(at[j])] = sorted(at[older[:, j]].tolist())
