"""Why a query got what it got: the notes a ranking left out, each with its signals and the
reason, compact enough to keep in every audit entry. Pure: arrays in, structs out.

A ranking records the ``limit`` strongest left-out notes (by score, then note id) among those
it scored: candidates the packer did not choose (``over_budget``: the note alone costs more
than the budget; ``packed_out``: it fits alone, but the chosen set is worth more than any set
with it) and notes whose relevance is above 0 but below ``min_relevance``
(``below_min_relevance``; only the ``limit`` most relevant of them get a recency, so the cost
stays bounded when ``min_relevance`` prunes many). ``counts`` has every left-out note per
reason, not only the recorded ones. Notes the agent may not see (another agent's private
notes, forgotten notes) are not scored by the ranking at all: ``worker.audit.explain`` re-derives
them from the log when asked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import numpy as np

from hivemind_memory.projections.ranking.columns import FloatArray, IntArray
from hivemind_memory.projections.ranking.rank_result import LeftOut, Shown, Why

Reason = Literal["packed_out", "over_budget", "below_min_relevance", "private", "forgotten",
                 "superseded", "erased"]
"""Why a note that matched the query is not in the context (``erased``: it was shown, and
its content was erased since)."""
RECORDED_REASONS: tuple[Reason, ...] = ("packed_out", "over_budget", "below_min_relevance")
"""The reasons a ranking records; ``private``, ``forgotten``, ``superseded`` and ``erased``
are re-derived from the log."""
REASON_TEXT: dict[str, str] = {
    "packed_out": "fits the budget alone, but the chosen set is worth more than any set with it",
    "over_budget": "costs more than the whole budget",
    "below_min_relevance": "relevance below min_relevance",
    "private": "another agent's private note",
    "forgotten": "forgotten before the query",
    "superseded": "superseded by another note before the query",
    "erased": "shown, and its content erased since",
}
"""One line per reason, for people."""
DECIMALS = 6
"""Floats are rounded as in results (``signals.DECIMALS``)."""


_SCALE = 10.0**DECIMALS


def rounded(x: FloatArray) -> list[float]:
    """``[round(v, DECIMALS) for v in x]``, vectorised: ``rint(v * 10**DECIMALS) / 10**DECIMALS``
    is that (the division of two exact integers-as-floats rounds once, to the double nearest
    the decimal, as ``round`` does) unless ``v * 10**DECIMALS`` was rounded across a half;
    it is off by at most half an ulp, so only products that close to a half go through
    ``round`` itself."""
    y = x * _SCALE
    out: list[float] = (np.rint(y) / _SCALE).tolist()
    near = (np.abs(y - np.floor(y) - 0.5) <= 1e-12 * np.maximum(np.abs(y), 1.0)).nonzero()[0]
    for i in near.tolist():
        out[i] = round(float(x[i]), DECIMALS)
    return out


def _top(score: FloatArray, ids_of: Callable[[IntArray], list[str]], limit: int) -> list[int]:
    """Positions of the ``limit`` highest ``score`` values (ties by note id, ``ids_of(at)``:
    read only for the positions that make the cut), best first."""
    n = len(score)
    if n == 0 or limit <= 0:
        return []
    pos = np.arange(n)
    if n > limit:  # keep everything tied with the limit-th value, then sort exactly
        cut = np.partition(score, n - limit)[n - limit]
        pos = (score >= cut).nonzero()[0]
    got = sorted(zip((-score[pos]).tolist(), ids_of(pos), pos.tolist(), strict=True))
    return [i for _, _, i in got[:limit]]


def left_out(ids: list[str], cand: IntArray, rel: FloatArray, rec: FloatArray,
             score: FloatArray, cost: IntArray, chosen: IntArray, budget: int,
             below: IntArray, below_rel: FloatArray,
             signals_of: Callable[[IntArray], tuple[FloatArray, IntArray]],
             limit: int) -> Why:
    """The left-out part of a ranking's ``Why``.

    ``cand`` are the candidates' slots with their ``rel``, ``rec``, ``score`` and ``cost``
    (parallel arrays), ``chosen`` the positions in them the packer chose; ``below`` the slots
    (and ``below_rel`` their relevance) that matched but fell under ``min_relevance``;
    ``signals_of`` gives the recency and cost of slots (called for at most ``limit`` of
    ``below``);
    ``ids`` names every slot."""
    out = np.ones(len(cand), np.bool_)
    out[chosen] = False
    at = out.nonzero()[0]
    over = cost[at] > budget
    counts = {"packed_out": int((~over).sum()), "over_budget": int(over.sum()),
              "below_min_relevance": len(below)}
    rows: list[LeftOut] = []
    r = np.round(score[at], DECIMALS)
    out_slots = cand[at]
    picked = np.array(_top(r, lambda k: [ids[i] for i in out_slots[k].tolist()], limit),
                      np.int64)
    js = at[picked]
    two = rounded(np.concatenate((rel[js], rec[js])))  # one pass, then split
    for s, o, rl, rc, sc, c in zip(out_slots[picked].tolist(), over[picked].tolist(),
                                   two[:len(js)], two[len(js):], r[picked].tolist(),
                                   cost[js].tolist(), strict=True):
        rows.append(LeftOut(ids[s], "over_budget" if o else "packed_out", rl, rc, sc, c))
    if len(below) and limit > 0:
        top = _top(np.round(below_rel, DECIMALS), lambda k: [ids[i] for i in below[k].tolist()],
                   limit)
        slots = below[np.array(top, np.int64)]
        b_rec, b_cost = signals_of(slots)
        b_rel = below_rel[np.array(top, np.int64)]
        b_score = b_rel * b_rec
        for k, i in enumerate(top):
            rows.append(LeftOut(ids[int(below[i])], "below_min_relevance",
                                round(float(b_rel[k]), DECIMALS),
                                round(float(b_rec[k]), DECIMALS),
                                round(float(b_score[k]), DECIMALS), int(b_cost[k])))
    return Why(limit=limit, left_out=strongest(rows, limit),
               counts={k: v for k, v in counts.items() if v})


def strongest(rows: list[LeftOut], limit: int) -> list[LeftOut]:
    """The ``limit`` strongest rows: score, then relevance, descending, then note id."""
    return sorted(rows, key=lambda x: (-x.score, -x.relevance, x.note_id))[:limit]


__all__ = ["LeftOut", "Shown", "Why", "left_out", "strongest"]
