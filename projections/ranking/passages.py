"""Long notes as passages (``RankingConfig.passage_tokens``): a note longer than the passage
size is a candidate as its passages, each packed on its own, so the part of a 4,000-token
runbook that answers the question fits a 500-token budget. Pure: the texts, the query and
the config come in; nothing is stored (a passage is the note's text between two offsets, so
erasing the note erases its passages, and a replay makes the same ones).

- **Split** (``split``): a note of ``T`` tokens is cut into ``ceil(T / passage_tokens)``
  passages of about equal size, at the whitespace before each equal share of its UTF-8
  bytes (a word is never cut; a single word longer than a share stays whole). A passage's
  tokens are the note's, in proportion to its bytes, rounded up: with the default estimate
  (``ceil(bytes / 4)``) that is at least the passage's own estimate, so a rendered context
  still fits its budget.
- **Relevance** (``own_bm25``, ``passage_relevance``): the note's probability of being
  needed, shared among its passages in proportion to each one's own BM25 with the query,
  scored as a note of its own length on the notes' scale (the corpus's IDFs and mean
  length, ``Columns.bm25_weights``). The passages of a note are together exactly as likely
  as the note: cutting a long note up makes it no likelier, so its passages do not crowd
  out short notes (keeping the whole note's probability for the best passage did: on
  LongMemEval's dev set that lost turn recall at every budget), while the passage that
  holds the match carries most of it and fits a budget the note does not. A passage with
  none of the query's words is no candidate; when no passage has one (the note matched by
  meaning alone) each gets an equal share.
- **Place** (``Passage``): its index (from 0) among ``count`` passages and its ``start`` /
  ``end`` offsets in characters of the note's text; a result shows it beside the note's id
  and date, and ``used`` of that id counts for the note.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from hivemind_memory.projections.ranking.analyzer import analyze
from hivemind_memory.projections.ranking.bm25_rules import tokenize
from hivemind_memory.projections.ranking.columns import FloatArray, QueryWeights

_WORD = re.compile(r"\S+\s*")
_WORD_START = re.compile(r"(?<=\s)\S")
_FIRST = re.compile(r"\S")


def split(text: str, tokens: int, size: int) -> list[tuple[int, int, int]]:
    """``(start, end, tokens)`` of each passage of a note of ``tokens`` tokens (one passage,
    the whole note, when ``tokens <= size``; ``size`` >= 1)."""
    n = math.ceil(tokens / size)
    if n <= 1 or not text:
        return [(0, len(text), tokens)]
    if text.isascii():
        return _split_ascii(text, tokens, n)
    return _split_words(text, tokens, n)


def _split_ascii(text: str, tokens: int, n: int) -> list[tuple[int, int, int]]:
    """``_split_words`` for an ASCII text, where a character is a byte: the same cuts, found
    by searching for the first word start at or after each equal share's offset instead of
    walking every word (a 2,000-word note: one search a passage, not 2,000 matches)."""
    first = _FIRST.search(text)
    if first is None:
        return [(0, len(text), tokens)]
    lead = first.start()
    total = len(text) - lead  # every word's bytes with its trailing whitespace
    words = len(text.split())
    if words < 2:
        return [(0, len(text), tokens)]
    n = min(n, words)
    starts = [lead]  # the first word of each passage (the first passage starts at 0)
    for k in range(1, n):
        # the first word after the last cut whose bytes before it reach k shares of the total
        at = max(lead + -(-k * total // n), starts[-1] + 1)
        m = _WORD_START.search(text, at)
        if m is None:
            break
        starts.append(m.start())
    ends = [*starts[1:], len(text)]
    return [(0 if k == 0 else a, z, max(1, -(-tokens * (z - a) // total)))
            for k, (a, z) in enumerate(zip(starts, ends, strict=True))]


def _split_words(text: str, tokens: int, n: int) -> list[tuple[int, int, int]]:
    """``split``'s cuts on any text, walking its words and their UTF-8 bytes."""
    words = [(m.start(), m.end(), len(m.group().encode("utf-8"))) for m in _WORD.finditer(text)]
    total = sum(b for _, _, b in words)
    if total == 0 or len(words) < 2:
        return [(0, len(text), tokens)]
    n = min(n, len(words))
    cuts: list[int] = []  # index of the first word of each passage after the first
    acc = 0
    k = 1
    for i, (_, _, b) in enumerate(words):
        if k < n and i > 0 and acc * n >= k * total and (not cuts or cuts[-1] < i):
            cuts.append(i)
            k += 1
        acc += b
    bounds = [0, *cuts, len(words)]
    out: list[tuple[int, int, int]] = []
    for a, z in itertools.pairwise(bounds):
        start = 0 if a == 0 else words[a][0]
        end = len(text) if z == len(words) else words[z][0]
        b = sum(w[2] for w in words[a:z])
        out.append((start, end, max(1, -(-tokens * b // total))))
    return out


Bag = tuple[dict[str, int], int]
"""A text's analysed words (``analyze(tokenize(text), analyzer)``) as counts, and how many."""


def bag_of(text: str, analyzer: str) -> Bag:
    """``text``'s analysed words counted (what ``own_bm25`` reads of a passage)."""
    words = analyze(tokenize(text), analyzer)
    counts: dict[str, int] = {}
    for w in words:
        counts[w] = counts.get(w, 0) + 1
    return counts, len(words)


def own_bm25(texts: list[str], weights: QueryWeights, analyzer: str) -> FloatArray:
    """Each text's BM25 with the query on the notes' scale (``Columns.bm25``'s values: the
    corpus's IDFs and length normalisation from ``weights``, divided by the sum of the
    IDFs), as if it were a note of its own length."""
    return bags_bm25([bag_of(t, analyzer) for t in texts], weights)


def bags_bm25(bags: list[Bag], weights: QueryWeights) -> FloatArray:
    """``own_bm25`` of texts already counted (``bag_of``): a batch's queries count a long
    candidate's passages once (``BatchMemo.passages``), not once per query."""
    out = np.zeros(len(bags), np.float64)
    if not weights.words or weights.total <= 0.0:
        return out
    for i, (counts, length) in enumerate(bags):
        norm = weights.base + weights.slope * length
        acc = 0.0
        for j, w in enumerate(weights.words):  # in the query's order: the same bits every run
            t = counts.get(w, 0)
            if t:
                acc += weights.idf[j] * (t / (t + norm))
        out[i] = acc / weights.total
    return out


def passage_relevance(note: float, own: FloatArray) -> FloatArray:
    """Each passage's probability of being needed: its note's (``note``) shared among its
    passages in proportion to each one's own BM25 (``own``, ``own_bm25``), so the passages
    of a note are together exactly as likely as the note (a long note is no likelier cut
    up), and the passage holding the match carries it. A passage without a query word is at
    0, unless none has one (a note found by meaning alone): then each gets an equal share."""
    total = float(own.sum())
    if total <= 0.0:
        return np.full(len(own), note / len(own) if len(own) else 0.0, np.float64)
    out: FloatArray = own * (note / total)
    return out


Counted = npt.NDArray[np.int32]
"""A long note's passages and their analysed words (``counted``), in one int32 array (a
dictionary of tuples per note held ~16 KB as counted for a 150-word note of four passages,
this ~2 KB): ``[n, start_1, end_1, tokens_1, ..., start_n, end_n, tokens_n, length_1, ...,
length_n, ids..., passages..., counts...]``: the passages' places (``split``), their numbers
of analysed words, then one run per (word, passage) holding it: the word's id (of the
caller's vocabulary), the passage's index and the word's count there, the runs ascending by
id, then by passage."""


def counted(text: str, parts: list[tuple[int, int, int]], analyzer: str,
            ids: Callable[[list[str]], list[int]]) -> Counted:
    """The passages ``parts`` (``split``) of ``text`` and their analysed words as ``Counted``
    (what ``relevance_of`` reads): the counts of ``bag_of`` of each passage, by word id
    (``ids``: the id of each of a list of words, the same word always the same id)."""
    n = len(parts)
    lengths: list[int] = []
    words: list[str] = []
    where: list[int] = []
    counts: list[int] = []
    for i, (a, z, _) in enumerate(parts):
        got = analyze(tokenize(text[a:z]), analyzer)
        lengths.append(len(got))
        bag = Counter(got)
        words += bag.keys()
        counts += bag.values()
        where += itertools.repeat(i, len(bag))
    word_ids = np.array(ids(words), np.int32)
    order = np.argsort(word_ids, kind="stable")  # by id, then by passage
    head = np.array([n, *itertools.chain.from_iterable(parts), *lengths], np.int32)
    return np.concatenate((head, word_ids[order], np.array(where, np.int32)[order],
                           np.array(counts, np.int32)[order]))


def places(by_word: Counted) -> list[tuple[int, int, int]]:
    """The passages' ``(start, end, tokens)`` of ``by_word`` (``split``'s)."""
    n = int(by_word[0])
    flat = by_word[1:1 + 3 * n].tolist()
    return list(zip(flat[0::3], flat[1::3], flat[2::3], strict=True))


SUMMED_IN_ORDER = 8
"""numpy adds fewer than this many float64 one after the other, from the first (its pairwise
summation's plain block); from this many on, in a tree. ``relevance_of`` adds its shares
itself below it, with numpy from it: the same bits either way (a test checks both sides)."""


def relevance_of(note: float, by_word: Counted, weights: QueryWeights,
                 word_ids: list[int | None]) -> list[float]:
    """``passage_relevance(note, bags_bm25(bags, weights))`` of the passages ``by_word``
    holds (``counted``), the same bits (``relevances`` of one note)."""
    return relevances([note], [by_word], weights, word_ids)[0]


def relevances(notes: list[float], cut: list[Counted], weights: QueryWeights,
               word_ids: list[int | None]) -> list[list[float]]:
    """``relevance_of`` of each note of relevance ``notes[i]`` and passages ``cut[i]``, with
    the query's words read once for them all: ``word_ids`` holds the id of each of
    ``weights.words`` in the ids ``counted`` was given (None: a word no note has). Each
    passage's terms are added in the query's order, one word at a time over every passage
    (the same IEEE operations on each passage as a loop over its words); the shares are
    summed as ``passage_relevance`` sums them (in order below ``SUMMED_IN_ORDER`` passages,
    numpy's sum from it)."""
    c = len(cut)
    if not c:
        return []
    sizes = np.fromiter(map(len, cut), np.int64, c)
    big = np.concatenate(cut).astype(np.int64)
    off = np.cumsum(sizes) - sizes
    n = big[off]
    first = np.cumsum(n) - n  # each note's first passage among all of them
    acc = np.zeros(int(n.sum()), np.float64)
    if weights.words and weights.total > 0.0 and any(q is not None for q in word_ids):
        owner = np.repeat(np.arange(c), n)
        lengths = big[off[owner] + 1 + 3 * n[owner] + (np.arange(len(acc)) - first[owner])]
        length = lengths.astype(np.float64)
        r = (sizes - 1 - 4 * n) // 3
        run_owner = np.repeat(np.arange(c), r)
        at = off[run_owner] + 1 + 4 * n[run_owner] + (np.arange(int(r.sum()))
                                                       - (np.cumsum(r) - r)[run_owner])
        ids = big[at]
        base, slope = weights.base, weights.slope
        for f, q in zip(weights.idf, word_ids, strict=True):
            if q is None:
                continue
            hit = np.flatnonzero(ids == q)
            if not len(hit):
                continue
            h, k = at[hit], r[run_owner[hit]]
            p = first[run_owner[hit]] + big[h + k]  # a note holds a word once a passage
            t = big[h + 2 * k].astype(np.float64)
            acc[p] += f * (t / (t + (base + slope * length[p])))
        acc /= weights.total
    out: list[list[float]] = []
    every = acc.tolist()
    for note, a, m in zip(notes, first.tolist(), n.tolist(), strict=True):
        shares = every[a:a + m]
        if m < SUMMED_IN_ORDER:
            total = 0.0
            for x in shares:
                total += x
        else:
            total = float(np.add.reduce(np.array(shares, np.float64)))
        if total <= 0.0:
            out.append([note / m] * m if m else [])
            continue
        share = note / total
        out.append([x * share for x in shares])
    return out
