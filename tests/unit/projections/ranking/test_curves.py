"""Recency curves: the table's numbers follow the config; the plot writes a file."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from hivemind_memory.projections.ranking.config import DEFAULT, RankingConfig, TierDecay
from hivemind_memory.projections.ranking.curves import table


def rows(text: str) -> dict[str, list[str]]:
    lines = [line.split() for line in text.splitlines()]
    return {cells[0]: cells[1:] for cells in lines}


def test_table_default_values() -> None:
    t = rows(table(DEFAULT))
    assert t["age_days"] == ["short", "scratch", "longterm", "5%/day"]
    assert list(t)[1:] == ["0", "1", "7", "14", "30", "60", "90", "180", "365", "730"]
    assert t["0"] == ["1.0000", "1.0000", "1.0000", "1.00e+00"]
    assert t["180"] == ["0.6750", "0.0000", "1.0000", "9.78e-05"]
    assert t["365"][0] == f"{0.35 + 0.65 * 0.5 ** (365 / 180):.4f}" == "0.5094"
    assert t["7"][1] == f"{0.5 ** (7 / 3):.4f}"


def test_table_custom_ages_and_config() -> None:
    cfg = RankingConfig(scratch=TierDecay(half_life_days=10.0, floor=0.2))
    t = rows(table(cfg, ages=(10, 2.5)))
    assert list(t) == ["age_days", "10", "2.5"]
    assert t["10"][1] == "0.6000"
    assert t["10"][3] == f"{0.95**10:.2e}"
    lines = table(cfg, ages=(10, 2.5)).splitlines()
    assert len({len(line) for line in lines}) == 1  # fixed width


@pytest.mark.slow
def test_plot_writes_an_image(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from hivemind_memory.projections.ranking.curves import plot

    out = plot(DEFAULT, tmp_path / "curves.png")
    assert out == tmp_path / "curves.png"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_says_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hivemind_memory.projections.ranking.curves import plot

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match=r"pip install 'hivemind\[plot\]'"):
        plot(DEFAULT, tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()
