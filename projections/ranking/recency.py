"""Recency: how much of a note's relevance survives its age. Pure; ``now`` is an argument."""

from __future__ import annotations

import math
from datetime import datetime

from hivemind_memory.projections.ranking.config import RankingConfig, TierDecay

SECONDS_PER_DAY = 86_400.0
"""Seconds in one day (ages are fractional days)."""


def age_days(created_at: datetime, now: datetime) -> float:
    """Age of a note in fractional days at ``now``, clamped at 0 (a note from the future is new).

    Both datetimes must be timezone-aware (the schema enforces UTC); mixing naive and aware
    raises ``TypeError`` rather than guessing.
    """
    return max(0.0, (now - created_at).total_seconds() / SECONDS_PER_DAY)


def decay(d: float, tier_decay: TierDecay) -> float:
    """``floor + (1 - floor) * 0.5 ** (d / half_life_days)`` for an age ``d`` in days."""
    floor = tier_decay.floor
    return floor + (1.0 - floor) * math.pow(0.5, max(0.0, d) / tier_decay.half_life_days)


def recency(tier: str, age_days: float, cfg: RankingConfig) -> float:
    """The recency multiplier of a note of ``tier`` at ``age_days``: in [floor, 1].

    ``longterm`` never decays; ``short`` and ``scratch`` use their own half-life and floor.
    """
    if tier == "longterm":
        return 1.0
    if tier == "short":
        return decay(age_days, cfg.short)
    if tier == "scratch":
        return decay(age_days, cfg.scratch)
    raise ValueError(f"unknown tier {tier!r}; expected 'longterm', 'short' or 'scratch'")
