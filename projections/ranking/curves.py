"""Recency curves per tier, as a text table, a plot and sampled points (the browser explorer
draws them), beside the naive "5% a day" decay; and one note's recency over its life."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path

import msgspec

from hivemind_memory.projections.ranking.config import RankingConfig
from hivemind_memory.projections.ranking.recency import age_days, recency
from hivemind_memory.projections.state import tier_of

TIERS = ("short", "scratch", "longterm")
"""Tiers shown, in column order."""
DAILY_DECAY = 0.95
"""The naive rule the curves are compared with: keep 95% per day."""
DEFAULT_AGES = (0, 1, 7, 14, 30, 60, 90, 180, 365, 730)
"""Ages (days) in the table."""
PLOT_MAX_DAYS = 730
"""The plot spans 0..this many days."""


def table(cfg: RankingConfig, ages: Sequence[float] = DEFAULT_AGES) -> str:
    """A fixed-width table: age in days, the multiplier of each tier, and ``0.95 ** days``."""
    header = ["age_days", *TIERS, "5%/day"]
    rows = [header]
    for d in ages:
        cells = [f"{d:g}"]
        cells += [f"{recency(t, float(d), cfg):.4f}" for t in TIERS]
        cells.append(f"{DAILY_DECAY ** d:.2e}")
        rows.append(cells)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.rjust(w) for cell, w in zip(r, widths, strict=True)) for r in rows
    )


def plot(cfg: RankingConfig, out_path: str | Path) -> Path:
    """Draw each tier's curve and "5% a day" over 0..730 days into ``out_path`` (PNG, SVG...)."""
    try:
        from matplotlib.figure import Figure  # no pyplot: no global state, no GUI backend
    except ImportError as exc:
        raise ImportError(
            "`hivemind curves --out` needs matplotlib: pip install 'hivemind[plot]'"
        ) from exc
    days = list(range(PLOT_MAX_DAYS + 1))
    fig = Figure(figsize=(8, 4.5))
    ax = fig.subplots()
    for tier in TIERS:
        label = tier
        if tier != "longterm":
            decay = cfg.short if tier == "short" else cfg.scratch
            label = f"{tier} (half-life {decay.half_life_days:g} d, floor {decay.floor:g})"
        ax.plot(days, [recency(tier, float(d), cfg) for d in days], label=label)
    ax.plot(days, [DAILY_DECAY**d for d in days], linestyle="--", label="5% a day")
    ax.set_xlabel("age (days)")
    ax.set_ylabel("recency multiplier")
    ax.set_ylim(0, 1.05)
    ax.set_xlim(0, PLOT_MAX_DAYS)
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title("hivemind recency by tier")
    out = Path(out_path)
    fig.savefig(out, dpi=100, bbox_inches="tight")
    return out


class CurvePoint(msgspec.Struct, frozen=True, array_like=True):
    """One sample of a note's recency over its life: when, its age, uses by then, its tier,
    its recency multiplier and the seed's ``0.95 ** age`` (a JSON array of 6 values)."""

    at: datetime
    age_days: float
    uses: int
    tier: str
    recency: float
    five_percent: float


def note_curve(created_at: datetime, kind: str, use_times: Sequence[datetime],
               cfg: RankingConfig, until: datetime, points: int = 120) -> list[CurvePoint]:
    """A note's recency from its creation to ``until``, ``points`` samples (plus one at each
    use that promotes it), with the tier it had at each instant: uses counted up to that
    instant, as an ``--as-of`` query at that time would count them."""
    uses = sorted(use_times)
    span = max((until - created_at).total_seconds(), 0.0)
    step = span / max(points - 1, 1)
    instants = [created_at + timedelta(seconds=step * i) for i in range(points)]
    if len(uses) >= cfg.longterm_uses:
        promoted = uses[cfg.longterm_uses - 1]
        instants += [promoted - timedelta(microseconds=1), promoted]
    out: list[CurvePoint] = []
    for t in sorted(x for x in instants if created_at <= x <= until or x == created_at):
        n = bisect.bisect_right(uses, t)
        tier = tier_of(n, kind, cfg)
        age = age_days(created_at, t)
        out.append(CurvePoint(t, round(age, 6), n, tier, round(recency(tier, age, cfg), 6),
                              float(f"{DAILY_DECAY ** age:.6g}")))
    return out


def tier_points(cfg: RankingConfig, days: int = PLOT_MAX_DAYS, step: int = 5
                ) -> dict[str, list[float]]:
    """Each tier's multiplier and ``0.95 ** d`` at ``d = 0, step, 2 step, ..., days``."""
    ages = range(0, days + 1, step)
    out = {t: [round(recency(t, float(d), cfg), 6) for d in ages] for t in TIERS}
    out["five_percent"] = [float(f"{DAILY_DECAY ** d:.6g}") for d in ages]
    return out
