"""Recency: age in days and the per-tier decay curve, with ages from 0 to years."""

from __future__ import annotations

import itertools
import math
from datetime import UTC, datetime, timedelta, timezone

import pytest

from hivemind_memory.projections.ranking.config import DEFAULT, RankingConfig, TierDecay
from hivemind_memory.projections.ranking.recency import age_days, decay, recency

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("delta", "expected"),
    [
        (timedelta(0), 0.0),
        (timedelta(hours=6), 0.25),
        (timedelta(days=1, hours=12), 1.5),
        (timedelta(days=180), 180.0),
        (timedelta(days=730, seconds=8640), 730.1),
    ],
)
def test_age_days_is_fractional(delta: timedelta, expected: float) -> None:
    assert age_days(T0, T0 + delta) == pytest.approx(expected, abs=1e-12)


def test_age_days_clamps_future_notes_to_zero() -> None:
    assert age_days(T0 + timedelta(days=3), T0) == 0.0
    assert age_days(T0 + timedelta(seconds=1), T0) == 0.0


def test_age_days_is_timezone_correct() -> None:
    plus2 = timezone(timedelta(hours=2))
    created = datetime(2026, 1, 1, 14, 0, tzinfo=plus2)  # 12:00 UTC
    assert age_days(created, datetime(2026, 1, 2, 12, 0, tzinfo=UTC)) == pytest.approx(1.0)


def short_expected(d: float) -> float:
    return 0.35 + 0.65 * math.pow(0.5, d / 180)


@pytest.mark.parametrize("d", [0.0, 0.5, 1.0, 7.0, 30.0, 90.0, 180.0, 365.0, 730.0, 3650.0])
def test_short_tier_follows_contract_formula(d: float) -> None:
    assert recency("short", d, DEFAULT) == pytest.approx(short_expected(d), rel=1e-12)


def test_short_tier_contract_anchors() -> None:
    assert recency("short", 0.0, DEFAULT) == 1.0
    assert recency("short", 180.0, DEFAULT) == pytest.approx(0.675, abs=1e-12)
    year = recency("short", 365.0, DEFAULT)
    assert year == pytest.approx(0.35 + 0.65 * 0.5 ** (365 / 180), rel=1e-12)
    assert year == pytest.approx(0.5099, abs=1e-3)
    # the old "5% a day" rule would have left almost nothing after half a year
    assert 0.95**180 < 1e-3
    assert recency("short", 180.0, DEFAULT) > 600 * 0.95**180
    # never below the floor, even after decades
    assert recency("short", 36500.0, DEFAULT) == pytest.approx(0.35, abs=1e-12)
    assert recency("short", 36500.0, DEFAULT) >= 0.35


@pytest.mark.parametrize("d", [0.0, 1.0, 3.0, 6.0, 9.0, 30.0])
def test_scratch_tier_fades_fast(d: float) -> None:
    assert recency("scratch", d, DEFAULT) == pytest.approx(0.5 ** (d / 3), rel=1e-12)


def test_scratch_anchor_values() -> None:
    assert recency("scratch", 3.0, DEFAULT) == pytest.approx(0.5)
    assert recency("scratch", 6.0, DEFAULT) == pytest.approx(0.25)
    assert recency("scratch", 5000.0, DEFAULT) == pytest.approx(0.0, abs=1e-300)


@pytest.mark.parametrize("d", [0.0, 1.0, 180.0, 365.0, 10_000.0])
def test_longterm_never_decays(d: float) -> None:
    assert recency("longterm", d, DEFAULT) == 1.0


def test_recency_is_monotone_non_increasing_in_age() -> None:
    for tier in ("short", "scratch"):
        values = [recency(tier, float(d), DEFAULT) for d in range(0, 1000, 7)]
        assert all(a > b for a, b in itertools.pairwise(values) if b > 0.35 + 1e-9)
        assert all(a >= b for a, b in itertools.pairwise(values))


def test_tiers_differ_at_the_same_age() -> None:
    d = 30.0
    assert recency("scratch", d, DEFAULT) < recency("short", d, DEFAULT) < recency(
        "longterm", d, DEFAULT
    )


def test_unknown_tier_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown tier 'forever'"):
        recency("forever", 1.0, DEFAULT)


def test_custom_half_life_and_floor_change_recency() -> None:
    cfg = RankingConfig(
        short=TierDecay(half_life_days=30.0, floor=0.1),
        scratch=TierDecay(half_life_days=1.0, floor=0.2),
    )
    assert recency("short", 30.0, cfg) == pytest.approx(0.1 + 0.9 * 0.5)
    assert recency("short", 30.0, cfg) != recency("short", 30.0, DEFAULT)
    assert recency("scratch", 1.0, cfg) == pytest.approx(0.2 + 0.8 * 0.5)
    assert recency("scratch", 1.0, cfg) != recency("scratch", 1.0, DEFAULT)
    assert recency("scratch", 1e6, cfg) == pytest.approx(0.2)


def test_decay_clamps_negative_age() -> None:
    td = TierDecay(half_life_days=10.0, floor=0.0)
    assert decay(-5.0, td) == 1.0
    assert decay(10.0, td) == pytest.approx(0.5)
    assert math.isclose(decay(20.0, td), 0.25)
