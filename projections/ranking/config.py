"""The ranking config: every constant that shapes a score, a pack or an order lives here.

Defaults follow ../shared/CONTRACT.md. Override from TOML (``--config FILE`` or
``HIVEMIND_CONFIG``); unknown keys and out-of-range values are rejected with an error that
names the key.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import msgspec

from hivemind_memory.events.errors import ConfigError

Order = Literal["edges", "score", "chronological"]
Analyzer = Literal["plain", "english"]


class TierDecay(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Recency of a decaying tier: ``floor + (1 - floor) * 0.5 ** (age_days / half_life_days)``."""

    half_life_days: float
    floor: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.half_life_days) and self.half_life_days > 0):
            raise ValueError(
                f"half_life_days must be a finite number > 0, got {self.half_life_days}")
        if not (math.isfinite(self.floor) and 0.0 <= self.floor <= 1.0):
            raise ValueError(f"floor must be within [0, 1], got {self.floor}")


class RankingConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """All ranking constants. Frozen; build a new one to change anything."""

    longterm_uses: int = 5
    """A note with at least this many ``note.used`` events is ``longterm`` and never decays."""
    short: TierDecay = TierDecay(half_life_days=180.0, floor=0.35)
    """Decay of ordinary notes (``kind=note``)."""
    scratch: TierDecay = TierDecay(half_life_days=3.0, floor=0.0)
    """Decay of scratch notes (``kind=scratch``): fades fast, on purpose."""
    min_relevance: float = 0.0
    """A note is a candidate only if its relevance is > 0 and >= this."""
    per_note_overhead_tokens: int = 0
    """Added to each note's tokens to get its packing cost (separators, headers)."""
    order: Order = "edges"
    """Context order of the packed notes: ``edges``, ``score`` or ``chronological``."""
    exact_max_cells: int = 4_000_000
    """Exact packing while candidates x budget <= this; greedy + swap above."""
    bm25_k1: float = 1.2
    """BM25 term-frequency saturation."""
    bm25_b: float = 0.75
    """BM25 length normalisation (0 = none, 1 = full)."""
    analyzer: Analyzer = "plain"
    """How words match: ``plain`` (the tokens as they are) or ``english`` (Snowball English
    stems, English stop words dropped; ``projections.ranking.analyzer``)."""

    def __post_init__(self) -> None:
        if self.longterm_uses < 1:
            raise ValueError(f"longterm_uses must be >= 1, got {self.longterm_uses}")
        if not (math.isfinite(self.min_relevance) and 0.0 <= self.min_relevance <= 1.0):
            raise ValueError(f"min_relevance must be within [0, 1], got {self.min_relevance}")
        if self.per_note_overhead_tokens < 0:
            raise ValueError(
                f"per_note_overhead_tokens must be >= 0, got {self.per_note_overhead_tokens}"
            )
        if self.exact_max_cells < 0:
            raise ValueError(f"exact_max_cells must be >= 0, got {self.exact_max_cells}")
        if not (math.isfinite(self.bm25_k1) and self.bm25_k1 >= 0):
            raise ValueError(f"bm25_k1 must be a finite number >= 0, got {self.bm25_k1}")
        if not (math.isfinite(self.bm25_b) and 0.0 <= self.bm25_b <= 1.0):
            raise ValueError(f"bm25_b must be within [0, 1], got {self.bm25_b}")

    def digest(self) -> str:
        """A short stable fingerprint of every value (recorded with each served query). The
        ``analyzer`` key counts only when it is not ``plain``, so configs written before it
        existed keep their fingerprint (and as-of query ids)."""
        raw = msgspec.to_builtins(self)
        if raw["analyzer"] == "plain":
            del raw["analyzer"]
        return hashlib.sha256(msgspec.json.encode(raw)).hexdigest()[:16]


DEFAULT = RankingConfig()


def with_overrides(base: RankingConfig, overrides: Mapping[str, Any]) -> RankingConfig:
    """``base`` with some keys replaced; a tier table may set only some of its keys
    (``[short] half_life_days = 90`` keeps the short floor). Raises ``msgspec.ValidationError``
    naming the key for unknown keys and bad values."""
    merged = msgspec.to_builtins(base)
    for k, v in overrides.items():
        if isinstance(v, dict) and isinstance(merged.get(k), dict):
            merged[k] = {**merged[k], **v}
        else:
            merged[k] = v
    return msgspec.convert(merged, RankingConfig)


def config_from_toml(text: str, source: str = "<config>") -> RankingConfig:
    """Parse a TOML document over the defaults; any error names the source and the key."""
    try:
        raw: dict[str, Any] = msgspec.toml.decode(text)  # a TOML document is always a table
        return with_overrides(DEFAULT, raw)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise ConfigError(f"{source}: invalid ranking config: {exc}") from exc


def load_config(path: str | Path | None) -> RankingConfig:
    """The config from a TOML file, or the defaults when ``path`` is None."""
    if path is None:
        return DEFAULT
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read ranking config: {exc}") from exc
    return config_from_toml(text, str(p))
