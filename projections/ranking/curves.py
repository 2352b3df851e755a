"""Recency curves per tier, as a text table and a plot, beside the naive "5% a day" decay."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hivemind_memory.projections.ranking.config import RankingConfig
from hivemind_memory.projections.ranking.recency import recency

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
