"""``python -m bench scale memory`` at a tiny size: every row is measured (the figures are for
people; no timing or size assertion beyond the budget row having evicted)."""

from __future__ import annotations

import pytest

from bench import scale

pytestmark = [pytest.mark.redis_server]


def test_scale_memory_bench_measures_each_budget(capsys: pytest.CaptureFixture[str]) -> None:
    assert scale.main(["memory", "--namespaces", "3", "--notes", "60", "--budgets", "0,1"]) == 0
    out = capsys.readouterr().out
    assert "index memory of a 60-note namespace" in out
    assert "no budget, 1 worker(s)" in out and "budget 1 MiB, 1 worker(s)" in out
    assert "; 0 evicted)" in out  # no budget: nothing evicted
    assert "MiB of kept word sets and passages" in out
