"""Near-duplicates of a note being written: how much two texts say in the same words.

Pure (no Redis, no clock). The similarity is the Jaccard overlap of the two texts' sets of
analyzed terms (the config's analyzer: ``english`` stems and drops stop words), so "Deploys go
through ArgoCD" and "Deploys go through Flux" overlap in 2 of 4 terms (0.5: ``through`` is a
stop word), identical texts 1, texts with no term in common 0. The candidates come from a
query of the new text (the ranking finds the related notes, semantic ones included); this
measure only decides which of them are twins, in words a writer can check.
"""

from __future__ import annotations

from collections.abc import Iterable

from hivemind_memory.projections.ranking.analyzer import analyze
from hivemind_memory.projections.ranking.bm25_rules import tokenize
from hivemind_memory.projections.ranking.config import RankingConfig


def terms(text: str, cfg: RankingConfig) -> frozenset[str]:
    """The distinct analyzed terms of ``text``."""
    return frozenset(analyze(tokenize(text), cfg.analyzer))


def word_overlap(a: frozenset[str], b: frozenset[str]) -> float:
    """Jaccard overlap of two term sets in [0, 1] (two empty sets: 0, nothing to compare)."""
    if not a or not b:
        return 0.0
    both = len(a & b)  # the union's size from the sizes: no second set built
    return both / (len(a) + len(b) - both)


def near_duplicates(text: str, candidates: Iterable[tuple[str, str]], cfg: RankingConfig
                    ) -> list[tuple[str, float]]:
    """``(note_id, overlap)`` of the candidates ``(note_id, text)`` whose overlap with
    ``text`` is at least ``cfg.duplicate_threshold``, most similar first (ties by id),
    overlaps rounded to 6 decimals."""
    mine = terms(text, cfg)
    out = [(nid, round(word_overlap(mine, terms(t, cfg)), 6)) for nid, t in candidates]
    return sorted(((nid, o) for nid, o in out if o >= cfg.duplicate_threshold),
                  key=lambda x: (-x[1], x[0]))
