"""The ranking pipeline over a ``NamespaceIndex``'s columns: the rule of the per-note
reference ``tests.reference.rank``, vectorised. Pure: ``now`` and the config are arguments.

Tier, age, recency and score are computed with numpy over the candidates' slots, with the
same IEEE operations in the same order as ``rank`` (``age_days``, ``recency``), except the
power ``0.5 ** (age / half_life)``: numpy's vectorised ``power`` may differ from the C
library's ``pow`` in the last bit (it does on AVX-512 machines), so it goes through
``math.pow`` one candidate at a time. Packing runs on arrays (``pack_arrays``); only the
packed notes (and, with ``explain``, every candidate) become result structs. A differential
test checks that the result equals ``rank`` over the same notes and relevance.
"""

from __future__ import annotations

import math
from datetime import datetime
from itertools import repeat

import numpy as np

from hivemind_memory.projections.columns import FloatArray, IntArray, from_micros, micros
from hivemind_memory.projections.config import RankingConfig
from hivemind_memory.projections.index import NamespaceIndex
from hivemind_memory.projections.ordering import by_score, order
from hivemind_memory.projections.packing import pack_arrays
from hivemind_memory.projections.rank import DECIMALS, PRINTS_AS_ZERO, RankResult, ScoredNote
from hivemind_memory.projections.recency import SECONDS_PER_DAY
from hivemind_memory.projections.state import Tier

_TIERS: tuple[Tier, Tier, Tier] = ("short", "scratch", "longterm")


def rank_index(idx: NamespaceIndex, slots: IntArray, relevance: FloatArray, *, agent: str,
               now: datetime, budget: int, cfg: RankingConfig,
               explain: bool = True) -> RankResult:
    """``rank`` of the notes at ``slots`` of ``idx`` with ``relevance`` (parallel arrays, e.g.
    from ``NamespaceIndex.relevance_slots``)."""
    cols = idx.cols
    keep = ((relevance > PRINTS_AS_ZERO) & (relevance >= cfg.min_relevance)
            & cols.visible(agent)[slots])
    s = slots[keep]
    rel = relevance[keep]
    # tier code: 0 short, 1 scratch, 2 longterm (tier_of)
    tier = np.where(cols.uses[s] >= cfg.longterm_uses, 2, np.where(cols.scratch[s], 1, 0))
    # age_days: (now - created_at).total_seconds() / SECONDS_PER_DAY, clamped at 0
    age = np.maximum(((micros(now) - cols.created_us[s]) / 1e6) / SECONDS_PER_DAY, 0.0)
    rec = np.ones(len(s), np.float64)
    for code, decay in ((0, cfg.short), (1, cfg.scratch)):
        at = np.flatnonzero(tier == code)
        if len(at):
            x = (np.maximum(age[at], 0.0) / decay.half_life_days).tolist()
            p = np.fromiter(map(math.pow, repeat(0.5), x), np.float64, len(x))
            rec[at] = decay.floor + (1.0 - decay.floor) * p
    score = rel * rec
    ids = cols.ids
    costs = cols.tokens[s] + cfg.per_note_overhead_tokens
    packed = pack_arrays(lambda j: [ids[i] for i in s[j].tolist()], costs, score, budget,
                         cfg.exact_max_cells)
    chosen = set(packed.chosen)
    if explain:
        at = np.arange(len(s))
    else:  # only the packed notes become structs
        at = np.flatnonzero(np.isin(s, [cols.slot[k] for k in packed.chosen]))
    sa = s[at]
    rows = zip(sa.tolist(), tier[at].tolist(), rel[at].tolist(), rec[at].tolist(),
               score[at].tolist(), age[at].tolist(), costs[at].tolist(),
               cols.texts.many(sa.tolist()), cols.tokens[sa].tolist(), cols.uses[sa].tolist(),
               cols.created_us[sa].tolist(), strict=True)
    every: list[ScoredNote] = []
    for slot, t, r, rc, sc, a, cost, text, tokens, uses, created in rows:
        key = ids[slot]
        every.append(ScoredNote(
            note_id=key, text=text, tokens=tokens, cost=cost,
            score=round(sc, DECIMALS), relevance=round(r, DECIMALS),
            recency=round(rc, DECIMALS), tier=_TIERS[t], uses=uses,
            age_days=round(a, DECIMALS), created_at=from_micros(created), chosen=key in chosen))
    picked = [c for c in every if c.chosen]
    candidates = by_score(every) if explain else []
    return RankResult(
        used=packed.total_cost,
        method=packed.method,
        upper_bound=round(packed.upper_bound, DECIMALS),
        notes=order(picked, cfg.order),
        candidates=candidates,
    )

