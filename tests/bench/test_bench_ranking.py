"""Smoke test of the ranking micro-benchmark (small sizes)."""

from __future__ import annotations

import pytest

from bench.ranking import main


def test_quick_benchmark_prints_figures(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--quick", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "packing (exact_max_cells=4,000,000" in out
    assert "exact" in out and "greedy+swap" in out
    assert "index build" in out and "w1500 w2600" in out


def test_repeats_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--repeats", "0"])
    assert info.value.code == 2
    assert "--repeats must be >= 1" in capsys.readouterr().err
