"""``python -m bench scale-cpu`` at a tiny size: every line is printed, and the candidate stage
answers as the scan on its corpus (no timing assertions: the figures are for people)."""

from __future__ import annotations

import re

import pytest

from bench import scale_cpu


def test_scale_cpu_bench_prints_each_size(capsys: pytest.CaptureFixture[str]) -> None:
    assert scale_cpu.main(["--sizes", "400", "--queries", "8"]) == 0
    out = capsys.readouterr().out
    assert "400 notes" in out and "after a restart" in out
    rows = re.findall(r"(selective|common-word) +CPU p50: scan .* same answer as the scan "
                      r"(\d+)/(\d+)", out)
    assert [r[0] for r in rows] == ["selective", "common-word"]
    assert all(r[1] == r[2] for r in rows)  # every proposal holds at this size
