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
- **Relevance** (``shares``): the note's relevance times the passage's share of the note's
  match with the query: each passage's BM25 over the query's distinct terms, with the
  passages of that one note as the corpus (IDF and mean length), divided by the best
  passage's. The best passage keeps the note's relevance; a passage with none of the query's
  words scores 0 and is no candidate. When no passage has a query word (the note matched by
  meaning alone) every passage keeps the note's relevance and the packer takes the one it
  can afford first (the earliest, on a tie).
- **Place** (``Passage``): its index (from 0) among ``count`` passages and its ``start`` /
  ``end`` offsets in characters of the note's text; a result shows it beside the note's id
  and date, and ``used`` of that id counts for the note.
"""

from __future__ import annotations

import itertools
import math
import re

import msgspec
import numpy as np

from hivemind_memory.projections.ranking.analyzer import analyze
from hivemind_memory.projections.ranking.bm25_rules import idf, tokenize
from hivemind_memory.projections.ranking.columns import FloatArray

_WORD = re.compile(r"\S+\s*")


class Passage(msgspec.Struct, frozen=True):
    """Where a packed passage sits in its note: ``index`` (from 0) of ``count`` passages,
    ``start`` and ``end`` the character offsets of its text in the note's text."""

    index: int
    count: int
    start: int
    end: int


def split(text: str, tokens: int, size: int) -> list[tuple[int, int, int]]:
    """``(start, end, tokens)`` of each passage of a note of ``tokens`` tokens (one passage,
    the whole note, when ``tokens <= size``; ``size`` >= 1)."""
    n = math.ceil(tokens / size)
    if n <= 1 or not text:
        return [(0, len(text), tokens)]
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


def shares(texts: list[str], query: str, analyzer: str, k1: float, b: float) -> FloatArray:
    """Each passage's part of its note's match with ``query`` in [0, 1] (the module's rule:
    BM25 over the note's own passages, divided by the best; all 1 when none matches)."""
    terms = list(dict.fromkeys(analyze(tokenize(query), analyzer)))
    n = len(texts)
    if not terms or n == 0:
        return np.ones(n, np.float64)
    bags = [analyze(tokenize(t), analyzer) for t in texts]
    lens = np.array([len(x) for x in bags], np.float64)
    avg = float(lens.mean()) if n else 0.0
    tf = np.zeros((n, len(terms)), np.float64)
    col = {t: j for j, t in enumerate(terms)}
    for i, bag in enumerate(bags):
        for w in bag:
            j = col.get(w)
            if j is not None:
                tf[i, j] += 1.0
    df = (tf > 0).sum(axis=0)
    score = np.zeros(n, np.float64)
    norm = 1.0 - b + b * (lens / avg if avg > 0 else 1.0)
    for j in range(len(terms)):  # terms in the query's order: the same bits every run
        if df[j] == 0:
            continue
        weight = idf(n, int(df[j]))
        score += weight * tf[:, j] * (k1 + 1.0) / (tf[:, j] + k1 * norm)
    best = float(score.max())
    if best <= 0.0:
        return np.ones(n, np.float64)
    out: FloatArray = score / best
    return out
